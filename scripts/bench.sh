#!/usr/bin/env bash
# bench.sh: what make bench runs: the benchmarks of the library (./...) and of bench/, the peers
# beside sluice in one run, so that their ratios are measured side by side. docs/benchmarks.md
# names the narrower commands behind each table; this is the whole set, for a look before and
# after a change. It needs what make test needs (Go, Redis, PostgreSQL).
#
# Environment: BENCH (the -bench pattern, default .), BENCHTIME (default 1s), COUNT (default 1),
# and the stores' SLUICE_REDIS_URL and SLUICE_POSTGRES_URL as the tests read them.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

args=(-run '^$' -bench "${BENCH:-.}" -benchtime "${BENCHTIME:-1s}" -count "${COUNT:-1}" -benchmem)
printf '== %s\n' "go test ${args[*]} ./... (library)"
go test "${args[@]}" ./...
if [[ -f bench/go.mod ]]; then
	printf '\n== %s\n' "go test ${args[*]} ./... (bench/: sluice beside its peers)"
	(cd bench && go test "${args[@]}" ./...)
fi
