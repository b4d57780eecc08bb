package console

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/config"
	"github.com/sluicehq/sluice/overrides"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/server/topkeys"
)

// API answers the console's routes under /v1/console/. It checks no token: the front end that
// mounts it (package httpapi) needs a check-scope one, and tells the scope (bearer.SessionOf).
func (c *Console) API() http.Handler {
	mux := http.NewServeMux()
	routes := []struct {
		method, path string
		h            http.HandlerFunc
	}{
		{"GET", "/v1/console/session", c.session},
		{"GET", "/v1/console/policies", c.policies},
		{"GET", "/v1/console/events", c.events},
		{"GET", "/v1/console/top", c.top},
		{"POST", "/v1/console/regions/simulate", simulateRegions},
		{"GET", "/v1/console/streams", listStreams(c.cfg.Streams, c.cfg.Queries)},
	}
	for _, rt := range routes {
		mux.HandleFunc(rt.method+" "+rt.path, rt.h)
		mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", rt.method)
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("console: %s %s: use %s", r.Method, rt.path, rt.method))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "console: no route "+r.URL.Path)
	})
	return mux
}

func (c *Console) session(w http.ResponseWriter, r *http.Request) {
	s := bearer.SessionOf(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{"auth": s.Auth, "scope": s.Scope.String()})
}

type policyView struct {
	Name      string            `json:"name"`
	Limits    []overrides.Limit `json:"limits"`
	FailMode  config.FailMode   `json:"failMode"`
	Plans     []string          `json:"plans"`
	Plan      string            `json:"plan"`
	Overrides int               `json:"overrides"`
	Lease     bool              `json:"lease"`
	NearCache bool              `json:"nearCache"`
}

type storeView struct {
	Kind  string `json:"kind"`
	Ready bool   `json:"ready"`
	Error string `json:"error"`
}

func (c *Console) policies(w http.ResponseWriter, r *http.Request) {
	srv := c.cfg.Server
	cfg := srv.Config()
	plans := map[string]config.Policy{}
	for _, p := range cfg.Policies {
		plans[p.Name()] = p
	}
	ps := srv.Limiter().Policies()
	out := make([]policyView, 0, len(ps))
	for _, p := range ps {
		v := policyView{Name: p.Name(), Limits: overrides.LimitsOf(p), FailMode: cfg.FailModeOf(p.Name()), Plans: []string{},
			Overrides: srv.Overrides().Count(p.Name()), Lease: cfg.Lease(p.Name()), NearCache: cfg.NearCache(p.Name())}
		if cp, ok := plans[p.Name()]; ok {
			for name := range cp.Plans {
				v.Plans = append(v.Plans, name)
			}
			slices.Sort(v.Plans)
			v.Plan = cp.Plan
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b policyView) int { return cmp.Compare(a.Name, b.Name) })
	c.mu.Lock()
	store := storeView{Kind: c.cfg.Store, Ready: c.ready == nil}
	if c.ready != nil {
		store.Error = c.ready.Error()
	}
	c.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"policies": out, "store": store, "topKeys": c.cfg.Keys != nil})
}

// Bounds of the top route's limit.
const (
	defaultTop = 10
	maxTop     = 100
)

type topList struct {
	Policy  string         `json:"policy"`
	Checked topkeys.Result `json:"checked"`
	Denied  topkeys.Result `json:"denied"`
}

func (c *Console) top(w http.ResponseWriter, r *http.Request) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, http.StatusBadRequest, codeInvalid, "console: the query string is malformed")
		return
	}
	for name, vs := range q {
		if name != "window" && name != "limit" && name != "policy" {
			writeError(w, http.StatusBadRequest, codeInvalid, fmt.Sprintf("console: unknown query parameter %q; want window, limit or policy", name))
			return
		}
		if len(vs) > 1 {
			writeError(w, http.StatusBadRequest, codeInvalid, fmt.Sprintf("console: %s: given %d times", name, len(vs)))
			return
		}
	}
	win, label := topkeys.Minute, "1m"
	switch v := q.Get("window"); v {
	case "", "1m":
	case "1h":
		win, label = topkeys.Hour, "1h"
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, fmt.Sprintf("console: window: want 1m or 1h, got %.40q", v))
		return
	}
	n := defaultTop
	if v := q.Get("limit"); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > maxTop {
			writeError(w, http.StatusBadRequest, codeInvalid, fmt.Sprintf("console: limit: want an integer from 1 to %d, got %.40q", maxTop, v))
			return
		}
	}
	policy := q.Get("policy")
	if _, ok := c.cfg.Server.Limiter().Policy(policy); policy != "" && !ok {
		writeError(w, http.StatusNotFound, codeNotFound, fmt.Sprintf("console: policy: no policy %.100q", policy))
		return
	}
	if c.cfg.Keys == nil {
		writeError(w, http.StatusNotImplemented, codeUnimplemented, "console: top keys are off (console.topKeys: false)")
		return
	}
	names := []string{policy}
	if policy == "" {
		names = c.cfg.Keys.Policies(win)
	}
	lists := make([]topList, 0, len(names))
	for _, name := range names {
		checked, denied := c.cfg.Keys.Top(name, win, n)
		lists = append(lists, topList{name, nonNil(checked), nonNil(denied)})
	}
	slices.SortFunc(lists, func(a, b topList) int {
		return cmp.Or(cmp.Compare(b.Denied.Total, a.Denied.Total), cmp.Compare(b.Checked.Total, a.Checked.Total), cmp.Compare(a.Policy, b.Policy))
	})
	writeJSON(w, http.StatusOK, map[string]any{"window": label, "capacity": c.cfg.Keys.Capacity(),
		"dropped": c.cfg.Keys.Dropped(), "policies": lists})
}

// nonNil gives r an empty list of keys rather than null.
func nonNil(r topkeys.Result) topkeys.Result {
	if r.Keys == nil {
		r.Keys = []topkeys.Count{}
	}
	return r
}

// feedWriteTimeout cuts off a browser that stops reading its feed.
const feedWriteTimeout = 10 * time.Second

// events is the live feed: the history, then a tick a second, as server-sent events.
func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	f, history, ok := c.subscribe()
	if !ok {
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, fmt.Sprintf("console: %d live feeds are open already, the most this server holds", c.cfg.MaxFeeds))
		return
	}
	defer c.unsubscribe(f)
	rc := http.NewResponseController(w)
	// A feed is not one request: lift the read deadline that would end it, and renew the write
	// deadline at each event so that only a browser that stops reading is cut off.
	_ = rc.SetReadDeadline(time.Time{})
	write := func(data []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(feedWriteTimeout))
		if _, err := w.Write(data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the feed
	w.WriteHeader(http.StatusOK)
	if !write(history) {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case data, ok := <-f.ch:
			if !ok || !write(data) {
				return
			}
		}
	}
}

// jsonEvent is a server-sent event of name carrying v as JSON.
func jsonEvent(name string, v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return event(name, data), nil
}

func event(name string, data []byte) []byte {
	return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", name, data)
}
