package await_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/await"
)

func TestCall(t *testing.T) {
	tests := []struct {
		name     string
		took     time.Duration // how long f runs
		err      error         // what f returns
		wantErr  error
		wantLate int64
	}{
		{"answers in time", 0, nil, nil, 0},
		{"fails in time", 0, errors.New("boom"), errors.New("boom"), 0},
		{"succeeds late", 60 * time.Millisecond, nil, context.DeadlineExceeded, 1},
		{"fails late", 60 * time.Millisecond, errors.New("boom"), context.DeadlineExceeded, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			var late atomic.Int64
			finished := make(chan struct{})
			v, err := await.Call(ctx, func() { late.Add(1) }, func() (int, error) {
				defer close(finished)
				time.Sleep(tt.took)
				return 7, tt.err
			})
			if (err == nil) != (tt.wantErr == nil) || err != nil && err.Error() != tt.wantErr.Error() {
				t.Fatalf("Call = %d, %v; want error %v", v, err, tt.wantErr)
			}
			if err == nil && v != 7 {
				t.Errorf("Call = %d, want 7", v)
			}
			<-finished
			time.Sleep(10 * time.Millisecond) // late is called after f returns
			if got := late.Load(); got != tt.wantLate {
				t.Errorf("late called %d times, want %d", got, tt.wantLate)
			}
		})
	}
}
