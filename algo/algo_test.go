package algo_test

import (
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/conformance"
)

// checker returns a check function over a private map of states for strategy s.
func checker(s sluice.Strategy) func(key string, now, cost int64) sluice.Decision {
	switch s := s.(type) {
	case sluice.GCRA:
		return newChecker(algo.NewGCRA(s).Check)
	case sluice.TokenBucket:
		return newChecker(algo.NewTokenBucket(s).Check)
	case sluice.FixedWindow:
		return newChecker(algo.NewFixedWindow(s).Check)
	case sluice.SlidingWindow:
		return newChecker(algo.NewSlidingWindow(s).Check)
	case sluice.SlidingWindowLog:
		return newChecker(algo.NewSlidingWindowLog(s).Check)
	}
	panic("unknown strategy")
}

func newChecker[S any](check func(S, int64, int64) (S, sluice.Decision)) func(string, int64, int64) sluice.Decision {
	states := map[string]S{}
	return func(key string, now, cost int64) sluice.Decision {
		st, d := check(states[key], now, cost)
		states[key] = st
		return d
	}
}

func vectorFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../conformance/testdata/vectors/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no vector files under ../conformance/testdata/vectors (err %v)", err)
	}
	return files
}

func TestVectors(t *testing.T) {
	for _, path := range vectorFiles(t) {
		f, err := conformance.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range f.Cases {
			t.Run(filepath.Base(path)+"/"+c.Name, func(t *testing.T) {
				check := checker(c.Strategy)
				for i, s := range c.Steps {
					for _, d := range conformance.Diff(s.Expect, check(s.Key, s.Now, s.Cost)) {
						t.Errorf("step %d (key %s now %d cost %d): %s: want %s, got %s", i, s.Key, s.Now, s.Cost, d.Field, d.Want, d.Got)
					}
				}
			})
		}
	}
}
