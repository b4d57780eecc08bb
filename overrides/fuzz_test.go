package overrides_test

import (
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/overrides"
)

// FuzzDecodeChange: DecodeChange never panics on outside input, and what it accepts encodes and
// decodes back to the same Change; DecodeOverride likewise.
func FuzzDecodeChange(f *testing.F) {
	for _, s := range []string{
		`{"op":"put","override":{"policy":"api","key":"acme","plan":"pro","expiresAt":1700000000000,"reason":"x","updatedAt":5}}`,
		`{"op":"put","override":{"policy":"api","key":"k","limits":[{"strategy":"gcra","limit":1,"periodMs":1000,"burst":1}]},"origin":"a.1"}`,
		`{"op":"delete","override":{"policy":"api","key":"a\u0000b"}}`,
		`{"op":"expire","override":{"policy":"api","key":"k","expiresAt":12}}`,
		`{"op":"reload","override":{}}`,
		`{"op":"put","override":{"policy":"api","key":"k","plan":"p","limits":[]}}`,
		`{"op":"nope"}`, `[]`, `{"op":"put"} {}`, `{"override":{"limits":[{"buckets":1e99}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := overrides.DecodeChange(data)
		if err == nil {
			b, err := overrides.EncodeChange(c)
			if err != nil {
				t.Fatalf("EncodeChange of an accepted change: %v", err)
			}
			again, err := overrides.DecodeChange(b)
			if err != nil || !reflect.DeepEqual(normal(again), normal(c)) {
				t.Fatalf("round trip of %q: %+v, %v; want %+v", b, again, err, c)
			}
		}
		o, err := overrides.DecodeOverride(data)
		if err == nil {
			b, err := overrides.EncodeOverride(o)
			if err != nil {
				t.Fatalf("EncodeOverride of an accepted override: %v", err)
			}
			again, err := overrides.DecodeOverride(b)
			if err != nil || !reflect.DeepEqual(normal(overrides.Change{Override: again}), normal(overrides.Change{Override: o})) {
				t.Fatalf("round trip of %q: %+v, %v; want %+v", b, again, err, o)
			}
		}
	})
}

// normal is c with an empty Limits as nil (omitempty writes neither).
func normal(c overrides.Change) overrides.Change {
	if len(c.Override.Limits) == 0 {
		c.Override.Limits = nil
	}
	return c
}
