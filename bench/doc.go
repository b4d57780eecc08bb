// Package bench compares sluice with its peers, golang.org/x/time/rate and
// github.com/sethvargo/go-limiter (memorystore), side by side in one `go test -bench` run.
//
// It is a separate module so that the peers never enter sluice's own go.mod. The benchmarks and
// the way to read them are described in ../docs/benchmarks.md; reproduce with
//
//	cd bench && go test -run '^$' -bench . -cpu 1,2 -count 5 -benchtime 1s ./...
package bench
