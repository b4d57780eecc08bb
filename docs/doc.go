// Package docs holds sluice's documentation. It has no code: its tests check that the figures
// docs/sizing.md and docs/leases.md cite are the ones docs/benchmarks.md shows (docs_test.go), and
// that every package keeps to the import rules of docs/architecture.md (architecture_test.go).
package docs
