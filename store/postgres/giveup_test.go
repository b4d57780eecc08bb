package pgstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
)

// TestGiveUpBy checks the SQL that makes the server give up by the caller's instant, by the
// server's clock: the lock wait it leaves, and skipping a statement that arrives after it.
func TestGiveUpBy(t *testing.T) {
	pool := pgtest.Pool(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	tests := []struct {
		name             string
		at               int64
		minWait, maxWait int64
		late             bool
	}{
		{name: "no deadline", at: 0},
		{name: "10 s ahead", at: now + 10_000, minWait: 9_000, maxWait: 10_000},
		{name: "passed", at: now - 1_000, late: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var wait int64
			err := noRowsLate(pool.QueryRow(ctx, "SELECT "+waitFor("$1")+before("$1"), tt.at).Scan(&wait))
			switch {
			case tt.late:
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("a statement past its instant: %v, want errLate", err)
				}
			case err != nil:
				t.Fatal(err)
			case wait < tt.minWait || wait > tt.maxWait:
				t.Errorf("wait %d ms, want %d to %d", wait, tt.minWait, tt.maxWait)
			}
		})
	}

	if at := giveUpAt(ctx); at != 0 {
		t.Errorf("giveUpAt without a deadline = %d, want 0", at)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	deadline, _ := short.Deadline()
	if at := giveUpAt(short); at > deadline.UnixMilli()-24 || at < deadline.UnixMilli()-26 {
		t.Errorf("giveUpAt with 200 ms left = %d ms before the deadline, want 25", deadline.UnixMilli()-at)
	}
}
