package sluice_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func TestAdmissionJSON(t *testing.T) {
	a := sluice.Admission{Allowed: false, InFlight: 3, Limit: 3, RetryAfterMs: 1500}
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
	if errors.Is(sluice.ErrNotHeld, sluice.ErrInvalid) || errors.Is(sluice.ErrNotHeld, sluice.ErrUnavailable) {
		t.Error("ErrNotHeld matches another error")
	}
}

func TestValidateConcurrency(t *testing.T) {
	long := strings.Repeat("k", sluice.MaxKeyLen+1)
	longest := strings.Repeat("k", sluice.MaxKeyLen)
	tests := []struct {
		what  string
		err   error
		field string // "" for valid input
	}{
		{"Admit valid", sluice.ValidateAdmit("n", "k", "h", 1, 1), ""},
		{"Admit longest", sluice.ValidateAdmit(longest, longest, longest, 1<<62, sluice.MaxConcurrencyTTLMs), ""},
		{"Admit empty name", sluice.ValidateAdmit("", "k", "h", 1, 1), "name"},
		{"Admit long name", sluice.ValidateAdmit(long, "k", "h", 1, 1), "name"},
		{"Admit empty key", sluice.ValidateAdmit("n", "", "h", 1, 1), "key"},
		{"Admit long key", sluice.ValidateAdmit("n", long, "h", 1, 1), "key"},
		{"Admit empty holder", sluice.ValidateAdmit("n", "k", "", 1, 1), "holder"},
		{"Admit long holder", sluice.ValidateAdmit("n", "k", long, 1, 1), "holder"},
		{"Admit limit 0", sluice.ValidateAdmit("n", "k", "h", 0, 1), "limit"},
		{"Admit limit -9", sluice.ValidateAdmit("n", "k", "h", -9, 1), "limit"},
		{"Admit ttl 0", sluice.ValidateAdmit("n", "k", "h", 1, 0), "ttlMs"},
		{"Admit ttl past MaxConcurrencyTTLMs", sluice.ValidateAdmit("n", "k", "h", 1, sluice.MaxConcurrencyTTLMs+1), "ttlMs"},
		{"Admit first bad input", sluice.ValidateAdmit("", "", "", 0, 0), "name"},
		{"Release valid", sluice.ValidateRelease("n", "k", "h"), ""},
		{"Release empty key", sluice.ValidateRelease("n", "", "h"), "key"},
		{"Release long holder", sluice.ValidateRelease("n", "k", long), "holder"},
		{"Heartbeat valid", sluice.ValidateHeartbeat("n", "k", "h", 1), ""},
		{"Heartbeat long name", sluice.ValidateHeartbeat(long, "k", "h", 1), "name"},
		{"Heartbeat ttl -1", sluice.ValidateHeartbeat("n", "k", "h", -1), "ttlMs"},
	}
	for _, tt := range tests {
		if tt.field == "" {
			if tt.err != nil {
				t.Errorf("%s: %v", tt.what, tt.err)
			}
			continue
		}
		var ie *sluice.InvalidError
		if !errors.Is(tt.err, sluice.ErrInvalid) || !errors.As(tt.err, &ie) || ie.Field != tt.field {
			t.Errorf("%s: %v, want an *InvalidError for %q", tt.what, tt.err, tt.field)
		}
	}
}
