package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/pgtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOverridesFleet runs three sluice serve processes with the shipped defaults on one shared
// store and changes per-key overrides through one of them over HTTP: every process applies a
// change within a second (measured), the fleet admits exactly an override's limit, an override
// ends at its expiresAt on every process with no message sent, the overrides outlive the
// processes, and a delete reaches every process within a second.
func TestOverridesFleet(t *testing.T) {
	bin := buildSluice(t)
	stores := []struct {
		name  string
		start func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return redistest.StartServer(t).URL() }},
		{"postgres", func(t *testing.T) string { return pgtest.StartServer(t).URL() }},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "sluice.yaml")
			// No storeTimeout, no failMode, no overrides section: the shipped defaults, whose
			// refresh (30 s) is longer than the test, so every change must arrive by push.
			writeConfig(t, config, fmt.Sprintf(`store: %s
policies:
  api:
    plans:
      free: {strategy: fixedWindow, limit: %d, window: 1h}
      pro: {strategy: fixedWindow, limit: %d, window: 1h}
    plan: free
  custom: {strategy: fixedWindow, limit: %d, window: 1h}
`, st.start(t), freeLimit, proLimit, customDefault))
			f := &ovFleet{bin: bin, config: config, client: &http.Client{
				Timeout:   5 * time.Second,
				Transport: &http.Transport{MaxIdleConnsPerHost: 64},
			}}
			f.start(t)
			// Every check of the test falls in one fixed window of an hour.
			awaitWindow(t, time.Hour, time.Minute)

			t.Run("propagation", f.testPropagation)
			t.Run("exact admissions", f.testExact)
			t.Run("expiry", f.testExpiry)
			t.Run("delete", f.testDelete)
			t.Run("restart", f.testRestart)
		})
	}
}

// The config's limits, and the custom limit the test gives a key.
const (
	freeLimit     = 5
	proLimit      = 50
	customDefault = 10
	customLimit   = 100
	// applyWithin is how soon every process must apply a change made through another.
	applyWithin = time.Second
)

// ovFleet is three sluice serve processes on one store, and an HTTP client for them.
type ovFleet struct {
	bin, config string
	client      *http.Client
	procs       []*serveProc
}

func (f *ovFleet) start(t *testing.T) {
	t.Helper()
	f.procs = nil
	for range 3 {
		f.procs = append(f.procs, spawnSluice(t, f.bin, f.config))
	}
}

// ovDecision is the part of a decision on the wire the test reads.
type ovDecision struct {
	Allowed   bool   `json:"allowed"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	FailOpen  bool   `json:"failOpen"`
	Plan      string `json:"plan"`
	Override  bool   `json:"override"`
}

// ovOverride is an override on the wire.
type ovOverride struct {
	Policy    string            `json:"policy"`
	Key       string            `json:"key"`
	Plan      string            `json:"plan"`
	Limits    []json.RawMessage `json:"limits"`
	ExpiresAt int64             `json:"expiresAt"`
	Reason    string            `json:"reason"`
	UpdatedAt int64             `json:"updatedAt"`
}

// customBody is the body of a PUT giving a key a fixed window of limit an hour.
func customBody(limit int) string {
	return fmt.Sprintf(`{"limits":[{"strategy":"fixedWindow","limit":%d,"windowMs":3600000}]}`, limit)
}

// do sends method path (with a JSON body if not "") to p and returns the status and the body.
func (f *ovFleet) do(p *serveProc, method, path, body string) (int, []byte, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+p.http+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// decide posts policy and key to p's /v1/check or /v1/peek (path) and returns the decision.
func (f *ovFleet) decide(p *serveProc, path, policy, key string) (ovDecision, error) {
	var d ovDecision
	code, b, err := f.do(p, "POST", path, fmt.Sprintf(`{"policy":%q,"key":%q}`, policy, key))
	if err != nil {
		return d, err
	}
	if code != http.StatusOK {
		return d, fmt.Errorf("%s %s/%s: HTTP %d %s", path, policy, key, code, b)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("%s %s/%s: %v: %s", path, policy, key, err, b)
	}
	if d.FailOpen {
		return d, fmt.Errorf("%s %s/%s: decided by the fail mode: %s", path, policy, key, b)
	}
	return d, nil
}

// put sets an override of policy's key through p and returns what the server stored.
func (f *ovFleet) put(t *testing.T, p *serveProc, policy, key, body string) ovOverride {
	t.Helper()
	code, b, err := f.do(p, "PUT", "/v1/overrides/"+policy+"/"+key, body)
	if err != nil || code != http.StatusOK {
		t.Fatalf("PUT /v1/overrides/%s/%s %s: HTTP %d %s %v", policy, key, body, code, b, err)
	}
	var o ovOverride
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatalf("PUT /v1/overrides/%s/%s: %v: %s", policy, key, err, b)
	}
	if o.Policy != policy || o.Key != key || o.UpdatedAt == 0 {
		t.Fatalf("PUT /v1/overrides/%s/%s answered %s", policy, key, b)
	}
	return o
}

// get is GET /v1/overrides/policy/key on p: the override, or false on 404.
func (f *ovFleet) get(t *testing.T, p *serveProc, policy, key string) (ovOverride, bool) {
	t.Helper()
	var o ovOverride
	code, b, err := f.do(p, "GET", "/v1/overrides/"+policy+"/"+key, "")
	switch {
	case err != nil:
		t.Fatalf("GET /v1/overrides/%s/%s: %v", policy, key, err)
	case code == http.StatusNotFound:
		return o, false
	case code != http.StatusOK:
		t.Fatalf("GET /v1/overrides/%s/%s: HTTP %d %s", policy, key, code, b)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatalf("GET /v1/overrides/%s/%s: %v: %s", policy, key, err, b)
	}
	return o, true
}

// The predicates of what a process answers for a key.
func isPro(d ovDecision) bool  { return d.Plan == "pro" && d.Override && d.Limit == proLimit }
func isFree(d ovDecision) bool { return d.Plan == "free" && !d.Override && d.Limit == freeLimit }

// until peeks policy's key on each of procs, every 2 ms, until want holds of its answer, and
// returns how long each took from since. It fails the test if a process never got there within
// 5 s, or got there with an answer received before since (a change applied too early).
func (f *ovFleet) until(t *testing.T, procs []*serveProc, policy, key string, want func(ovDecision) bool, since time.Time) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(procs))
	errs := make([]error, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() {
			deadline := since.Add(5 * time.Second)
			var last ovDecision
			var lastErr error
			for time.Now().Before(deadline) {
				d, err := f.decide(p, "/v1/peek", policy, key)
				at := time.Now()
				if err == nil && want(d) {
					if at.Before(since) {
						errs[i] = fmt.Errorf("answered %+v at %v, before %v", d, at.Format("15:04:05.000"), since.Format("15:04:05.000"))
					}
					took[i] = at.Sub(since)
					return
				}
				last, lastErr = d, err
				time.Sleep(2 * time.Millisecond)
			}
			errs[i] = fmt.Errorf("still answers %+v (%v) after 5 s", last, lastErr)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("%s/%s on process %d: %v", policy, key, slices.Index(f.procs, procs[i]), err)
		}
	}
	return took
}

// roundAll is ds rounded to 0.1 ms, for the log.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(100 * time.Microsecond)
	}
	return out
}

// testPropagation puts overrides through process 0 and measures how soon processes 1 and 2 apply
// them: each within applyWithin.
func (f *ovFleet) testPropagation(t *testing.T) {
	const rounds = 20
	var took []time.Duration
	for i := range rounds {
		key := fmt.Sprintf("prop-%d", i)
		if d, err := f.decide(f.procs[1], "/v1/peek", "api", key); err != nil || !isFree(d) {
			t.Fatalf("%s before its override: %+v %v", key, d, err)
		}
		start := time.Now()
		f.put(t, f.procs[0], "api", key, `{"plan":"pro","reason":"propagation"}`)
		// The process that set it applies it when the PUT returns.
		if d, err := f.decide(f.procs[0], "/v1/peek", "api", key); err != nil || !isPro(d) {
			t.Fatalf("%s on the process that set it: %+v %v", key, d, err)
		}
		took = append(took, f.until(t, f.procs[1:], "api", key, isPro, start)...)
	}
	slices.Sort(took)
	median, slowest := took[len(took)/2], took[len(took)-1]
	t.Logf("propagation of %d PUTs to 2 processes (from sending the PUT): median %v, max %v",
		rounds, median.Round(100*time.Microsecond), slowest.Round(100*time.Microsecond))
	if slowest > applyWithin {
		t.Errorf("a process applied an override %v after it was set, want within %v", slowest, applyWithin)
	}
}

// testExact has 3×16 clients spread over the fleet check one key with a custom limit, and one key
// of the default plan, far more often than their limits: the fleet admits each limit exactly.
func (f *ovFleet) testExact(t *testing.T) {
	o := f.put(t, f.procs[0], "custom", "exact", customBody(customLimit))
	if len(o.Limits) != 1 || o.Plan != "" {
		t.Fatalf("PUT of custom limits stored %+v", o)
	}
	applied := func(d ovDecision) bool { return d.Override && d.Limit == customLimit && d.Plan == "" }
	now := time.Now()
	f.until(t, f.procs, "custom", "exact", applied, now)

	tests := []struct {
		name, policy, key string
		limit             int
		want              func(ovDecision) bool
	}{
		{"custom limit", "custom", "exact", customLimit, applied},
		{"default plan", "api", "exact-free", freeLimit, isFree},
	}
	const perProc, perClient = 16, 15
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			allowed, checks := 0, 0
			var errs []error
			var wg sync.WaitGroup
			for _, p := range f.procs {
				for range perProc {
					wg.Go(func() {
						n, c := 0, 0
						var err error
						for range perClient {
							var d ovDecision
							if d, err = f.decide(p, "/v1/check", tt.policy, tt.key); err != nil {
								break
							}
							if !tt.want(d) {
								err = fmt.Errorf("a check applied %+v", d)
								break
							}
							c++
							n += btoi(d.Allowed)
						}
						mu.Lock()
						defer mu.Unlock()
						allowed, checks = allowed+n, checks+c
						if err != nil {
							errs = append(errs, err)
						}
					})
				}
			}
			wg.Wait()
			if len(errs) > 0 {
				t.Fatalf("%d clients failed, e.g. %v", len(errs), errs[0])
			}
			t.Logf("%s/%s: %d checks over 3 processes, %d allowed", tt.policy, tt.key, checks, allowed)
			if allowed != tt.limit {
				t.Errorf("the fleet admitted %d of %d checks, want exactly %d", allowed, checks, tt.limit)
			}
		})
	}
}

// testExpiry sets an override of 1.5 s: every process applies it until its expiresAt, and the
// default plan within applyWithin after, each judging expiry by itself (nothing is pushed then).
func (f *ovFleet) testExpiry(t *testing.T) {
	start := time.Now()
	o := f.put(t, f.procs[0], "api", "expiring", `{"plan":"pro","ttlMs":1500}`)
	if o.ExpiresAt < start.UnixMilli()+1500 || o.ExpiresAt > time.Now().UnixMilli()+1500 {
		t.Fatalf("ttlMs 1500 stored expiresAt %d, want 1500 ms after the PUT (sent at %d)", o.ExpiresAt, start.UnixMilli())
	}
	expires := time.UnixMilli(o.ExpiresAt)
	for i, d := range f.until(t, f.procs, "api", "expiring", isPro, start) {
		if !start.Add(d).Before(expires) {
			t.Fatalf("process %d applied the override only %v after the PUT, past its expiresAt", i, d)
		}
	}
	took := f.until(t, f.procs, "api", "expiring", isFree, expires)
	t.Logf("after expiresAt, the processes answered the default plan in %v", roundAll(took))
	for i, d := range took {
		if d > applyWithin {
			t.Errorf("process %d applied the override until %v after its expiresAt, want within %v", i, d, applyWithin)
		}
	}
	if _, ok := f.get(t, f.procs[1], "api", "expiring"); ok {
		t.Errorf("GET of an expired override found it")
	}
}

// testDelete deletes an override through process 0: processes 1 and 2 answer the default plan
// within applyWithin, and no process finds it.
func (f *ovFleet) testDelete(t *testing.T) {
	f.put(t, f.procs[0], "api", "deleted", `{"plan":"pro"}`)
	now := time.Now()
	f.until(t, f.procs, "api", "deleted", isPro, now)

	start := time.Now()
	code, b, err := f.do(f.procs[0], "DELETE", "/v1/overrides/api/deleted", "")
	if err != nil || code != http.StatusOK || !bytes.Contains(b, []byte(`"deleted":true`)) {
		t.Fatalf("DELETE: HTTP %d %s %v", code, b, err)
	}
	if d, err := f.decide(f.procs[0], "/v1/peek", "api", "deleted"); err != nil || !isFree(d) {
		t.Fatalf("the process that deleted it answers %+v %v", d, err)
	}
	took := f.until(t, f.procs[1:], "api", "deleted", isFree, start)
	t.Logf("processes 1 and 2 applied the delete in %v", roundAll(took))
	for i, d := range took {
		if d > applyWithin {
			t.Errorf("process %d applied the delete %v after it was made, want within %v", i+1, d, applyWithin)
		}
	}
	for i, p := range f.procs {
		if _, ok := f.get(t, p, "api", "deleted"); ok {
			t.Errorf("process %d: GET of a deleted override found it", i)
		}
	}
	if code, b, err := f.do(f.procs[1], "DELETE", "/v1/overrides/api/deleted", ""); err != nil || code != http.StatusNotFound {
		t.Errorf("DELETE of a deleted override: HTTP %d %s %v, want 404", code, b, err)
	}
}

// testRestart sets overrides, stops the fleet (SIGTERM) and starts another on the same store: its
// first checks apply them, and GET and the list return them.
func (f *ovFleet) testRestart(t *testing.T) {
	f.put(t, f.procs[0], "api", "kept-plan", `{"plan":"pro","reason":"outlives the fleet"}`)
	f.put(t, f.procs[1], "custom", "kept-limits", customBody(customLimit))
	for i, p := range f.procs {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatalf("process %d: SIGTERM: %v", i, err)
		}
	}
	for i, p := range f.procs {
		done := make(chan error, 1)
		go func() { done <- p.cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("process %d after SIGTERM: %v", i, err)
			}
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			<-done
			t.Fatalf("process %d did not stop within 15 s of SIGTERM", i)
		}
	}

	f.start(t)
	for i, p := range f.procs {
		// Each process's first check: spawnSluice asked only /readyz.
		d, err := f.decide(p, "/v1/check", "api", "kept-plan")
		if err != nil || !isPro(d) || !d.Allowed {
			t.Errorf("process %d's first check of api/kept-plan: %+v %v, want allowed under plan pro", i, d, err)
		}
		d, err = f.decide(p, "/v1/check", "custom", "kept-limits")
		if err != nil || !d.Override || d.Limit != customLimit {
			t.Errorf("process %d's first check of custom/kept-limits: %+v %v, want limit %d by override", i, d, err, customLimit)
		}
		if o, ok := f.get(t, p, "api", "kept-plan"); !ok || o.Plan != "pro" || o.Reason != "outlives the fleet" {
			t.Errorf("process %d: GET api/kept-plan: %+v %v", i, o, ok)
		}
	}

	code, b, err := f.do(f.procs[2], "GET", "/v1/overrides?policy=custom&prefix=kept-", "")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/overrides: HTTP %d %s %v", code, b, err)
	}
	var list struct {
		Overrides     []ovOverride `json:"overrides"`
		NextPageToken string       `json:"nextPageToken"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatalf("GET /v1/overrides: %v: %s", err, b)
	}
	if len(list.Overrides) != 1 || list.Overrides[0].Key != "kept-limits" || len(list.Overrides[0].Limits) != 1 || list.NextPageToken != "" {
		t.Errorf("GET /v1/overrides?policy=custom&prefix=kept- after the restart: %s", b)
	}
}
