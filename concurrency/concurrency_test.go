package concurrency_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
)

func TestAdmissionJSON(t *testing.T) {
	a := concurrency.Admission{Allowed: false, InFlight: 3, Limit: 3, RetryAfterMs: 1500}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"allowed":false,"inFlight":3,"limit":3,"retryAfterMs":1500}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	if a.RetryAfter() != 1500*time.Millisecond {
		t.Errorf("RetryAfter %v", a.RetryAfter())
	}
}

func TestErrNotHeld(t *testing.T) {
	if errors.Is(concurrency.ErrNotHeld, sluice.ErrInvalid) || errors.Is(concurrency.ErrNotHeld, sluice.ErrUnavailable) {
		t.Error("ErrNotHeld matches another error")
	}
}

// recorder is a Store that records the calls that reach it.
type recorder struct{ calls []string }

func (r *recorder) Admit(_ context.Context, now int64, name, key, holder string, limit, ttlMs int64) (concurrency.Admission, error) {
	r.calls = append(r.calls, "admit")
	return concurrency.Admission{Allowed: true, InFlight: 1, Limit: limit}, nil
}

func (r *recorder) Release(_ context.Context, name, key, holder string) error {
	r.calls = append(r.calls, "release")
	return nil
}

func (r *recorder) Heartbeat(_ context.Context, now int64, name, key, holder string, ttlMs int64) error {
	r.calls = append(r.calls, "heartbeat")
	return nil
}

// TestLimiterValidates: bad input is an *InvalidError naming the first bad field and never reaches
// the store; good input does, at the context's instant.
func TestLimiterValidates(t *testing.T) {
	long := strings.Repeat("k", sluice.MaxKeyLen+1)
	longest := strings.Repeat("k", sluice.MaxKeyLen)
	admit := func(name, key, holder string, limit, ttl int64) func(*concurrency.Limiter) error {
		return func(l *concurrency.Limiter) error {
			_, err := l.Admit(context.Background(), name, key, holder, limit, ttl)
			return err
		}
	}
	release := func(name, key, holder string) func(*concurrency.Limiter) error {
		return func(l *concurrency.Limiter) error { return l.Release(context.Background(), name, key, holder) }
	}
	heartbeat := func(name, key, holder string, ttl int64) func(*concurrency.Limiter) error {
		return func(l *concurrency.Limiter) error { return l.Heartbeat(context.Background(), name, key, holder, ttl) }
	}
	tests := []struct {
		name  string
		call  func(*concurrency.Limiter) error
		field string // "" for valid input
	}{
		{"Admit valid", admit("n", "k", "h", 1, 1), ""},
		{"Admit longest", admit(longest, longest, longest, 1<<62, concurrency.MaxTTLMs), ""},
		{"Admit empty name", admit("", "k", "h", 1, 1), "name"},
		{"Admit long name", admit(long, "k", "h", 1, 1), "name"},
		{"Admit empty key", admit("n", "", "h", 1, 1), "key"},
		{"Admit long key", admit("n", long, "h", 1, 1), "key"},
		{"Admit empty holder", admit("n", "k", "", 1, 1), "holder"},
		{"Admit long holder", admit("n", "k", long, 1, 1), "holder"},
		{"Admit limit 0", admit("n", "k", "h", 0, 1), "limit"},
		{"Admit limit -9", admit("n", "k", "h", -9, 1), "limit"},
		{"Admit ttl 0", admit("n", "k", "h", 1, 0), "ttlMs"},
		{"Admit ttl past MaxTTLMs", admit("n", "k", "h", 1, concurrency.MaxTTLMs+1), "ttlMs"},
		{"Admit first bad input", admit("", "", "", 0, 0), "name"},
		{"Release valid", release("n", "k", "h"), ""},
		{"Release empty key", release("n", "", "h"), "key"},
		{"Release long holder", release("n", "k", long), "holder"},
		{"Heartbeat valid", heartbeat("n", "k", "h", 1), ""},
		{"Heartbeat long name", heartbeat(long, "k", "h", 1), "name"},
		{"Heartbeat ttl -1", heartbeat("n", "k", "h", -1), "ttlMs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &recorder{}
			err := tt.call(concurrency.New(store))
			if tt.field == "" {
				if err != nil || len(store.calls) != 1 {
					t.Fatalf("%v, store calls %q: want nil and one call", err, store.calls)
				}
				return
			}
			var ie *sluice.InvalidError
			if !errors.Is(err, sluice.ErrInvalid) || !errors.As(err, &ie) || ie.Field != tt.field {
				t.Errorf("%v, want an *InvalidError for %q", err, tt.field)
			}
			if len(store.calls) != 0 {
				t.Errorf("bad input reached the store: %q", store.calls)
			}
		})
	}
}
