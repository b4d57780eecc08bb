package httpapi

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

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
		`{"policy":"p","key":"x\udc00y"}`, "{\"policy\":\"p\",\"key\":\"x\xffy\"}",
		`{"policy":"p","key":"\ud83d\ude00"}`, `{"policy":"p","key":"\ufffd"}`,
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
			// No key or policy is a replacement encoding/json made: one raw key, one bucket.
			for _, str := range []string{req.Policy, req.Key} {
				if !utf8.ValidString(str) || strings.ContainsRune(str, utf8.RuneError) && !mayHoldFFFD(data) {
					t.Fatalf("decodeCheck(%q) accepted %q, a replacement of invalid text", data, str)
				}
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

// mayHoldFFFD reports whether data spells U+FFFD itself, raw or escaped.
func mayHoldFFFD(data []byte) bool {
	return bytes.Contains(data, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(data), []byte(`\ufffd`))
}

// FuzzGate feeds any query and key header to the gate's parser. It never panics; whatever it
// accepts has at most one of each parameter, none empty, and a UTF-8 key that is the one given.
func FuzzGate(f *testing.F) {
	for _, seed := range []struct{ query, header string }{
		{"key=k", ""}, {"key=k&cost=3&now=1700000000000&denyStatus=403", ""}, {"", "h"},
		{"key=", "h"}, {"key=%zz", ""}, {"key=a;b", ""}, {"key=a&key=b", ""}, {"cost=1&cost=2", ""},
		{"cost=", ""}, {"key=x%FFy", ""}, {"", "x\xffy"}, {"denyStatus=500", ""}, {"key=%E2%82%AC", ""},
	} {
		f.Add(seed.query, seed.header)
	}
	f.Fuzz(func(t *testing.T, query, key string) {
		h := http.Header{}
		if key != "" {
			h.Set("X-Api-Key", key)
		}
		p, err := parseGate(query, h, "X-Api-Key")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "httpapi: ") {
				t.Fatalf("parseGate(%q, %q): error %q names no package", query, key, err)
			}
			return
		}
		if !utf8.ValidString(p.key) || p.deny != 429 && p.deny != 403 {
			t.Fatalf("parseGate(%q, %q) = %+v", query, key, p)
		}
		q, _ := url.ParseQuery(query) // it parsed once already
		for _, name := range []string{"key", "cost", "now", "denyStatus"} {
			if vs, ok := q[name]; ok && (len(vs) > 1 || vs[0] == "") {
				t.Fatalf("parseGate(%q) accepted %s=%q", query, name, vs)
			}
		}
		switch {
		case q.Has("key") && p.key != q.Get("key"):
			t.Fatalf("parseGate(%q) keyed %q, not the query's key", query, p.key)
		case !q.Has("key") && p.key != key:
			t.Fatalf("parseGate(%q, %q) keyed %q, not the header's", query, key, p.key)
		case q.Has("cost") && strconv.FormatInt(p.cost, 10) != strings.TrimPrefix(q.Get("cost"), "+"):
			if n, err := strconv.ParseInt(q.Get("cost"), 10, 64); err != nil || n != p.cost {
				t.Fatalf("parseGate(%q) cost %d", query, p.cost)
			}
		}
	})
}

// FuzzContentType feeds any Content-Type to the JSON body check: what it accepts is JSON.
func FuzzContentType(f *testing.F) {
	for _, seed := range []string{"application/json", "application/json; charset=utf-8", "text/plain",
		"application/x-www-form-urlencoded", "application/ld+json", "application/json; charset=latin1", "", ";", "application/json;;"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ct string) {
		if checkContentType([]string{ct}) != nil {
			return
		}
		if mt, _, err := mime.ParseMediaType(ct); err != nil || !strings.HasPrefix(mt, "application/") || !strings.HasSuffix(mt, "json") {
			t.Fatalf("accepted Content-Type %q", ct)
		}
	})
}

// FuzzHost feeds any Host header to the allowed-hosts check: only a listed name passes.
func FuzzHost(f *testing.F) {
	for _, seed := range []string{"sluice.internal", "sluice.internal:80", "evil.example", "[::1]:80", "[::1]", "localhost:1", "localhost:2", ":", "[", "sluice.internal."} {
		f.Add(seed)
	}
	allowed := []string{"sluice.internal", "[::1]", "localhost:1"}
	f.Fuzz(func(t *testing.T, host string) {
		if !hostAllowed(host, allowed) {
			return
		}
		h := strings.ToLower(host)
		for _, ok := range []string{"sluice.internal", "[::1]", "::1", "localhost:1"} {
			if h == ok || strings.HasPrefix(h, ok+":") || strings.HasPrefix(h, ok+".") || strings.HasPrefix(h, "["+ok+"]") {
				return
			}
		}
		t.Fatalf("allowed Host %q", host)
	})
}
