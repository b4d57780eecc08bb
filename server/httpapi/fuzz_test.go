package httpapi

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/stream"
)

// FuzzDecode feeds any body to every request decoder. None may panic, and whatever one accepts,
// encoding/json reads the same way (the strict decoder only ever refuses more), within the batch
// limits.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"policy":"p","key":"k"}`,
		`{"policy":"p","key":"k","cost":3,"now":1700000000000}`,
		`{"policy":"p","keys":["a","b"],"cost":2}`,
		`{"items":[{"policy":"p","key":"k"},{"policy":"q","key":"k","cost":5}],"now":1}`,
		`{"policy":"p","key":"k","key":"j"}`,
		`{"Policy":"p","key":"k"}`,
		`{"policy":"p","key":"k"} {}`,
		`{"policy":null,"key":"k"}`,
		`{"items":[1]}`,
		`[`, ``, `"x"`, `{"policy":"\ud800","key":"k"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		type single struct {
			Policy string `json:"policy"`
			Key    string `json:"key"`
			Cost   int64  `json:"cost"`
			Now    int64  `json:"now"`
		}
		for _, mode := range []struct{ cost, now bool }{{true, true}, {false, true}, {false, false}} {
			req, err := decodeCheck(data, mode.cost, mode.now)
			if err != nil {
				continue
			}
			want := single{Cost: 1}
			if json.Unmarshal(data, &want) != nil {
				t.Fatalf("decodeCheck accepted %q, which encoding/json refuses", data)
			}
			if got := single(req); got != want {
				t.Fatalf("decodeCheck(%q) = %+v, encoding/json reads %+v", data, got, want)
			}
		}
		if req, err := decodeCheckMany(data); err == nil {
			want := struct {
				Policy string   `json:"policy"`
				Keys   []string `json:"keys"`
				Cost   int64    `json:"cost"`
				Now    int64    `json:"now"`
			}{Cost: 1}
			if json.Unmarshal(data, &want) != nil || len(req.Keys) > MaxBatch ||
				req.Policy != want.Policy || !reflect.DeepEqual(req.Keys, want.Keys) || req.Cost != want.Cost || req.Now != want.Now {
				t.Fatalf("decodeCheckMany(%q) = %+v, encoding/json reads %+v", data, req, want)
			}
		}
		if req, err := decodeCheckAll(data); err == nil {
			var want struct {
				Items []struct {
					Policy string `json:"policy"`
					Key    string `json:"key"`
					Cost   *int64 `json:"cost"`
				} `json:"items"`
				Now int64 `json:"now"`
			}
			if json.Unmarshal(data, &want) != nil || len(req.Items) > MaxBatch || len(req.Items) != len(want.Items) || req.Now != want.Now {
				t.Fatalf("decodeCheckAll(%q) = %+v, encoding/json reads %+v", data, req, want)
			}
			for i, it := range want.Items {
				cost := int64(1)
				if it.Cost != nil {
					cost = *it.Cost
				}
				if req.Items[i] != (sluice.Item{Policy: it.Policy, Key: it.Key, Cost: cost}) {
					t.Fatalf("decodeCheckAll(%q): item %d = %+v, encoding/json reads %+v", data, i, req.Items[i], it)
				}
			}
		}
	})
}

// FuzzDecodeUsage feeds any body to the usage decoder: it may not panic, and whatever it
// accepts encoding/json reads the same way, within MaxUsageEvents.
func FuzzDecodeUsage(f *testing.F) {
	for _, seed := range []string{
		`{"events":[{"stream":"s","key":"k"}]}`,
		`{"events":[{"stream":"s","key":"k","cost":3,"at":1700000000000,"id":"x"},{"stream":"t","key":"j"}]}`,
		`{"events":[]}`, `{"events":null}`, `{"events":[{"stream":"s"}]}`, `{"events":[{"Stream":"s","key":"k"}]}`,
		`{"events":[{"stream":"s","key":"k","key":"j"}]}`, `{"events":[1]}`, `{"events":[]} x`, `[`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		events, err := decodeUsage(data)
		if err != nil {
			return
		}
		var want struct {
			Events []stream.Event `json:"events"`
		}
		if json.Unmarshal(data, &want) != nil || len(events) > MaxUsageEvents || len(events) != len(want.Events) {
			t.Fatalf("decodeUsage(%q) = %+v, encoding/json reads %+v", data, events, want)
		}
		for i := range events {
			if events[i] != want.Events[i] {
				t.Fatalf("decodeUsage(%q): event %d = %+v, encoding/json reads %+v", data, i, events[i], want.Events[i])
			}
		}
	})
}

// FuzzDecodePull feeds any body to the pull decoder: it may not panic, and whatever it accepts
// encoding/json reads the same way.
func FuzzDecodePull(f *testing.F) {
	for _, seed := range []string{
		`{"group":"g","consumer":"c"}`, `{"group":"g","consumer":"c","limit":10,"leaseMs":60000}`,
		`{"group":"g","consumer":"c","limit":-1}`, `{"group":"g","consumer":"c","limit":1.5}`,
		`{"Group":"g","consumer":"c"}`, `{"group":"g","group":"h","consumer":"c"}`, `{"group":null,"consumer":"c"}`,
		`{"group":"g","consumer":"c","stream":"s"}`, `{"group":"g","consumer":"c"} x`, `[`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodePull(data)
		if err != nil {
			return
		}
		var want struct {
			Group    string `json:"group"`
			Consumer string `json:"consumer"`
			Limit    int    `json:"limit"`
			LeaseMs  int64  `json:"leaseMs"`
		}
		if json.Unmarshal(data, &want) != nil || req != (stream.PullRequest{Group: want.Group, Consumer: want.Consumer, Limit: want.Limit, LeaseMs: want.LeaseMs}) {
			t.Fatalf("decodePull(%q) = %+v, encoding/json reads %+v", data, req, want)
		}
	})
}

// FuzzDecodeAck feeds any body to the ack decoder: it may not panic, and whatever it accepts
// encoding/json reads the same way.
func FuzzDecodeAck(f *testing.F) {
	for _, seed := range []string{
		`{"group":"g","lease":"L","offset":7}`, `{"group":"g","lease":"L"}`, `{"group":"g","lease":"L","offset":-1}`,
		`{"group":"g","lease":"L","offset":1e3}`, `{"group":"g","lease":7,"offset":7}`, `{"group":"g","lease":"L","offset":7,"kind":"windows"}`,
		`{"group":"g","lease":"L","offset":7,"offset":8}`, `{"GROUP":"g","lease":"L","offset":7}`, `{"group":"g","lease":"L","offset":7}]`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeAck(data)
		if err != nil {
			return
		}
		var want struct {
			Group  string `json:"group"`
			Lease  string `json:"lease"`
			Offset int64  `json:"offset"`
		}
		if json.Unmarshal(data, &want) != nil || req != (stream.AckRequest{Group: want.Group, Lease: want.Lease, Offset: want.Offset}) {
			t.Fatalf("decodeAck(%q) = %+v, encoding/json reads %+v", data, req, want)
		}
	})
}

// FuzzDecodeSettle feeds any body to the settle decoder: it may not panic, and whatever it
// accepts encoding/json reads the same way.
func FuzzDecodeSettle(f *testing.F) {
	for _, seed := range []string{
		`{"policy":"p","key":"k","reserved":300,"actual":120}`, `{"policy":"p","key":"k","reserved":1,"actual":0,"now":1}`,
		`{"policy":"p","key":"k","reserved":1}`, `{"policy":"p","key":"k","reserved":1.5,"actual":1}`,
		`{"policy":"p","key":"k","reserved":1,"actual":1,"cost":1}`, `{"policy":"p","key":"k","reserved":1,"reserved":2,"actual":1}`,
		`[`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := decodeSettle(data)
		if err != nil {
			return
		}
		var want struct {
			Policy   string `json:"policy"`
			Key      string `json:"key"`
			Reserved int64  `json:"reserved"`
			Actual   int64  `json:"actual"`
			Now      int64  `json:"now"`
		}
		if json.Unmarshal(data, &want) != nil || req != (settleRequest{want.Policy, want.Key, want.Reserved, want.Actual, want.Now}) {
			t.Fatalf("decodeSettle(%q) = %+v, encoding/json reads %+v", data, req, want)
		}
	})
}

// FuzzDecodeSlot feeds any body to the decoder of the concurrency routes: it may not panic, and
// whatever it accepts encoding/json reads the same way.
func FuzzDecodeSlot(f *testing.F) {
	for _, seed := range []string{
		`{"name":"n","key":"k","holder":"h","limit":2,"ttlMs":1000}`, `{"name":"n","key":"k","holder":"h","ttlMs":1000,"now":5}`,
		`{"name":"n","key":"k","holder":"h"}`, `{"name":"n","key":"k","holder":"h","limit":1.5,"ttlMs":1}`,
		`{"name":"n","key":"k","holder":"h","holder":"i"}`, `[`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, op := range []slotOp{slotAdmit, slotHeartbeat, slotRelease} {
			req, err := decodeSlot(data, op)
			if err != nil {
				continue
			}
			var want struct {
				Name   string `json:"name"`
				Key    string `json:"key"`
				Holder string `json:"holder"`
				Limit  int64  `json:"limit"`
				TTLMs  int64  `json:"ttlMs"`
				Now    int64  `json:"now"`
			}
			if json.Unmarshal(data, &want) != nil || req != (slotRequest{want.Name, want.Key, want.Holder, want.Limit, want.TTLMs, want.Now}) {
				t.Fatalf("decodeSlot(%q, %d) = %+v, encoding/json reads %+v", data, op, req, want)
			}
		}
	})
}
