package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/storetest"

	"github.com/sluicehq/sluice"
)

// TestCalendarWindows checks calendar quotas across local midnights, days of 23 and 25 hours and
// month ends on Redis and the memory store alike.
func TestCalendarWindows(t *testing.T) {
	rs, _, _ := newStore(t)
	storetest.CalendarWindows(t, rs)
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
