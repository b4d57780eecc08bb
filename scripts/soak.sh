#!/usr/bin/env bash
# soak.sh: `sluice serve` on Redis and on PostgreSQL under a bounded mixed load for DURATION, sampled
# from /metrics every INTERVAL; exits 1 unless memory, goroutines and open fds stayed flat and no
# check was decided by the fail mode. docs/soak.md explains the load and the verdict.
#
#   bash scripts/soak.sh                    # both stores, 10 minutes
#   DURATION=60s STORES=redis bash scripts/soak.sh
#
# Environment: REDIS_URL (redis://127.0.0.1:6379), PG_URL (postgres://postgres@127.0.0.1:5432/test;
# the soak uses its own schema, sluice_soak, dropped before and after), STORES ("redis postgres"),
# DURATION (10m; s, m and h units), INTERVAL (10s), RATE (600: checks a second a store, in all),
# TOLERANCE (10: percent the last third of the samples may grow over the first), SLUICE (a sluice
# binary to run instead of building this one).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/lib.sh

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
PG_URL=${PG_URL:-postgres://postgres@127.0.0.1:5432/test}
STORES=${STORES:-redis postgres}
DURATION=${DURATION:-10m}
INTERVAL=${INTERVAL:-10s}
TOLERANCE=${TOLERANCE:-10}
RATE=${RATE:-600}
SCHEMA=sluice_soak

# seconds turns a duration such as 90s, 10m or 1h30m into seconds.
seconds() {
	local d=$1 total=0
	while [[ $d =~ ^([0-9]+)([smh])(.*)$ ]]; do
		case ${BASH_REMATCH[2]} in
		s) total=$((total + BASH_REMATCH[1])) ;;
		m) total=$((total + BASH_REMATCH[1] * 60)) ;;
		h) total=$((total + BASH_REMATCH[1] * 3600)) ;;
		esac
		d=${BASH_REMATCH[3]}
	done
	[[ -z $d && $total -gt 0 ]] || { echo "soak: bad duration $1 (want e.g. 90s, 10m, 1h30m)" >&2; exit 2; }
	echo "$total"
}
duration=$(seconds "$DURATION")
interval=$(seconds "$INTERVAL")

work=$(mktemp -d)
pids=()
dropSchema() {
	psql "$PG_URL" -qc "set client_min_messages = warning; drop schema if exists $SCHEMA cascade" >/dev/null 2>&1 || true
}
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [[ $STORES == *postgres* ]]; then dropSchema; fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${SLUICE:-} ]]; then
	cp "$SLUICE" "$work/sluice"
else
	go build -o "$work/sluice" ./cmd/sluice
fi

# serve starts sluice serve on store URL $1 for the store named $2 with the soak's policies (no
# storeTimeout, no failMode: the shipped defaults), waits until it is ready, and prints its HTTP
# and gRPC addresses.
serve() {
	local config="$work/$2.yaml" log="$work/$2.log"
	cat >"$config" <<EOF
store: $1
policies:
  soak-keys: {strategy: gcra, limit: 1000, period: 1s, burst: 100}
  soak-hot: {strategy: fixedWindow, limit: 100, window: 1s}
  soak-batch: {strategy: tokenBucket, capacity: 500, refillPerSec: 100}
EOF
	start_serve "$work/sluice" "$config" "$log" "$work/$2.pid"
}

# share prints the calls a second of a bench that makes fraction $1 of RATE's checks in calls of $2.
share() { awk -v r="$RATE" -v f="$1" -v b="$2" 'BEGIN { printf "%.2f", r * f / b }'; }

# bench runs one sluice bench against store $1 in the background: its name $2, then bench flags.
# It runs a few seconds past DURATION, so that the last sample is taken under the load.
bench() {
	local store=$1 name=$2
	shift 2
	"$work/sluice" bench --duration "$((duration + 5))s" "$@" >"$work/bench-$store-$name.txt" 2>"$work/bench-$store-$name.err" &
	pids+=($!)
	echo "$!" >>"$work/benches"
	echo "$store $name" >>"$work/bench-names"
}

# sample prints, for the server at HTTP address $1: RSS in MiB, goroutines, open fds, fail-mode
# decisions, store errors, the timeouts among them, and decisions, each summed over its labels (an
# absent series is 0).
sample() {
	curl -sf "http://$1/metrics" | awk '
		/^#/ { next }
		{ name = $1; sub(/\{.*/, "", name); v[name] += $NF }
		/^sluice_store_errors_total\{.*kind="timeout"/ { timeouts += $NF }
		END {
			printf "%.1f %d %d %d %d %d %d\n", v["process_resident_memory_bytes"] / 1048576, v["go_goroutines"],
				v["process_open_fds"], v["sluice_fail_mode_decisions_total"], v["sluice_store_errors_total"],
				timeouts, v["sluice_decisions_total"]
		}'
}

echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores, stores: $STORES, $DURATION, a sample every $INTERVAL"
: >"$work/benches"
: >"$work/bench-names"
declare -A httpOf
for store in $STORES; do
	case $store in
	redis) url=$REDIS_URL ;;
	postgres)
		dropSchema
		url=$PG_URL
		[[ $url == *\?* ]] && url+="&" || url+="?"
		url+="sluice_schema=$SCHEMA"
		;;
	*) echo "soak: unknown store $store" >&2; exit 2 ;;
	esac
	read -r http grpc < <(serve "$url" "$store") || true
	[[ -f $work/$store.pid ]] && pids+=("$(cat "$work/$store.pid")")
	[[ -n ${grpc:-} ]] || exit 2
	httpOf[$store]=$http
	# The mix: many keys over gRPC and HTTP, one hot key over both, CheckMany batches over both.
	# The load is bounded as production traffic is, in rate (RATE checks a second a store, shared
	# as below) and in concurrency (12 callers a store): a closed loop as fast as the store answers
	# would measure the store's saturation, where any timeout is passed sooner or later.
	bench "$store" keys-grpc --target "$grpc" --proto grpc --policy soak-keys --keys 100000 --concurrency 4 --rate "$(share 0.3 1)"
	bench "$store" keys-http --target "$http" --proto http --policy soak-keys --keys 100000 --concurrency 2 --rate "$(share 0.15 1)"
	bench "$store" hot-grpc --target "$grpc" --proto grpc --policy soak-hot --keys 1 --concurrency 2 --rate "$(share 0.15 1)"
	bench "$store" hot-http --target "$http" --proto http --policy soak-hot --keys 1 --concurrency 2 --rate "$(share 0.1 1)"
	bench "$store" batch-grpc --target "$grpc" --proto grpc --policy soak-batch --keys 10000 --batch 16 --concurrency 1 --rate "$(share 0.15 16)"
	bench "$store" batch-http --target "$http" --proto http --policy soak-batch --keys 10000 --batch 8 --concurrency 1 --rate "$(share 0.15 8)"
done

printf '\n%-8s %6s  %9s %10s %5s %9s %12s %8s %12s\n' store t rss_MiB goroutines fds fail_mode store_errors timeouts decisions/s
declare -A last
start=$(date +%s)
for ((t = interval; t <= duration; t += interval)); do
	pause=$((start + t - $(date +%s)))
	((pause > 0)) && sleep "$pause"
	for store in $STORES; do
		read -r rss gor fds fail errs timeouts decisions < <(sample "${httpOf[$store]}") || { echo "soak: no metrics from $store" >&2; exit 1; }
		rate=$(((decisions - ${last[$store]:-0}) / interval))
		last[$store]=$decisions
		printf '%-8s %5ds  %9s %10s %5s %9s %12s %8s %12s\n' "$store" "$t" "$rss" "$gor" "$fds" "$fail" "$errs" "$timeouts" "$rate"
		echo "$rss $gor $fds $fail" >>"$work/samples-$store"
	done
done

# The benches end on their own after DURATION (plus their grace for calls in flight).
failed=0
mapfile -t benchPids <"$work/benches"
mapfile -t benchNames <"$work/bench-names"
echo
for i in "${!benchPids[@]}"; do
	code=0
	wait "${benchPids[$i]}" || code=$?
	read -r store name <<<"${benchNames[$i]}"
	f="$work/bench-$store-$name.txt"
	summary=$(awk '/^checks\/s/ { r = $2 } /^errors/ { e = $2 } /^latency/ { p = $5 " " $6 } END { printf "%s checks/s, errors %s, %s", r, e, p }' "$f")
	echo "bench $store $name: $summary"
	if ((code != 0)); then
		echo "  sluice bench exited $code: $(head -c 300 "$work/bench-$store-$name.err")" >&2
		failed=1
	fi
done

# verdict: for each of RSS, goroutines and fds, the mean of the last third of the samples must not
# exceed the first third's by more than TOLERANCE percent (or a small absolute slack, so that 40
# goroutines becoming 45 is not a leak); the fail-mode count must be 0.
echo
for store in $STORES; do
	verdict=$(awk -v tol="$TOLERANCE" '
		{ for (i = 1; i <= 3; i++) x[NR, i] = $i; fail = $4 }
		END {
			n = NR; k = int(n / 3); if (k < 1) k = 1
			split("rss goroutines fds", names, " ")
			split("4 10 8", slack, " ")
			ok = 1
			for (i = 1; i <= 3; i++) {
				a = 0; b = 0
				for (j = 1; j <= k; j++) { a += x[j, i]; b += x[n - k + j, i] }
				a /= k; b /= k
				flat = b <= a * (1 + tol / 100) || b - a <= slack[i]
				printf "%s %.1f -> %.1f (%+.1f%%) %s; ", names[i], a, b, (a > 0 ? 100 * (b - a) / a : 0), (flat ? "flat" : "GROWING")
				if (!flat) ok = 0
			}
			printf "fail-mode decisions %d", fail
			if (fail > 0) ok = 0
			printf "\n%s\n", ok ? "PASS" : "FAIL"
		}' "$work/samples-$store")
	echo "$store: $(head -n 1 <<<"$verdict")"
	echo "$store: $(tail -n 1 <<<"$verdict")"
	if [[ $(tail -n 1 <<<"$verdict") != PASS ]]; then
		failed=1
		# What the server logged of its store's failures: counts by kind and the last error.
		grep -a 'level=WARN' "$work/$store.log" | tail -n 3 | cut -c1-400 | sed "s/^/  $store log: /"
	fi
done
exit $failed
