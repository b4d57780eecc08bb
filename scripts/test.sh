#!/usr/bin/env bash
# test.sh: sluice's tests, as `make test` runs them: gofmt, vet, staticcheck, the race tests, the
# conformance vectors on every store, the Python and TypeScript clients' tests, and one run of every
# benchmark. It changes nothing on the
# machine: it needs Go, and a Redis and a PostgreSQL it can reach, and says which are missing.
# (.ci/run installs and starts them on a CI machine, then runs this.)
#
# Environment: SLUICE_REDIS_URL (redis://127.0.0.1:6379), SLUICE_POSTGRES_URL
# (postgres://postgres@127.0.0.1:5432/test), the same the tests read.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n== %s\n' "$*"; }
fail() {
	echo "test: $*" >&2
	exit 1
}

REDIS_URL=${SLUICE_REDIS_URL:-redis://127.0.0.1:6379}
PG_URL=${SLUICE_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}

# reachable reports whether a TCP connection to the host and port in URL $1 (default port $2) opens.
reachable() {
	local rest=${1#*://}
	rest=${rest#*@}
	rest=${rest%%[/?]*}
	local host=${rest%%:*} port=$2
	[[ $rest == *:* ]] && port=${rest##*:}
	timeout 2 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null
}

step "what the tests need"
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"
missing=()
command -v go >/dev/null || missing+=("Go (go on PATH; go.mod names the version)")
reachable "$REDIS_URL" 6379 || missing+=("a Redis at $REDIS_URL (or set SLUICE_REDIS_URL)")
reachable "$PG_URL" 5432 || missing+=("a PostgreSQL at ${PG_URL%%@*}@… (or set SLUICE_POSTGRES_URL); the tests use its database and schemas of their own")
if ((${#missing[@]})); then
	printf 'test: missing:\n' >&2
	printf '  - %s\n' "${missing[@]}" >&2
	echo "test: start them and run again; on a CI machine, bash .ci/run installs and starts them" >&2
	exit 1
fi
go version
echo "redis at $REDIS_URL and postgresql at ${PG_URL%%@*}@… answer"
# Tests that start servers of their own skip without these binaries (and fail under CI=true).
for bin in redis-server initdb nginx protoc; do
	found=$(command -v "$bin" || ls /usr/lib/postgresql/*/bin/"$bin" 2>/dev/null | head -n 1 || true)
	[[ -n $found ]] || echo "note: no $bin: the tests that need it skip (under CI=true they fail)"
done

bash scripts/lint.sh

step "go test"
go test -race -shuffle=on ./...

step "conformance"
shopt -s nullglob
vectors=(conformance/testdata/vectors/*.json)
shopt -u nullglob
((${#vectors[@]})) || fail "no vector files in conformance/testdata/vectors"
go run ./cmd/sluice conformance --vectors "${vectors[@]}"
# The vectors are a copy of the project's shared ones: where those are beside the clone, they are
# replayed too, and the copy must not have drifted from them.
shopt -s nullglob
shared=(../shared/vectors/*.json)
shopt -u nullglob
if ((${#shared[@]})); then
	go run ./cmd/sluice conformance --vectors "${shared[@]}"
	for v in "${shared[@]}"; do
		cmp -s "$v" "conformance/testdata/vectors/${v##*/}" || fail "conformance/testdata/vectors/${v##*/} differs from $v: copy it again"
	done
fi
go run ./cmd/sluice conformance --store "$REDIS_URL" --vectors "${vectors[@]}"
# A schema of this run's own, so that no earlier run's state is replayed against.
schema="sluice_conformance_$(date +%s)_$$"
[[ $PG_URL == *\?* ]] && sep="&" || sep="?"
go run ./cmd/sluice conformance --store "$PG_URL${sep}sluice_schema=$schema" --vectors "${vectors[@]}"
if command -v psql >/dev/null; then
	psql "$PG_URL" -qc "set client_min_messages = warning; drop schema if exists $schema cascade"
else
	echo "note: no psql: the schema $schema is left in the database"
fi

# The Python and TypeScript clients replay the vectors through every door, against this Redis and a
# sluice serve built from this tree. They need Debian's Python packages and Node 20 with npm.
step "python client"
PY=${SLUICE_PYTHON:-/usr/bin/python3}
if "$PY" -c 'import grpc, google.protobuf, grpc_tools, redis, pytest' 2>/dev/null; then
	SLUICE_REDIS_URL=$REDIS_URL "$PY" -m pytest -q -p no:cacheprovider clients/python
elif [[ ${CI:-} == true ]]; then
	fail "no Python at $PY with grpcio, protobuf, grpc_tools, redis and pytest (apt-get install python3-grpcio python3-protobuf python3-grpc-tools python3-redis python3-pytest)"
else
	echo "note: no Python at $PY with grpcio, protobuf, grpc_tools, redis and pytest: the Python client is not tested (apt-get install python3-grpcio python3-protobuf python3-grpc-tools python3-redis python3-pytest, or set SLUICE_PYTHON)"
fi

step "typescript client"
if command -v npm >/dev/null && node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' 2>/dev/null; then
	(cd clients/typescript && npm ci --no-audit --no-fund && SLUICE_REDIS_URL=$REDIS_URL npm test)
elif [[ ${CI:-} == true ]]; then
	fail "no Node 20 or later with npm: the TypeScript client cannot be tested"
else
	echo "note: no Node 20 or later with npm: the TypeScript client is not tested"
fi

# The operator console (/ui/) used in a real browser: Debian's Chromium driven by playwright-core,
# against a sluice serve built from this tree (server/console/e2e).
step "console in a browser"
CHROMIUM=${SLUICE_CHROMIUM:-/usr/bin/chromium}
if command -v npm >/dev/null && node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' 2>/dev/null && [[ -x $CHROMIUM ]]; then
	(cd server/console/e2e && npm ci --no-audit --no-fund && SLUICE_CHROMIUM=$CHROMIUM npm test)
elif [[ ${CI:-} == true ]]; then
	fail "no Node 20 or later with npm, or no Chromium at $CHROMIUM: the console cannot be tested in a browser (apt-get install chromium)"
else
	echo "note: no Node 20 or later with npm, or no Chromium at $CHROMIUM: the console is not tested in a browser (apt-get install chromium, or set SLUICE_CHROMIUM)"
fi

if [[ -f bench/go.mod ]]; then
	step "benchmarks (one iteration each)"
	(
		cd bench
		go test -run '^$' -bench . -benchtime 1x ./...
	)
fi

step "ok"
