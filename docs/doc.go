// Package docs holds sluice's documentation. It has no code: its test (docs_test.go) checks that
// the figures docs/sizing.md and docs/leases.md cite are the ones docs/benchmarks.md shows.
package docs
