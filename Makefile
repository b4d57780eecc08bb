# make test: everything CI checks, on a machine that has Go and can reach a Redis and a PostgreSQL
# (scripts/test.sh says which are missing). It installs nothing: .ci/run does that on CI machines.
.PHONY: test
test:
	bash scripts/test.sh
