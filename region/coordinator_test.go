package region_test

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/region"
)

// t0 is an interval boundary (a multiple of a minute) to run coordinators from.
const t0 int64 = 1_800_000_000_000

const minute = 60_000

var threeRegions = []string{"mumbai", "frankfurt", "virginia"}

// fleet returns a Coordinator per region of threeRegions in one scratch schema, splitting limit
// per minute.
func fleet(t *testing.T, limit int64) map[string]*region.Coordinator {
	t.Helper()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "region_test")
	out := map[string]*region.Coordinator{}
	for _, r := range threeRegions {
		c, err := region.New(pool, region.Config{Schema: schema, Name: "partner", Region: r, Regions: threeRegions, Limit: limit, IntervalMs: minute})
		if err != nil {
			t.Fatal(err)
		}
		out[r] = c
	}
	return out
}

func shares(t *testing.T, f map[string]*region.Coordinator, at int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for r, c := range f {
		s, err := c.Share(context.Background(), at)
		if err != nil {
			t.Fatal(err)
		}
		out[r] = s
	}
	return out
}

// rebalanceAll has every region rebalance at once and returns how many computed.
func rebalanceAll(t *testing.T, f map[string]*region.Coordinator, now int64) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	computed := 0
	for _, c := range f {
		wg.Go(func() {
			did, err := c.Rebalance(context.Background(), now)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if did {
				computed++
			}
		})
	}
	wg.Wait()
	return computed
}

func TestCoordinator(t *testing.T) {
	ctx := context.Background()
	f := fleet(t, 900)
	even := map[string]int64{"mumbai": 300, "frankfurt": 300, "virginia": 300}
	if got := shares(t, f, t0); !maps.Equal(got, even) {
		t.Fatalf("before any rebalance: %v, want the even split %v", got, even)
	}

	now := t0 + 54_000 // 90% into the interval
	for r, d := range map[string]int64{"mumbai": 600, "frankfurt": 200, "virginia": 100} {
		if err := f[r].Report(ctx, now, d); err != nil {
			t.Fatal(err)
		}
	}
	if n := rebalanceAll(t, f, now); n != 1 {
		t.Fatalf("%d rebalances computed, want exactly 1", n)
	}
	if n := rebalanceAll(t, f, now+1000); n != 0 {
		t.Fatalf("%d rebalances computed again in the same interval, want 0", n)
	}
	if got := shares(t, f, now); !maps.Equal(got, even) {
		t.Fatalf("before the boundary: %v, want the even split %v still", got, even)
	}
	want := map[string]int64{"mumbai": 600, "frankfurt": 200, "virginia": 100}
	if got := shares(t, f, t0+minute); !maps.Equal(got, want) {
		t.Fatalf("from the boundary: %v, want %v", got, want)
	}

	// A late, older report is ignored; a newer one replaces the last.
	if err := f["mumbai"].Report(ctx, now-1, 5); err != nil {
		t.Fatal(err)
	}
	next := now + minute
	if err := f["frankfurt"].Report(ctx, next, 600); err != nil {
		t.Fatal(err)
	}
	if n := rebalanceAll(t, f, next); n != 1 {
		t.Fatalf("%d rebalances computed in the next interval, want 1", n)
	}
	// mumbai's 600 and virginia's 100 from the interval before (still fresh), frankfurt's 600
	// from this one.
	want, _ = region.Rebalance(900, map[string]int64{"mumbai": 600, "frankfurt": 600, "virginia": 100}, region.DefaultFloor)
	if got := shares(t, f, t0+2*minute); !maps.Equal(got, want) {
		t.Fatalf("second interval: %v, want %v", got, want)
	}

	// Two intervals without reports: every region may be cut off and enforcing the share it read
	// last, so each keeps it.
	later := next + 2*minute
	if n := rebalanceAll(t, f, later); n != 1 {
		t.Fatalf("%d rebalances computed, want 1", n)
	}
	if got := shares(t, f, (later/minute+1)*minute); !maps.Equal(got, want) {
		t.Fatalf("after stale reports: %v, want the shares kept, %v", got, want)
	}
	// One region reports again: it divides what the two silent ones do not hold, the larger of
	// their two latest shares each (the same here).
	last := later + minute
	if err := f["virginia"].Report(ctx, last, 1000); err != nil {
		t.Fatal(err)
	}
	if n := rebalanceAll(t, f, last); n != 1 {
		t.Fatalf("%d rebalances computed, want 1", n)
	}
	kept := map[string]int64{"mumbai": want["mumbai"], "frankfurt": want["frankfurt"], "virginia": 900 - want["mumbai"] - want["frankfurt"]}
	if got := shares(t, f, (last/minute+1)*minute); !maps.Equal(got, kept) {
		t.Fatalf("one region back: %v, want %v", got, kept)
	}
	// The shares in force a minute before that rebalance are still there for a lagging clock.
	if got := shares(t, f, t0+2*minute); !maps.Equal(got, want) {
		t.Fatalf("shares a lagging region reads: %v, want %v", got, want)
	}
}

func TestCoordinatorKeepsLastShareWhenDown(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "region_test")
	cfg := region.Config{Schema: schema, Name: "partner", Region: "mumbai", Regions: threeRegions, Limit: 900, IntervalMs: minute}
	other := pgtest.Pool(t) // this region's own connections, closed below
	c, err := region.New(other, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Report(ctx, t0+1, 900); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Rebalance(ctx, t0+1); err != nil {
		t.Fatal(err)
	}
	// The two other regions never reported: they may be enforcing their even shares, so they
	// keep them.
	got, err := c.Share(ctx, t0+minute)
	if err != nil || got != 300 {
		t.Fatalf("Share = %d, %v; want 300", got, err)
	}
	other.Close()
	got, err = c.Share(ctx, t0+2*minute)
	if !errors.Is(err, sluice.ErrUnavailable) || got != 300 {
		t.Fatalf("with the database gone: Share = %d, %v; want the last share 300 and ErrUnavailable", got, err)
	}
	if err := c.Report(ctx, t0+minute, 1); !errors.Is(err, sluice.ErrUnavailable) {
		t.Fatalf("Report: %v, want ErrUnavailable", err)
	}
	if _, err := c.Rebalance(ctx, t0+minute); !errors.Is(err, sluice.ErrUnavailable) {
		t.Fatalf("Rebalance: %v, want ErrUnavailable", err)
	}
}

func TestCoordinatorInvalid(t *testing.T) {
	good := region.Config{Name: "partner", Region: "a", Regions: []string{"a", "b"}, Limit: 10, IntervalMs: 1000}
	tests := []struct {
		name  string
		edit  func(*region.Config)
		field string
	}{
		{"no name", func(c *region.Config) { c.Name = "" }, "name"},
		{"zero interval", func(c *region.Config) { c.IntervalMs = 0 }, "intervalMs"},
		{"floor of 1", func(c *region.Config) { c.Floor = 1 }, "floor"},
		{"zero limit", func(c *region.Config) { c.Limit = 0 }, "limit"},
		{"no regions", func(c *region.Config) { c.Regions = nil }, "regions"},
		{"duplicate region", func(c *region.Config) { c.Regions = []string{"a", "a"} }, "regions[1]"},
		{"region not listed", func(c *region.Config) { c.Region = "c" }, "region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			_, err := region.New(nil, cfg) // refused before the pool is touched
			wantInvalid(t, err, tt.field)
		})
	}

	f := fleet(t, 10)
	c := f["mumbai"]
	ctx := context.Background()
	wantInvalid(t, c.Report(ctx, t0, -1), "demand")
	wantInvalid(t, c.Report(ctx, 0, 1), "now")
	_, err := c.Rebalance(ctx, 1<<60)
	wantInvalid(t, err, "now")
	s, err := c.Share(ctx, -1)
	wantInvalid(t, err, "at")
	if s != 3 { // the share read last: none yet, so the even one (frankfurt 4, mumbai 3, virginia 3)
		t.Fatalf("Share on a bad instant returned %d, want mumbai's even share 3", s)
	}
}

func TestPolicy(t *testing.T) {
	p, err := region.Policy("partner", 600, minute)
	if err != nil {
		t.Fatal(err)
	}
	want := sluice.MustPolicy("partner", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 600, WindowMs: minute}})
	if !p.Equal(want) {
		t.Fatalf("Policy = %v, want %v", p.Limits(), want.Limits())
	}
	_, err = region.Policy("partner", 0, minute)
	wantInvalid(t, err, "share")
	_, err = region.Policy("partner", 5, 0)
	wantInvalid(t, err, "limits[0].windowMs")
}

func TestMigrations(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool, "region_test")
	cfg := region.Config{Schema: schema, Name: "n", Region: "a", Regions: []string{"a"}, Limit: 1, IntervalMs: 1}
	var wg sync.WaitGroup
	for range 4 { // regions starting together apply each migration once
		wg.Go(func() {
			if _, err := region.New(pool, cfg); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	q := pgx.Identifier{schema}.Sanitize()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+q+".migrations").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d migrations recorded (%v), want 1", n, err)
	}
	if _, err := pool.Exec(context.Background(), "INSERT INTO "+q+".migrations (version) VALUES (99)"); err != nil {
		t.Fatal(err)
	}
	if _, err := region.New(pool, cfg); !errors.Is(err, sluice.ErrSchemaNewer) {
		t.Fatalf("New on a newer schema: %v, want sluice.ErrSchemaNewer", err)
	}
}
