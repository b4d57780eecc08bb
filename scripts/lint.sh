#!/usr/bin/env bash
# lint.sh: what make lint checks, and make test first: gofmt, go vet and staticcheck over both
# modules (the library's and bench/'s). It needs Go alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v go >/dev/null || export PATH="$PATH:/usr/local/go/bin"

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l .)
[[ -z $unformatted ]] || { printf 'lint: gofmt needed on:\n%s\n' "$unformatted" >&2; exit 1; }

step "go vet"
go vet ./...

step "staticcheck"
# Pinned, from the module proxy: it catches dead code and deprecated calls that vet lets through.
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

if [[ -f bench/go.mod ]]; then
	step "go vet, staticcheck (bench/)"
	(
		cd bench
		go vet ./...
		go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	)
fi
