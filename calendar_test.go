package sluice_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

// utc is the epoch ms of an RFC 3339 instant.
func utc(t *testing.T, s string) int64 {
	t.Helper()
	ts, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return ts.UnixMilli()
}

func TestFixedWindowBounds(t *testing.T) {
	rome, err := time.LoadLocation("Europe/Rome")
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) int64 {
		t.Helper()
		ts, err := time.ParseInLocation("2006-01-02 15:04:05.000", s, rome)
		if err != nil {
			t.Fatal(err)
		}
		return ts.UnixMilli()
	}
	tests := []struct {
		name       string
		window     sluice.FixedWindow
		now        int64
		start, end int64
	}{
		{"epoch minute", sluice.FixedWindow{Limit: 1, WindowMs: 60_000}, 1_700_000_012_345, 1_699_999_980_000, 1_700_000_040_000},
		{"whole-ms window", sluice.FixedWindow{Limit: 1, WindowMs: 1500}, 4000, 3000, 4500},
		{"day in Rome", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "Europe/Rome"},
			at("2026-07-14 13:00:00.000"), at("2026-07-14 00:00:00.000"), at("2026-07-15 00:00:00.000")},
		{"last ms of a day", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "Europe/Rome"},
			at("2026-07-14 23:59:59.999"), at("2026-07-14 00:00:00.000"), at("2026-07-15 00:00:00.000")},
		{"23-hour day (DST starts)", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "Europe/Rome"},
			at("2026-03-29 12:00:00.000"), at("2026-03-29 00:00:00.000"), at("2026-03-29 00:00:00.000") + 23*3_600_000},
		{"25-hour day (DST ends)", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "Europe/Rome"},
			at("2026-10-25 12:00:00.000"), at("2026-10-25 00:00:00.000"), at("2026-10-25 00:00:00.000") + 25*3_600_000},
		{"UTC day", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day}, 1_700_000_000_000, 1_699_920_000_000, 1_700_006_400_000},
		// Santiago's clocks went from 2010-10-10 00:00 (UTC-4) to 01:00 (UTC-3): that day has no
		// midnight and starts at 04:00 UTC. Its last hour before, the 9th ends there, not an hour early.
		{"the last hour before a skipped midnight", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "America/Santiago"},
			utc(t, "2010-10-10T03:30:00Z"), utc(t, "2010-10-09T04:00:00Z"), utc(t, "2010-10-10T04:00:00Z")},
		{"the day whose midnight is skipped", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "America/Santiago"},
			utc(t, "2010-10-10T04:30:00Z"), utc(t, "2010-10-10T04:00:00Z"), utc(t, "2010-10-11T03:00:00Z")},
		{"the day before a skipped day", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "Pacific/Apia"},
			utc(t, "2011-12-30T05:00:00Z"), utc(t, "2011-12-29T10:00:00Z"), utc(t, "2011-12-30T10:00:00Z")},
		{"a month starting at a skipped midnight", sluice.FixedWindow{Limit: 1, Calendar: sluice.Month, TimeZone: "America/Havana"},
			utc(t, "2012-04-15T12:00:00Z"), utc(t, "2012-04-01T05:00:00Z"), utc(t, "2012-05-01T04:00:00Z")},
		{"leap February", sluice.FixedWindow{Limit: 1, Calendar: sluice.Month, TimeZone: "Europe/Rome"},
			at("2028-02-29 23:00:00.000"), at("2028-02-01 00:00:00.000"), at("2028-03-01 00:00:00.000")},
		{"December to January", sluice.FixedWindow{Limit: 1, Calendar: sluice.Month, TimeZone: "Europe/Rome"},
			at("2026-12-31 23:59:59.999"), at("2026-12-01 00:00:00.000"), at("2027-01-01 00:00:00.000")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, end := tt.window.Bounds(tt.now)
			if start != float64(tt.start) || end != float64(tt.end) {
				t.Errorf("Bounds(%d) = %v, %v; want %d, %d", tt.now, start, end, tt.start, tt.end)
			}
		})
	}
}

func TestCalendarWindowRejects(t *testing.T) {
	tests := []struct {
		name   string
		window sluice.FixedWindow
		field  string
	}{
		{"unknown calendar", sluice.FixedWindow{Limit: 1, Calendar: "week"}, "limits[0].calendar"},
		{"calendar and windowMs", sluice.FixedWindow{Limit: 1, WindowMs: 1000, Calendar: sluice.Day}, "limits[0].windowMs"},
		{"unknown zone", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "Mars/Olympus"}, "limits[0].timezone"},
		{"the process's own zone", sluice.FixedWindow{Limit: 1, Calendar: sluice.Day, TimeZone: "Local"}, "limits[0].timezone"},
		{"zone without calendar", sluice.FixedWindow{Limit: 1, WindowMs: 1000, TimeZone: "UTC"}, "limits[0].timezone"},
		{"neither", sluice.FixedWindow{Limit: 1}, "limits[0].windowMs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sluice.NewPolicy("p", sluice.Limit{Strategy: tt.window})
			wantInvalid(t, err, tt.field)
		})
	}
}

// A daily quota counts across the day and starts over at local midnight, not at UTC's.
func ExampleFixedWindow_calendar() {
	p := sluice.MustPolicy("daily", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10_000, Calendar: sluice.Day, TimeZone: "Europe/Rome"}})
	start, end := p.Limits()[0].Strategy.(sluice.FixedWindow).Bounds(time.Date(2026, 10, 25, 12, 0, 0, 0, time.UTC).UnixMilli())
	fmt.Println(time.UnixMilli(int64(start)).UTC(), time.Duration(end-start)*time.Millisecond)
	// Output: 2026-10-24 22:00:00 +0000 UTC 25h0m0s
}
