package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSweepPrunesLeases: Sweep drops expired holders and the keys they leave empty, and keeps
// the rest.
func TestSweepPrunesLeases(t *testing.T) {
	const at = int64(1_700_000_000_000)
	s := testStore(t, Config{Now: func() int64 { return at + 10_000 }})
	ctx := context.Background()
	for i := range 100 {
		ttl := int64(1000)
		if i%10 == 0 {
			ttl = 60_000
		}
		for h := range 3 {
			if a, err := s.Admit(ctx, at, "jobs", fmt.Sprint("k", i), fmt.Sprint("h", h), 3, ttl); err != nil || !a.Allowed {
				t.Fatalf("Admit: %+v, %v", a, err)
			}
		}
	}
	if keys, holders := s.leases.len(); keys != 100 || holders != 300 {
		t.Fatalf("%d keys and %d holders before the sweep, want 100 and 300", keys, holders)
	}
	s.Sweep() // at the latest instant given: nothing has expired
	if keys, holders := s.leases.len(); keys != 100 || holders != 300 {
		t.Fatalf("%d keys and %d holders after a sweep at the admissions' instant, want 100 and 300", keys, holders)
	}
	if _, err := s.Admit(ctx, at+5000, "jobs", "k1", "h0", 3, 1000); err != nil {
		t.Fatal(err)
	}
	s.Sweep()
	// Left: the ten keys of 60 s leases, and k1's new holder.
	if keys, holders := s.leases.len(); keys != 11 || holders != 31 {
		t.Fatalf("%d keys and %d holders after the sweep, want 11 and 31", keys, holders)
	}
	if err := s.Heartbeat(ctx, at+5000, "jobs", "k10", "h2", 1000); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseSetBookkeeping drives one key with random operations at random instants and compares
// every answer with a plain model that scans all holders.
func TestLeaseSetBookkeeping(t *testing.T) {
	s := testStore(t, Config{})
	ctx := context.Background()
	r := rand.New(rand.NewPCG(1, 2))
	model := map[string]int64{}
	now := int64(1_700_000_000_000)
	for step := range 20_000 {
		now += int64(r.IntN(40))
		h := fmt.Sprint("h", r.IntN(12))
		for k, exp := range model {
			if exp <= now {
				delete(model, k)
			}
		}
		ttl := int64(1 + r.IntN(300))
		switch op := r.IntN(10); {
		case op < 5:
			limit := int64(1 + r.IntN(8))
			a, err := s.Admit(ctx, now, "jobs", "k", h, limit, ttl)
			if err != nil {
				t.Fatal(err)
			}
			_, held := model[h]
			want := held || int64(len(model)) < limit
			if want {
				model[h] = now + ttl
			}
			var retry int64
			if !want {
				exps := make([]int64, 0, len(model))
				for _, e := range model {
					exps = append(exps, e)
				}
				retry = slices.Min(exps) - now
			}
			if a.Allowed != want || a.InFlight != int64(len(model)) || a.RetryAfterMs != retry {
				t.Fatalf("step %d: Admit(%s, limit %d): %+v, want allowed %v, %d in flight, retry %d", step, h, limit, a, want, len(model), retry)
			}
		case op < 8:
			err := s.Heartbeat(ctx, now, "jobs", "k", h, ttl)
			if _, held := model[h]; held != (err == nil) {
				t.Fatalf("step %d: Heartbeat(%s): %v, held %v", step, h, err, held)
			}
			if err == nil {
				model[h] = now + ttl
			}
		case op < 9:
			if err := s.Release(ctx, "jobs", "k", h); err != nil {
				t.Fatal(err)
			}
			delete(model, h)
		default:
			s.Sweep()
		}
	}
}
