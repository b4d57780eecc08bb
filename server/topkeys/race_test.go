//go:build race

package topkeys

// raceEnabled shortens the tests that run on one goroutine: the race detector finds nothing in
// them and makes them ten times slower.
const raceEnabled = true
