package memory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/internal/storetest"
	"github.com/sluicehq/sluice/store/memory"
)

func TestConcurrencyContract(t *testing.T) {
	storetest.Concurrency(t, func(t *testing.T, n int) []concurrency.Store {
		st := openStore(t, memory.Config{})
		cs := make([]concurrency.Store, n)
		for i := range cs {
			cs[i] = st
		}
		return cs
	})
}

// TestConcurrencyClosed: every operation after Close is ErrClosed; through the front door, bad
// input is still named first.
func TestConcurrencyClosed(t *testing.T) {
	st := memory.New(memory.Config{SweepInterval: -1})
	if _, err := st.Admit(bg, epoch0, "jobs", "k", "h0", 1, 1000); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := st.Admit(bg, epoch0, "jobs", "k", "h1", 1, 1000); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Admit after Close: %v", err)
	}
	if err := st.Heartbeat(bg, epoch0, "jobs", "k", "h0", 1000); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Heartbeat after Close: %v", err)
	}
	if err := st.Release(bg, "jobs", "k", "h0"); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("Release after Close: %v", err)
	}
	if _, err := concurrency.New(st).Admit(bg, "jobs", "k", "h1", 0, 1000); !errors.Is(err, sluice.ErrInvalid) {
		t.Errorf("bad Admit after Close: %v", err)
	}
}

// TestConcurrencyConfigClock: now 0 is Config.Now's clock, and a lease ends when that clock reaches
// its expiry.
func TestConcurrencyConfigClock(t *testing.T) {
	clock := newManualClock(epoch0)
	st := openStore(t, memory.Config{Now: clock.Now})
	ctx := context.Background()
	if a, err := st.Admit(ctx, 0, "jobs", "k", "h0", 1, 1000); err != nil || !a.Allowed {
		t.Fatalf("Admit: %+v, %v", a, err)
	}
	clock.Set(epoch0 + 400)
	if a, err := st.Admit(ctx, 0, "jobs", "k", "h1", 1, 1000); err != nil || a.Allowed || a.RetryAfterMs != 600 {
		t.Fatalf("Admit of a second holder: %+v, %v; want denied, retry 600", a, err)
	}
	clock.Set(epoch0 + 1000)
	if err := st.Heartbeat(ctx, 0, "jobs", "k", "h0", 1000); !errors.Is(err, concurrency.ErrNotHeld) {
		t.Fatalf("Heartbeat of an expired holder: %v", err)
	}
	if a, err := st.Admit(ctx, 0, "jobs", "k", "h1", 1, 1000); err != nil || !a.Allowed {
		t.Fatalf("Admit after expiry: %+v, %v", a, err)
	}
}

func TestConcurrencyAdmitReleaseAllocs(t *testing.T) {
	st := openStore(t, memory.Config{Now: fixedNow(epoch0)})
	ctx := context.Background()
	if _, err := st.Admit(ctx, 0, "jobs", "k", "other", 10, 60_000); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if a, err := st.Admit(ctx, 0, "jobs", "k", "h", 10, 60_000); err != nil || !a.Allowed {
			t.Fatal(a, err)
		}
		if err := st.Heartbeat(ctx, 0, "jobs", "k", "h", 60_000); err != nil {
			t.Fatal(err)
		}
		if err := st.Release(ctx, "jobs", "k", "h"); err != nil {
			t.Fatal(err)
		}
	})
	// The map's copy of the holder; nothing else.
	if allocs > 1 {
		t.Errorf("%v allocations per Admit, Heartbeat and Release, want at most 1", allocs)
	}
}
