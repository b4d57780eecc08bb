# make test: everything CI checks, on a machine that has Go and can reach a Redis and a PostgreSQL
# (scripts/test.sh says which are missing). It installs nothing: .ci/run does that on CI machines.
# make lint: gofmt, go vet and staticcheck alone (make test runs them first).
# make bench: every benchmark once over, sluice beside its peers (BENCH, BENCHTIME, COUNT narrow it).
.PHONY: test lint bench
test:
	bash scripts/test.sh
lint:
	bash scripts/lint.sh
bench:
	bash scripts/bench.sh
