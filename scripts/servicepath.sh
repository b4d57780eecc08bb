#!/usr/bin/env bash
# servicepath.sh: Envoy's rate-limit API (ShouldRateLimit) side by side in one run: sluice serve on
# every store, envoyproxy/ratelimit on the same Redis, and the floor (bench/cmd/floor, a gRPC server
# answering OK with no work), plus sluice's own unary gRPC Check on the embedded store.
#
# Every server runs at once on loopback; each round drives each of them in turn with the same
# generator (sluice bench --proto envoy, or --proto grpc), so that the ratios within a round compare
# like with like on a shared machine. Around each Redis run it reads Redis's INFO cpu, and prints
# Redis's CPU per check. The table gives the median over the rounds of each figure, and of each run's
# ratio to the floor and to envoyproxy/ratelimit of the same round.
#
#   bash scripts/servicepath.sh                   # 3 rounds of 10 s, 64 callers, 4 conns, 10k keys
#   ROUNDS=5 DURATION=20s bash scripts/servicepath.sh
#
# The load: one descriptor a request (BATCH), domain "bench", entry (key, bench-N), N uniform over
# KEYS, a rule of 10^9 an hour, never reached. envoyproxy/ratelimit is built from the module proxy
# (RATELIMIT_VERSION) into a cache outside the repository, never committed, and runs with its
# defaults otherwise (REDIS_POOL_SIZE 10, no pipelining, no local cache, USE_STATSD=false).
#
# Environment: REDIS_URL (redis://127.0.0.1:6379), PG_URL (postgres://postgres@127.0.0.1:5432/test;
# empty: no PostgreSQL run), ROUNDS (3), DURATION (10s), CONCURRENCY (64), CONNS (4), KEYS (10000),
# BATCH (1), RATELIMIT_VERSION (v1.4.1-0.20260122083618-3fb702589d36, main of 2026-01-22),
# RATELIMIT_BIN (an envoyproxy/ratelimit service_cmd to run instead of building one), PERF (seconds:
# after the rounds, record `perf` profiles of sluice serve and redis-server over one Redis Envoy run of
# that long, and print their top symbols), BASE (a commit: sluice serve built from it runs beside
# this checkout's on every store, rows labelled @BASE, for a before/after in one run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib.sh

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
PG_URL=${PG_URL-postgres://postgres@127.0.0.1:5432/test}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONCURRENCY=${CONCURRENCY:-64}
CONNS=${CONNS:-4}
KEYS=${KEYS:-10000}
BATCH=${BATCH:-1}
RATELIMIT_VERSION=${RATELIMIT_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
PERF=${PERF:-0}
LIMIT=1000000000

redis_hostport=${REDIS_URL#redis://}
redis_hostport=${redis_hostport%%/*}
redis_host=${redis_hostport%:*}
redis_port=${redis_hostport##*:}

work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ -n $PG_URL ]]; then
		psql "$PG_URL" -qc 'set client_min_messages = warning; drop schema if exists sluice_servicepath cascade; drop schema if exists sluice_servicepath_base cascade' >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# Builds: this checkout's sluice and floor into the temporary folder; envoyproxy/ratelimit from the
# module proxy into a cache outside the repository (built from a temporary folder, so no go.mod of
# this repository is touched).
go build -o "$work/sluice" ./cmd/sluice
if [[ -n ${BASE:-} ]]; then
	git worktree add -q --detach "$work/base" "$BASE"
	(cd "$work/base" && go build -o "$work/sluice-base" ./cmd/sluice)
	git worktree remove --force "$work/base"
fi
(cd bench && go build -o "$work/floor" ./cmd/floor)
if [[ -n ${RATELIMIT_BIN:-} ]]; then
	rlbin=$RATELIMIT_BIN
else
	rlcache=${XDG_CACHE_HOME:-$HOME/.cache}/sluice-servicepath/ratelimit-$RATELIMIT_VERSION
	rlbin=$rlcache/service_cmd
	if [[ ! -x $rlbin ]]; then
		echo "building envoyproxy/ratelimit@$RATELIMIT_VERSION from the module proxy into $rlcache" >&2
		(cd "$work" && GOBIN=$rlcache GOFLAGS=-mod=mod go install "github.com/envoyproxy/ratelimit/src/service_cmd@$RATELIMIT_VERSION")
	fi
fi

# free_port prints a free loopback TCP port.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_port waits until 127.0.0.1:$1 accepts connections.
wait_port() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "nothing listens on 127.0.0.1:$1" >&2
	return 2
}

# The rule file both services read unchanged: the descriptor (key, K), each value counted apart.
mkdir -p "$work/rt/ratelimit/config"
cat >"$work/rt/ratelimit/config/bench.yaml" <<EOF
domain: bench
descriptors:
  - key: key
    rate_limit: {unit: hour, requests_per_unit: $LIMIT}
EOF

# serve_sluice starts sluice serve (the binary $3, this checkout's by default) on store $1, named
# $2, and prints its gRPC address.
serve_sluice() {
	cat >"$work/$2.yaml" <<EOF
store: $1
envoy: [$work/rt/ratelimit/config/bench.yaml]
policies:
  bench: {strategy: fixedWindow, limit: $LIMIT, window: 1h}
EOF
	local http grpc
	read -r http grpc < <(start_serve "${3:-$work/sluice}" "$work/$2.yaml" "$work/$2.log" "$work/$2.pid")
	[[ -n $grpc ]] || return 2
	echo "$grpc"
}

echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores, $(redis-cli -h "$redis_host" -p "$redis_port" INFO server | awk -F: '/^redis_version/ { sub("\r", "", $2); print "redis " $2 }'), envoyproxy/ratelimit $RATELIMIT_VERSION"
echo "load: $CONCURRENCY callers, $CONNS conns, $KEYS keys, $BATCH descriptor(s) a request, $DURATION a run, $ROUNDS rounds; servers and load generator share the machine"

# The servers, all at once: name, address.
declare -A addr
fport=$(free_port)
"$work/floor" --listen "127.0.0.1:$fport" >"$work/floor.log" 2>&1 &
pids+=($!)
wait_port "$fport"
addr[floor]=127.0.0.1:$fport

addr[memory]=$(serve_sluice memory memory)
pids+=("$(cat "$work/memory.pid")")
addr[redis]=$(serve_sluice "$REDIS_URL" redis)
pids+=("$(cat "$work/redis.pid")")
if [[ -n $PG_URL ]]; then
	psql "$PG_URL" -qc 'set client_min_messages = warning; drop schema if exists sluice_servicepath cascade; drop schema if exists sluice_servicepath_base cascade'
	pgurl=$PG_URL
	[[ $pgurl == *\?* ]] && pgurl+="&" || pgurl+="?"
	addr[postgres]=$(serve_sluice "${pgurl}sluice_schema=sluice_servicepath" postgres)
	pids+=("$(cat "$work/postgres.pid")")
fi

if [[ -n ${BASE:-} ]]; then
	for st in memory redis postgres; do
		[[ $st == postgres && -z $PG_URL ]] && continue
		url=$st
		[[ $st == redis ]] && url=$REDIS_URL
		[[ $st == postgres ]] && url=${pgurl}sluice_schema=sluice_servicepath_base
		addr[$st@base]=$(serve_sluice "$url" "$st-base" "$work/sluice-base")
		pids+=("$(cat "$work/$st-base.pid")")
	done
fi

rlgrpc=$(free_port)
env -i PATH="$PATH" HOME="$HOME" \
	RUNTIME_ROOT="$work/rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false RUNTIME_IGNOREDOTFILES=true \
	HOST=127.0.0.1 PORT="$(free_port)" GRPC_HOST=127.0.0.1 GRPC_PORT="$rlgrpc" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(free_port)" \
	BACKEND_TYPE=redis REDIS_SOCKET_TYPE=tcp REDIS_URL="$redis_hostport" USE_STATSD=false LOG_LEVEL=warn \
	"$rlbin" >"$work/ratelimit.log" 2>&1 &
pids+=($!)
rlpid=$!
wait_port "$rlgrpc"
addr[ratelimit]=127.0.0.1:$rlgrpc

# The runs of a round, in order: label, server, store, proto.
runs=("floor|floor (bare grpc-go ShouldRateLimit)|none|envoy"
	"memory|sluice serve, Envoy path|embedded|envoy"
	"memory-grpc|sluice serve, unary gRPC Check|embedded|grpc"
	"redis|sluice serve, Envoy path|Redis|envoy"
	"ratelimit|envoyproxy/ratelimit|Redis|envoy")
[[ -n $PG_URL ]] && runs+=("postgres|sluice serve, Envoy path|PostgreSQL|envoy")
if [[ -n ${BASE:-} ]]; then
	runs+=("memory@base|sluice serve @$BASE, Envoy path|embedded|envoy"
		"memory@base-grpc|sluice serve @$BASE, unary gRPC Check|embedded|grpc"
		"redis@base|sluice serve @$BASE, Envoy path|Redis|envoy")
	[[ -n $PG_URL ]] && runs+=("postgres@base|sluice serve @$BASE, Envoy path|PostgreSQL|envoy")
fi

# evalshas prints how many EVALSHA Redis has run: sluice's script runs, each deciding a batch.
evalshas() {
	redis-cli -h "$redis_host" -p "$redis_port" INFO commandstats |
		awk -F'[:=,]' '/^cmdstat_evalsha:/ { n = $3 } END { print n + 0 }'
}

redis_cpu() {
	redis-cli -h "$redis_host" -p "$redis_port" INFO cpu |
		awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%.6f\n", s }'
}

results=$work/results.tsv
for round in $(seq "$ROUNDS"); do
	for run in "${runs[@]}"; do
		IFS='|' read -r label server store proto <<<"$run"
		target=${addr[${label%-grpc}]}
		policy=bench
		before=""
		runs=""
		[[ $store == Redis ]] && before=$(redis_cpu) && runs=$(evalshas)
		"$work/sluice" bench --target "$target" --proto "$proto" --policy "$policy" --keys "$KEYS" \
			--concurrency "$CONCURRENCY" --conns "$CONNS" --batch "$BATCH" --duration "$DURATION" --json \
			>"$work/bench.json" 2>"$work/bench.err" || { cat "$work/bench.err" >&2; exit 1; }
		cpu=""
		[[ $store == Redis ]] && cpu=$(python3 -c "print(f'{($(redis_cpu) - $before) * 1e6:.0f}')") && runs=$(($(evalshas) - runs))
		python3 - "$work/bench.json" "$round" "$label" "$server" "$store" "${cpu:-}" "${runs:-}" >>"$results" <<'EOF'
import json, sys
b = json.load(open(sys.argv[1]))
round_, label, server, store, cpu, runs = sys.argv[2:8]
per = f"{int(cpu) / b['checks']:.1f}" if cpu else ""
batch = f"{b['checks'] / int(runs):.1f}" if runs and int(runs) > 0 else ""
print("\t".join([round_, label, server, store, f"{b['checksPerSec']:.0f}", f"{b['latencyMs']['p50']:.3f}",
                 f"{b['latencyMs']['p99']:.3f}", per, str(b["errors"]), str(b["denied"]), str(b["failOpen"]), batch]))
EOF
		tail -1 "$results" | awk -F'\t' '{ printf "round %s  %-12s %8s checks/s  p50 %s ms  p99 %s ms%s  errors %s denied %s fail-open %s\n",
			$1, $2, $5, $6, $7, ($8 == "" ? "" : "  Redis " $8 " µs CPU/check") ($12 == "" ? "" : ", " $12 " checks/script run"), $9, $10, $11 }'
	done
done

echo
python3 - "$results" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r[1], []).append(r)
rate = {(r[0], r[1]): float(r[4]) for r in rows}
med = statistics.median
print("| server | store | checks/s | p50 ms | p99 ms | Redis µs CPU/check | checks/script run | % of floor | × envoyproxy/ratelimit |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for label, rs in by.items():
    cps = med(float(r[4]) for r in rs)
    p50 = med(float(r[5]) for r in rs)
    p99 = med(float(r[6]) for r in rs)
    cpu = [float(r[7]) for r in rs if r[7]]
    batch = [float(r[11]) for r in rs if r[11]]
    floor = [float(r[4]) / rate[(r[0], "floor")] for r in rs if (r[0], "floor") in rate]
    peer = [float(r[4]) / rate[(r[0], "ratelimit")] for r in rs if (r[0], "ratelimit") in rate]
    print(f"| {rs[0][2]} | {rs[0][3]} | {cps:.0f} | {p50:.2f} | {p99:.2f} | {f'{med(cpu):.1f}' if cpu else '–'} | {f'{med(batch):.1f}' if batch else '–'} | "
          f"{100 * med(floor):.0f}% | {med(peer):.2f}× |")
bad = [r for r in rows if r[8] != "0" or r[9] != "0" or r[10] != "0"]
if bad:
    print(f"\n{len(bad)} runs had errors, denials or fail-open answers: the limits were meant never to be reached", file=sys.stderr)
    sys.exit(1)
EOF

# Where the time goes: perf profiles of sluice serve and redis-server over one more Redis Envoy run.
if [[ $PERF != 0 ]]; then
	rpid=$(redis-cli -h "$redis_host" -p "$redis_port" INFO server | awk -F: '/^process_id:/ { sub("\r", "", $2); print $2 }')
	spid=$(cat "$work/redis.pid")
	echo
	echo "== perf, ${PERF}s of the Redis Envoy path: sluice serve (pid $spid) and redis-server (pid ${rpid:-none})"
	perf record -F 499 -g -o "$work/serve.perf" -p "$spid" -- sleep "$PERF" >/dev/null 2>&1 &
	p1=$!
	p2=""
	if [[ -n $rpid ]]; then
		perf record -F 499 -g -o "$work/redis.perf" -p "$rpid" -- sleep "$PERF" >/dev/null 2>&1 &
		p2=$!
	fi
	"$work/sluice" bench --target "${addr[redis]}" --proto envoy --policy bench --keys "$KEYS" \
		--concurrency "$CONCURRENCY" --conns "$CONNS" --batch "$BATCH" --duration "${PERF}s" >/dev/null 2>&1 || true
	wait "$p1" ${p2:+"$p2"} || true
	for f in serve redis; do
		[[ -f $work/$f.perf ]] || continue
		echo "-- $f: top symbols, self time"
		# awk, not head: head would leave perf report a broken pipe, which pipefail makes the exit status.
		perf report -i "$work/$f.perf" --no-children -g none --stdio --sort symbol 2>/dev/null |
			awk '/^ +[0-9]/ && n++ < 25 { sub(/[ -]+$/, ""); print }'
	done
fi
