package redisstore_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/store/memory"
)

// TestCalendarWindows checks calendar quotas across the boundaries that make them calendar ones
// (local midnight, days of 23 and 25 hours, month ends) on Redis and the memory store alike.
func TestCalendarWindows(t *testing.T) {
	rs, _, _ := newStore(t)
	ms := memory.New(memory.Config{})
	defer ms.Close()
	ctx := context.Background()
	rome, _ := time.LoadLocation("Europe/Rome")
	day := sluice.MustPolicy("daily", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 3, Calendar: sluice.Day, TimeZone: "Europe/Rome"}})
	month := sluice.MustPolicy("monthly", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 4, Calendar: sluice.Month, TimeZone: "America/New_York"}})
	both := sluice.MustPolicy("plan",
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 2, Calendar: sluice.Day, TimeZone: "Europe/Rome"}},
		sluice.Limit{Strategy: sluice.FixedWindow{Limit: 5, Calendar: sluice.Month, TimeZone: "Europe/Rome"}})
	var instants []int64
	for _, at := range []time.Time{
		time.Date(2026, 3, 28, 23, 59, 59, 0, rome), // the night clocks go forward
		time.Date(2026, 3, 29, 0, 0, 0, 0, rome),
		time.Date(2026, 3, 29, 22, 59, 59, 0, rome),
		time.Date(2026, 3, 30, 0, 0, 0, 0, rome),
		time.Date(2026, 10, 25, 23, 59, 59, 0, rome), // a 25-hour day
		time.Date(2026, 10, 26, 0, 0, 0, 0, rome),
		time.Date(2028, 2, 29, 23, 0, 0, 0, rome), // leap day, and a New York month end
		time.Date(2028, 3, 1, 5, 59, 0, 0, rome),
		time.Date(2028, 3, 1, 6, 0, 0, 0, rome),
	} {
		ms := at.UnixMilli()
		instants = append(instants, ms-1, ms, ms+1)
	}
	for _, now := range instants {
		for _, p := range []*sluice.Policy{day, month, both} {
			for range 3 {
				d1, err1 := rs.Check(ctx, now, p, "k", 1)
				d2, err2 := ms.Check(ctx, now, p, "k", 1)
				if err1 != nil || err2 != nil || !reflect.DeepEqual(d1, d2) {
					t.Fatalf("%s at %s: redis %+v, %v; memory %+v, %v", p.Name(), time.UnixMilli(now).In(rome), d1, err1, d2, err2)
				}
			}
			f1, _ := rs.Forecast(ctx, now, p, "k", 1)
			f2, _ := ms.Forecast(ctx, now, p, "k", 1)
			if f1 != f2 {
				t.Fatalf("Forecast %s at %d: redis %+v, memory %+v", p.Name(), now, f1, f2)
			}
		}
	}
}

// TestCalendarWindowAtServerClock decides a daily quota at the Redis clock: the window ends at the
// next midnight in the policy's zone.
func TestCalendarWindowAtServerClock(t *testing.T) {
	rs, _, _ := newStore(t)
	p := sluice.MustPolicy("today", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, Calendar: sluice.Day, TimeZone: "Asia/Kolkata"}})
	d, err := rs.Check(context.Background(), 0, p, "k", 1)
	if err != nil {
		t.Fatal(err)
	}
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	reset := time.UnixMilli(d.ResetAt).In(kolkata)
	if !d.Allowed || d.Remaining != 9 || reset.Hour() != 0 || reset.Minute() != 0 || time.Until(reset) > 24*time.Hour+time.Minute {
		t.Errorf("decision %+v: resetAt %s, want the next midnight in Kolkata", d, reset)
	}
}
