package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Every call that Redis does not answer in time says so: its error matches both
// sluice.ErrUnavailable and context.DeadlineExceeded, so that the service counts it as a timeout.
// And it costs no connection: once Redis answers again, the store decides on the ones it had.
func TestTimeoutsSayDeadlineExceeded(t *testing.T) {
	srv := redistest.StartServer(t)
	s := openStore(t, srv.URL())
	p := sluice.MustPolicy("frozen", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 60_000}})
	for _, k := range []string{"a", "b"} { // a batched run, and a pipelined command
		if _, err := s.Check(context.Background(), 0, p, k, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Peek(context.Background(), 0, p, k); err != nil {
			t.Fatal(err)
		}
	}
	node := nodeClient(t, srv.Addr())
	// closed is how many connections Redis has seen closed: received less still connected. A call
	// cut off at its deadline must not tear its connection down (the client may open one more
	// while its pipeline waits on the frozen server; that costs nothing later).
	closed := func() int {
		t.Helper()
		info, err := do(t, node, "INFO").ToString()
		if err != nil {
			t.Fatal(err)
		}
		field := func(name string) int {
			for _, line := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, name+":"); ok {
					n, err := strconv.Atoi(v)
					if err != nil {
						t.Fatalf("INFO %s: %q", name, v)
					}
					return n
				}
			}
			t.Fatalf("no %s in INFO", name)
			return 0
		}
		return field("total_connections_received") - field("connected_clients")
	}
	before := closed()
	defer func() {
		// After Thaw (deferred below, so run first): let the runs sent while Redis was frozen get
		// their replies; they wait for them a second at most.
		time.Sleep(1100 * time.Millisecond)
		if _, err := s.Check(context.Background(), 0, p, "a", 1); err != nil {
			t.Errorf("the first check after Redis answers again: %v", err)
		}
		if after := closed(); after != before {
			t.Errorf("%d connections closed before the timeouts, %d after: timed-out calls cost connections", before, after)
		}
	}()
	srv.Freeze()
	defer srv.Thaw()
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"check", func(ctx context.Context) error { _, err := s.Check(ctx, 0, p, "k", 1); return err }},
		{"check many", func(ctx context.Context) error {
			return s.CheckMany(ctx, 0, p, []string{"a", "b"}, 1, make([]sluice.Decision, 2))
		}},
		{"peek", func(ctx context.Context) error { _, err := s.Peek(ctx, 0, p, "k"); return err }},
		{"ping", func(ctx context.Context) error { return s.Ping(ctx) }},
	}
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			err := tt.call(ctx)
			if !errors.Is(err, sluice.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v, want one matching sluice.ErrUnavailable and context.DeadlineExceeded", err)
			}
		})
	}
}
