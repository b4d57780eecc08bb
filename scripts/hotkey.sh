#!/usr/bin/env bash
# hotkey.sh: one hot key through `sluice serve` with its shipped defaults, side by side with what the
# store alone does with one row (pgbench updating one row at the same concurrency).
#
# For each store it starts `sluice serve` with a config that sets no storeTimeout and no failMode,
# drives one key with CONCURRENCY gRPC callers for DURATION (sluice bench), and checks that the run
# was exact (what the store counted equals what the callers were told was allowed) and that no
# answer came from the fail mode. On PostgreSQL it runs pgbench before each round, with the same
# number of clients each updating the same row, and prints the ratio.
#
#   bash scripts/hotkey.sh                       # both stores, 64 callers, 3 rounds of 10 s
#   STORES=postgres ROUNDS=5 bash scripts/hotkey.sh
#
# Environment: PG_URL (postgres://postgres@127.0.0.1:5432/test), REDIS_URL (redis://127.0.0.1:6379),
# STORES ("postgres redis"), CONCURRENCY (64), DURATION (10s), ROUNDS (3), SLUICE (a sluice binary to
# run instead of building this checkout's, e.g. to compare two builds).
# Exit status 1 when a run was not exact or had fail-mode decisions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib.sh

PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/test}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
STORES=${STORES:-postgres redis}
CONCURRENCY=${CONCURRENCY:-64}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-3}
LIMIT=1000000000

work=$(mktemp -d)
pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	psql "$PG_URL" -qc 'set client_min_messages = warning; drop table if exists sluice_hotkey_pgbench; drop schema if exists sluice_hotkey cascade' >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT

if [[ -n ${SLUICE:-} ]]; then
	cp "$SLUICE" "$work/sluice"
else
	go build -o "$work/sluice" ./cmd/sluice
fi
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores, $CONCURRENCY callers on one key, $DURATION a run"

# serve starts sluice serve on store $1, named $2, waits until it is ready, and prints its HTTP and
# gRPC addresses.
serve() {
	local config="$work/$2.yaml" log="$work/$2.log"
	cat >"$config" <<EOF
store: $1
policies:
  hot: {strategy: fixedWindow, limit: $LIMIT, window: 1h}
EOF
	start_serve "$work/sluice" "$config" "$log" "$work/$2.pid"
}

# metric sums the samples of a Prometheus series at HTTP address $1.
metric() {
	curl -sf "http://$1/metrics" | awk -v m="$2" '$1 ~ "^"m"({|$)" { s += $2 } END { print s + 0 }'
}

# pgbench_tps runs pgbench updating one row with CONCURRENCY clients and prints its TPS.
pgbench_tps() {
	psql "$PG_URL" -qc 'set client_min_messages = warning; drop table if exists sluice_hotkey_pgbench;
		create table sluice_hotkey_pgbench (id int primary key, n bigint); insert into sluice_hotkey_pgbench values (1, 0)'
	echo 'UPDATE sluice_hotkey_pgbench SET n = n + 1 WHERE id = 1;' >"$work/update.sql"
	pgbench -n -c "$CONCURRENCY" -j 2 -T "${DURATION%s}" -f "$work/update.sql" "$PG_URL" 2>/dev/null |
		awk '/^tps/ { printf "%.0f\n", $3 }'
}

failed=0
for store in $STORES; do
	case $store in
	postgres) url="$PG_URL"; [[ $url == *\?* ]] && url+="&" || url+="?"; url+="sluice_schema=sluice_hotkey" ;;
	redis) url="$REDIS_URL" ;;
	*) echo "unknown store $store" >&2; exit 2 ;;
	esac
	echo
	echo "== $store"
	[[ $store == postgres ]] && psql "$PG_URL" -qc 'set client_min_messages = warning; drop schema if exists sluice_hotkey cascade'
	read -r http grpc < <(serve "$url" "$store")
	pids+=("$(cat "$work/$store.pid")")
	for round in $(seq "$ROUNDS"); do
		tps=""
		[[ $store == postgres ]] && tps=$(pgbench_tps)
		before=$(metric "$http" sluice_fail_mode_decisions_total)
		# sluice bench names its keys bench-0 … bench-(keys-1): one key, then, is bench-0.
		curl -sf "http://$http/v1/reset" --json "{\"policy\":\"hot\",\"key\":\"bench-0\"}" >/dev/null || true
		"$work/sluice" bench --target "$grpc" --policy hot --keys 1 --concurrency "$CONCURRENCY" --duration "$DURATION" --json >"$work/bench.json" 2>/dev/null || true
		after=$(metric "$http" sluice_fail_mode_decisions_total)
		peek=$(curl -sf "http://$http/v1/peek" --json '{"policy":"hot","key":"bench-0"}')
		read -r rate allowed errors p99 < <(python3 -c '
import json, sys
b = json.load(open(sys.argv[1]))
print(round(b["checksPerSec"]), b["allowed"], b["errors"], round(b["latencyMs"]["p99"], 1))' "$work/bench.json")
		counted=$((LIMIT - $(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["remaining"])' "$peek")))
		fail=$((after - before))
		line="round $round: sluice $rate checks/s (p99 ${p99} ms), $allowed allowed, store counted $counted, fail-mode decisions $fail, errors $errors"
		[[ -n $tps ]] && line+="; pgbench $tps TPS; ratio $(python3 -c "print(f'{$rate / $tps:.2f}')")x"
		echo "$line"
		if [[ $counted != "$allowed" || $fail != 0 || $errors != 0 ]]; then
			echo "  NOT EXACT OR NOT DECIDED BY THE STORE" >&2
			failed=1
		fi
	done
	kill "${pids[-1]}"
done
exit $failed
