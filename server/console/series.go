package console

import (
	"encoding/json"
	"maps"
	"slices"

	"github.com/sluicehq/sluice/server"
)

// historyLen is how many seconds the live history spans: 15 minutes.
const historyLen = 900

// point is one second of the service: what each policy decided and how the store did, as
// differences of two readings of server.Totals a second apart.
type point struct {
	t        int64                          // the reading's instant, epoch ms
	policies map[string]server.PolicyTotals // only the policies with something to count
	p50, p99 float64                        // the store calls' quantiles, ms; 0 without calls
	calls    uint64
	errors   uint64
	timeouts uint64
	reloads  [2]uint64 // ok, failed
}

// diff is the point between readings prev and cur, taken at t.
func diff(t int64, prev, cur server.Totals) point {
	p := point{t: t, policies: map[string]server.PolicyTotals{}}
	for name, c := range cur.Policies {
		o := prev.Policies[name]
		d := server.PolicyTotals{
			Allowed: sub(c.Allowed, o.Allowed), Denied: sub(c.Denied, o.Denied), Errors: sub(c.Errors, o.Errors),
			FailOpen: sub(c.FailOpen, o.FailOpen), FailClosed: sub(c.FailClosed, o.FailClosed),
		}
		if d != (server.PolicyTotals{}) {
			p.policies[name] = d
		}
	}
	p.errors, p.timeouts = sub(cur.StoreErrors, prev.StoreErrors), sub(cur.StoreTimeouts, prev.StoreTimeouts)
	p.reloads = [2]uint64{sub(cur.ReloadsOK, prev.ReloadsOK), sub(cur.ReloadsFailed, prev.ReloadsFailed)}
	if n := len(cur.StoreCalls); n > 0 && n == len(prev.StoreCalls) {
		calls := make([]uint64, n)
		for i := range calls {
			calls[i] = sub(cur.StoreCalls[i], prev.StoreCalls[i])
		}
		p.calls = calls[n-1]
		p.p50 = quantile(0.5, cur.StoreBounds, calls) * 1000
		p.p99 = quantile(0.99, cur.StoreBounds, calls) * 1000
	} else if n > 0 {
		p.calls = cur.StoreCalls[n-1] // the first reading: nothing to subtract
	}
	return p
}

// sub is a-b, or a when b is larger (a counter that went back is read as restarted).
func sub(a, b uint64) uint64 {
	if b > a {
		return a
	}
	return a - b
}

// quantile estimates the q-quantile of a histogram as Prometheus's histogram_quantile does:
// linearly within the bucket the rank falls in. cum[i] counts the observations at most bounds[i],
// and cum[len(bounds)] all of them; a rank past the last bound answers the last bound.
func quantile(q float64, bounds []float64, cum []uint64) float64 {
	total := cum[len(cum)-1]
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	for i, b := range bounds {
		if float64(cum[i]) < rank {
			continue
		}
		lo, below := 0.0, uint64(0)
		if i > 0 {
			lo, below = bounds[i-1], cum[i-1]
		}
		if cum[i] == below {
			return b
		}
		return lo + (b-lo)*(rank-float64(below))/float64(cum[i]-below)
	}
	return bounds[len(bounds)-1]
}

// history holds the last historyLen points, oldest first once full. Its zero value is empty.
type history struct {
	ring []point
	next int // where the next point goes once ring is full
}

func (h *history) add(p point) {
	if len(h.ring) < historyLen {
		h.ring = append(h.ring, p)
		return
	}
	h.ring[h.next] = p
	h.next = (h.next + 1) % historyLen
}

// points are the points in order, oldest first.
func (h *history) points() []point {
	return append(append([]point(nil), h.ring[h.next:]...), h.ring[:h.next]...)
}

// The wire forms of docs/console.md.

type policyTick struct {
	Allowed    uint64 `json:"allowed"`
	Denied     uint64 `json:"denied"`
	FailOpen   uint64 `json:"failOpen"`
	FailClosed uint64 `json:"failClosed"`
	Errors     uint64 `json:"errors"`
}

type storeTick struct {
	P50      float64 `json:"p50Ms"`
	P99      float64 `json:"p99Ms"`
	Calls    uint64  `json:"calls"`
	Errors   uint64  `json:"errors"`
	Timeouts uint64  `json:"timeouts"`
}

type reloadsTick struct {
	OK    uint64 `json:"ok"`
	Error uint64 `json:"error"`
}

type tick struct {
	T          int64                 `json:"t"`
	Policies   map[string]policyTick `json:"policies"`
	Store      storeTick             `json:"store"`
	Reloads    reloadsTick           `json:"reloads"`
	Ready      bool                  `json:"ready"`
	ReadyError string                `json:"readyError"`
}

func (p point) tick(ready error) tick {
	t := tick{T: p.t, Policies: make(map[string]policyTick, len(p.policies)),
		Store:   storeTick{P50: p.p50, P99: p.p99, Calls: p.calls, Errors: p.errors, Timeouts: p.timeouts},
		Reloads: reloadsTick{OK: p.reloads[0], Error: p.reloads[1]}, Ready: ready == nil}
	for name, d := range p.policies {
		t.Policies[name] = policyTick{d.Allowed, d.Denied, d.FailOpen, d.FailClosed, d.Errors}
	}
	if ready != nil {
		t.ReadyError = ready.Error()
	}
	return t
}

// policyColumns are one policy's series; a series of zeros only is left out (most policies never
// fail open), which keeps a history of 100 policies small.
type policyColumns struct {
	Allowed    []uint64 `json:"allowed,omitempty"`
	Denied     []uint64 `json:"denied,omitempty"`
	FailOpen   []uint64 `json:"failOpen,omitempty"`
	FailClosed []uint64 `json:"failClosed,omitempty"`
	Errors     []uint64 `json:"errors,omitempty"`
}

type storeColumns struct {
	P50      []float64 `json:"p50Ms"`
	P99      []float64 `json:"p99Ms"`
	Calls    []uint64  `json:"calls"`
	Errors   []uint64  `json:"errors"`
	Timeouts []uint64  `json:"timeouts"`
}

type historyWire struct {
	Start    int64                     `json:"start"`
	StepMs   int64                     `json:"stepMs"`
	Policies map[string]*policyColumns `json:"policies"`
	Store    storeColumns              `json:"store"`
	Reloads  struct {
		OK    []uint64 `json:"ok"`
		Error []uint64 `json:"error"`
	} `json:"reloads"`
}

// encodeHistory is the history event's data: one column per series, a policy only if it
// counted something in the window, and of a policy only the series that are not all zeros.
func encodeHistory(ps []point, stepMs int64) ([]byte, error) {
	n := len(ps)
	w := historyWire{StepMs: stepMs, Policies: map[string]*policyColumns{}}
	w.Store = storeColumns{make([]float64, n), make([]float64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)}
	w.Reloads.OK, w.Reloads.Error = make([]uint64, n), make([]uint64, n)
	if n > 0 {
		w.Start = ps[0].t
	}
	for i, p := range ps {
		w.Store.P50[i], w.Store.P99[i], w.Store.Calls[i], w.Store.Errors[i], w.Store.Timeouts[i] = p.p50, p.p99, p.calls, p.errors, p.timeouts
		w.Reloads.OK[i], w.Reloads.Error[i] = p.reloads[0], p.reloads[1]
		for name, d := range maps.All(p.policies) {
			c := w.Policies[name]
			if c == nil {
				c = &policyColumns{make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)}
				w.Policies[name] = c
			}
			c.Allowed[i], c.Denied[i], c.FailOpen[i], c.FailClosed[i], c.Errors[i] = d.Allowed, d.Denied, d.FailOpen, d.FailClosed, d.Errors
		}
	}
	for _, c := range w.Policies {
		for _, col := range []*[]uint64{&c.Allowed, &c.Denied, &c.FailOpen, &c.FailClosed, &c.Errors} {
			if !slices.ContainsFunc(*col, func(v uint64) bool { return v != 0 }) {
				*col = nil
			}
		}
	}
	return json.Marshal(w)
}
