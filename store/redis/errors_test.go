package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Every call that Redis does not answer in time says so: its error matches both
// sluice.ErrUnavailable and context.DeadlineExceeded, so that the service counts it as a timeout.
func TestTimeoutsSayDeadlineExceeded(t *testing.T) {
	srv := redistest.StartServer(t)
	s := openStore(t, srv.URL())
	p := sluice.MustPolicy("frozen", sluice.Limit{Strategy: sluice.FixedWindow{Limit: 10, WindowMs: 60_000}})
	if _, err := s.Check(context.Background(), 0, p, "k", 1); err != nil {
		t.Fatal(err) // connections are open before Redis stops answering
	}
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
