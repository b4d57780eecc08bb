package memory_test

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/conformance"
	"github.com/sluicehq/sluice/store/memory"
)

func newStore(t *testing.T, cfg memory.Config) *memory.Store {
	t.Helper()
	s := memory.New(cfg)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	files, _ := filepath.Glob("../../conformance/testdata/vectors/*.json")
	if len(files) == 0 {
		t.Fatal("no vector files under ../../conformance/testdata/vectors")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := conformance.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			res, err := conformance.Run(context.Background(), newStore(t, memory.Config{}), f, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, fl := range res.Failures {
				t.Error(fl)
			}
			if res.Passed == 0 || res.Failed > 0 {
				t.Fatalf("%d passed, %d failed", res.Passed, res.Failed)
			}
		})
	}
}

func TestHotKeyExact(t *testing.T) {
	const limit = 1000
	p := sluice.MustPolicy("hot", sluice.Limit{Strategy: sluice.FixedWindow{Limit: limit, WindowMs: 3_600_000}})
	lim, _ := sluice.New(newStore(t, memory.Config{Now: func() int64 { return 1_000_000 }}), p)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				d, err := lim.Check(context.Background(), "hot", "k", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != limit {
		t.Fatalf("admitted %d, want %d", admitted.Load(), limit)
	}
}
