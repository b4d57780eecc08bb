# Shared by the scripts in this folder: source it, don't run it.

# start_serve BIN CONFIG LOG PIDFILE runs `BIN serve --config CONFIG` on free loopback ports, with
# its output in LOG and its pid in PIDFILE (the caller reads it: start_serve runs in a subshell
# when its output is read with `read < <(start_serve …)`), waits until /readyz answers, and prints
# its HTTP and gRPC addresses.
start_serve() {
	local bin=$1 config=$2 log=$3 pidfile=$4 line=""
	"$bin" serve --config "$config" --http 127.0.0.1:0 --grpc 127.0.0.1:0 >"$log" 2>&1 &
	echo $! >"$pidfile"
	for _ in $(seq 100); do
		line=$(grep -ao 'http=[^ ]* grpc=[^ ]*' "$log" || true)
		[[ -n $line ]] && break
		sleep 0.1
	done
	[[ -n $line ]] || { cat "$log" >&2; return 2; }
	local http=${line#http=}
	http=${http%% *}
	for _ in $(seq 100); do
		curl -sf "http://$http/readyz" >/dev/null && break
		sleep 0.1
	done
	curl -sf "http://$http/readyz" >/dev/null || { echo "sluice serve ($config) is not ready" >&2; cat "$log" >&2; return 2; }
	sed -E 's/http=([^ ]*) grpc=([^ ]*)/\1 \2/' <<<"$line"
}
