package httpapi_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/stream"
)

// pulled is the answer to a pull, either kind.
type pulled struct {
	Partition int
	Lease     string
	ExpiresAt int64
	Items     []map[string]any
}

// groupPull pulls a batch of kind from stream s and checks the answer's shape.
func groupPull(t *testing.T, e *env, kind, body string) pulled {
	t.Helper()
	r := e.post("/v1/streams/s/"+kind+"/pull", body)
	if r.status != 200 {
		t.Fatalf("pull %s %s: %d %s", kind, body, r.status, r.body)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range raw {
		names = append(names, name)
	}
	slices.Sort(names)
	if want := []string{"expiresAt", kind, "lease", "partition"}; !slices.Equal(names, slices.Sorted(slices.Values(want))) {
		t.Fatalf("pull answered members %v, want %v: %s", names, want, r.body)
	}
	var p pulled
	for dst, name := range map[any]string{&p.Partition: "partition", &p.Lease: "lease", &p.ExpiresAt: "expiresAt", &p.Items: kind} {
		if err := json.Unmarshal(raw[name], dst); err != nil {
			t.Fatalf("%s of %s: %v", name, r.body, err)
		}
	}
	if p.Items == nil {
		t.Fatalf("pull answered %s: null, want a list: %s", kind, r.body)
	}
	if (p.Lease == "") != (len(p.Items) == 0) {
		t.Fatalf("lease %q with %d items", p.Lease, len(p.Items))
	}
	return p
}

func (p pulled) last() int64 { return int64(p.Items[len(p.Items)-1]["offset"].(float64)) }

func ackBody(lease string, offset int64) string {
	return fmt.Sprintf(`{"group":"g","lease":%q,"offset":%d}`, lease, offset)
}

func TestGroupPullAck(t *testing.T) {
	t.Parallel()
	e, mem := startStreams(t)
	fill(t, mem, 7)
	for _, c := range []struct {
		kind string
		want int
	}{{"windows", 7}, {"decisions", 5}} {
		t.Run(c.kind, func(t *testing.T) {
			seen := map[float64]bool{}
			for {
				p := groupPull(t, e, c.kind, `{"group":"g","consumer":"gw-1","limit":2,"leaseMs":60000}`)
				if p.Lease == "" {
					break
				}
				if len(p.Items) > 2 || p.ExpiresAt <= 0 {
					t.Fatalf("batch %+v", p)
				}
				for _, it := range p.Items {
					if stream.Partition(it["key"].(string)) != p.Partition || seen[it["offset"].(float64)] {
						t.Fatalf("item %v in batch of partition %d (seen before: %v)", it, p.Partition, seen[it["offset"].(float64)])
					}
					seen[it["offset"].(float64)] = true
				}
				if r := e.post("/v1/streams/s/"+c.kind+"/ack", ackBody(p.Lease, p.last())); r.status != 200 || strings.TrimSpace(string(r.body)) != "{}" {
					t.Fatalf("ack: %d %s", r.status, r.body)
				}
				// The lease is spent: acking it again is a conflict, not a second commit.
				r := e.post("/v1/streams/s/"+c.kind+"/ack", ackBody(p.Lease, p.last()))
				if eb := errorOf(t, r); r.status != 409 || eb.Code != httpapi.CodeLeaseLost {
					t.Fatalf("second ack: %d %+v, want 409 lease_lost", r.status, eb)
				}
			}
			if len(seen) != c.want {
				t.Errorf("the group saw %d %s, want %d", len(seen), c.kind, c.want)
			}
			// Another group starts from the beginning.
			if p := groupPull(t, e, c.kind, `{"group":"g2","consumer":"gw-1"}`); p.Lease == "" {
				t.Error("a second group found nothing")
			}
		})
	}
}

func TestGroupErrors(t *testing.T) {
	t.Parallel()
	e, mem := startStreams(t)
	fill(t, mem, 7)
	held := groupPull(t, e, "windows", `{"group":"g","consumer":"c","limit":1}`)
	for _, tt := range []struct {
		name, path, body string
		status           int
		code, want       string
	}{
		{"pull of another kind", "/v1/streams/s/log/pull", `{"group":"g","consumer":"c"}`, 400, "invalid_argument", "invalid kind"},
		{"ack of another kind", "/v1/streams/s/Windows/ack", ackBody(held.Lease, held.last()), 400, "invalid_argument", "invalid kind"},
		{"unknown field", "/v1/streams/s/windows/pull", `{"group":"g","consumer":"c","colour":1}`, 400, "invalid_argument", `unknown field "colour"`},
		{"cased field", "/v1/streams/s/windows/pull", `{"Group":"g","consumer":"c"}`, 400, "invalid_argument", `unknown field "Group"`},
		{"no consumer", "/v1/streams/s/windows/pull", `{"group":"g"}`, 400, "invalid_argument", "consumer: is missing"},
		{"empty group", "/v1/streams/s/windows/pull", `{"group":"","consumer":"c"}`, 400, "invalid_argument", "invalid group"},
		{"long consumer", "/v1/streams/s/windows/pull", `{"group":"g","consumer":"` + strings.Repeat("c", 201) + `"}`, 400, "invalid_argument", "invalid consumer"},
		{"limit too large", "/v1/streams/s/windows/pull", `{"group":"g","consumer":"c","limit":1001}`, 400, "invalid_argument", "invalid limit"},
		{"limit not an integer", "/v1/streams/s/windows/pull", `{"group":"g","consumer":"c","limit":"2"}`, 400, "invalid_argument", "limit: must be an integer"},
		{"lease too long", "/v1/streams/s/windows/pull", `{"group":"g","consumer":"c","leaseMs":3600001}`, 400, "invalid_argument", "invalid leaseMs"},
		{"repeated", "/v1/streams/s/windows/pull", `{"group":"g","group":"g","consumer":"c"}`, 400, "invalid_argument", "appears twice"},
		{"trailing data", "/v1/streams/s/windows/pull", `{"group":"g","consumer":"c"} {}`, 400, "invalid_argument", "unexpected data"},
		{"not JSON", "/v1/streams/s/windows/pull", `{"group":`, 400, "invalid_argument", "not complete JSON"},
		{"too large", "/v1/streams/s/windows/pull", `{"group":"` + strings.Repeat("g", httpapi.DefaultMaxBodyBytes) + `","consumer":"c"}`, 400, "too_large", "larger than"},
		{"no offset", "/v1/streams/s/windows/ack", `{"group":"g","lease":"x"}`, 400, "invalid_argument", "offset: is missing"},
		{"null lease", "/v1/streams/s/windows/ack", `{"group":"g","lease":null,"offset":1}`, 400, "invalid_argument", "lease: must be a string, not null"},
		{"negative offset", "/v1/streams/s/windows/ack", ackBody(held.Lease, -1), 400, "invalid_argument", "invalid offset"},
		{"offset past the batch", "/v1/streams/s/windows/ack", ackBody(held.Lease, held.last()+1), 400, "invalid_argument", "invalid offset"},
		{"unknown lease", "/v1/streams/s/windows/ack", ackBody("never-issued", 1), 409, "lease_lost", "lease lost"},
		{"another group's lease", "/v1/streams/s/windows/ack", strings.Replace(ackBody(held.Lease, held.last()), `"g"`, `"g2"`, 1), 409, "lease_lost", "lease lost"},
		{"another kind's lease", "/v1/streams/s/decisions/ack", ackBody(held.Lease, held.last()), 409, "lease_lost", "lease lost"},
		{"pull by GET", "/v1/streams/s/windows/pull", "", 405, "method_not_allowed", "use POST"},
		{"ack by GET", "/v1/streams/s/windows/ack", "", 405, "method_not_allowed", "use POST"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			method := "POST"
			if strings.HasSuffix(tt.name, "by GET") {
				method = "GET"
			}
			r := e.do(method, tt.path, tt.body)
			if eb := errorOf(t, r); r.status != tt.status || eb.Code != tt.code || !strings.Contains(eb.Error, tt.want) {
				t.Errorf("%d %+v, want %d %s with %q", r.status, eb, tt.status, tt.code, tt.want)
			}
		})
	}
	// None of it touched the held lease: it acks, once.
	if r := e.post("/v1/streams/s/windows/ack", ackBody(held.Lease, held.last())); r.status != 200 {
		t.Fatalf("ack of the held lease: %d %s", r.status, r.body)
	}
}

// TestGroupLeaseExpires moves the memory backend's clock past a lease: the batch goes to the next
// puller, and the first consumer's ack is 409 lease_lost.
func TestGroupLeaseExpires(t *testing.T) {
	t.Parallel()
	var clock atomic.Int64
	clock.Store(1_000_000)
	mem := stream.NewMemoryWith(stream.MemoryConfig{Now: clock.Load})
	t.Cleanup(func() { mem.Close() })
	e := start(t, setup{opts: httpapi.Options{Streams: mem}})
	fill(t, mem, 3)
	first := groupPull(t, e, "windows", `{"group":"g","consumer":"a","limit":1,"leaseMs":1000}`)
	if first.ExpiresAt != 1_001_000 {
		t.Errorf("expiresAt %d, want 1001000", first.ExpiresAt)
	}
	clock.Add(1000)
	second := groupPull(t, e, "windows", `{"group":"g","consumer":"b","limit":1}`)
	if second.Partition != first.Partition || second.last() != first.last() || second.Lease == first.Lease {
		t.Fatalf("after expiry pulled %+v, want %+v again under a new lease", second, first)
	}
	r := e.post("/v1/streams/s/windows/ack", ackBody(first.Lease, first.last()))
	if eb := errorOf(t, r); r.status != 409 || eb.Code != "lease_lost" {
		t.Errorf("late ack: %d %+v, want 409 lease_lost", r.status, eb)
	}
	if r := e.post("/v1/streams/s/windows/ack", ackBody(second.Lease, second.last())); r.status != 200 {
		t.Errorf("ack of the new lease: %d %s", r.status, r.body)
	}
}

func TestGroupRoutesGuarded(t *testing.T) {
	t.Parallel()
	off := start(t, setup{})
	mem := stream.NewMemory()
	t.Cleanup(func() { mem.Close() })
	auth := start(t, setup{opts: httpapi.Options{Streams: mem, BearerTokens: []string{"secret"}}})
	for _, path := range []string{"/v1/streams/s/windows/pull", "/v1/streams/s/decisions/ack"} {
		r := off.post(path, `{}`)
		if eb := errorOf(t, r); r.status != 404 || eb.Code != "not_found" || !strings.Contains(eb.Error, "not configured") {
			t.Errorf("%s without streams: %d %+v", path, r.status, eb)
		}
		if r := auth.post(path, `{}`); r.status != 401 {
			t.Errorf("%s without a token: %d", path, r.status)
		}
	}
	r := auth.do("POST", "/v1/streams/s/windows/pull", `{"group":"g","consumer":"c"}`, "Authorization", "Bearer secret")
	if r.status != 200 {
		t.Errorf("pull with the token: %d %s", r.status, r.body)
	}
}
