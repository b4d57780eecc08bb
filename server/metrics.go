package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// metrics are the service's Prometheus series. Labels are bounded: a policy label only ever holds
// a configured policy's name (requests naming any other count under "(unknown)"), never a key.
type metrics struct {
	reg          *prometheus.Registry
	totals       *prometheus.Registry     // the series Totals reads: none that does I/O to collect
	decisions    *prometheus.CounterVec   // policy, outcome: allowed, denied, error
	latency      *prometheus.HistogramVec // op
	storeLatency prometheus.Histogram     // every call to a store that is not local
	storeErrors  *prometheus.CounterVec   // kind: error, timeout
	failDecision *prometheus.CounterVec   // policy, mode: open, closed (policy: a configured or generated name)
	reloads      *prometheus.CounterVec   // result: ok, error
	nearCache    *prometheus.CounterVec   // policy: decisions the near cache answered
}

// unknownPolicy is the policy label of requests that name no configured policy.
const unknownPolicy = "(unknown)"

func newMetrics(store any) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_decisions_total", Help: "Decisions by policy and outcome (allowed, denied, error).",
		}, []string{"policy", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "sluice_decision_seconds", Help: "Time to answer a request, by operation.",
			Buckets: []float64{25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3},
		}, []string{"op"}),
		storeLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_store_seconds", Help: "Time of each call to the store, batching included (not measured on the embedded store, which answers in process).",
			Buckets: []float64{50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1},
		}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_store_errors_total", Help: "Store calls that timed out (timeout: past storeTimeout, or a deadline or timeout error of the store or its batch) or failed otherwise (error).",
		}, []string{"kind"}),
		failDecision: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_fail_mode_decisions_total", Help: "Decisions made by a policy's fail mode because the store could not answer.",
		}, []string{"policy", "mode"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total", Help: "Configuration reloads by result (ok, error).",
		}, []string{"result"}),
		nearCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_near_cache_answers_total",
			Help: "Denials answered by the near cache without asking the store, by policy (nearCache: true).",
		}, []string{"policy"}),
	}
	m.reg.MustRegister(m.decisions, m.latency, m.storeLatency, m.storeErrors, m.failDecision, m.reloads, m.nearCache,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.totals = prometheus.NewRegistry()
	m.totals.MustRegister(m.decisions, m.storeLatency, m.storeErrors, m.failDecision, m.reloads)
	if s, ok := store.(interface{ Len() int }); ok {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "sluice_keys", Help: "Keys the store holds.",
		}, func() float64 { return float64(s.Len()) }))
	}
	if s, ok := store.(interface{ Late() uint64 }); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_store_late_total",
			Help: "Store calls that succeeded after their caller's deadline: checks written that their callers were told had failed.",
		}, func() float64 { return float64(s.Late()) }))
	}
	if s, ok := store.(interface{ Unreplicated() uint64 }); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_store_unreplicated_total",
			Help: "Decisions whose replication wait (wait_replicas) fell short: they stand, on fewer replicas than asked.",
		}, func() float64 { return float64(s.Unreplicated()) }))
	}
	if s, ok := store.(interface{ Evictions() uint64 }); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_evictions_total", Help: "Idle keys the store's key cap dropped to make room for new ones (a key still spending is never evicted).",
		}, func() float64 { return float64(s.Evictions()) }))
	}
	if s, ok := store.(interface{ Refusals() uint64 }); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "sluice_key_refusals_total", Help: "New keys the store's key cap refused, every key held still spending: decided by the fail mode.",
		}, func() float64 { return float64(s.Refusals()) }))
	}
	return m
}

// Totals are the Server's running counts since start, as /metrics has them, for a reader that
// turns them into rates (the console samples them every second).
type Totals struct {
	Policies map[string]PolicyTotals // by policy; "(unknown)" counts requests naming no policy
	// StoreBounds are the upper bounds (seconds) of StoreCalls' buckets; StoreCalls[i] counts the
	// store calls that took at most StoreBounds[i] (cumulative), the last entry all calls. Both
	// are empty over a local store, which is not timed.
	StoreBounds []float64
	StoreCalls  []uint64
	// StoreErrors and StoreTimeouts count failed store calls by kind.
	StoreErrors, StoreTimeouts uint64
	// ReloadsOK and ReloadsFailed count configuration reloads by result.
	ReloadsOK, ReloadsFailed uint64
}

// PolicyTotals are one policy's decisions by outcome, and those its fail mode made.
type PolicyTotals struct {
	Allowed, Denied, Errors, FailOpen, FailClosed uint64
}

// Totals reads the running counts. It costs what a scrape of these few series costs; call it
// about once a second, not per request.
func (s *Server) Totals() (Totals, error) {
	fams, err := s.metrics.totals.Gather()
	if err != nil {
		return Totals{}, err
	}
	t := Totals{Policies: map[string]PolicyTotals{}}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			n := uint64(m.GetCounter().GetValue())
			switch f.GetName() {
			case "sluice_decisions_total":
				p := t.Policies[label(m, "policy")]
				switch label(m, "outcome") {
				case "allowed":
					p.Allowed = n
				case "denied":
					p.Denied = n
				case "error":
					p.Errors = n
				}
				t.Policies[label(m, "policy")] = p
			case "sluice_fail_mode_decisions_total":
				p := t.Policies[label(m, "policy")]
				if label(m, "mode") == "open" {
					p.FailOpen = n
				} else {
					p.FailClosed = n
				}
				t.Policies[label(m, "policy")] = p
			case "sluice_store_errors_total":
				if label(m, "kind") == "timeout" {
					t.StoreTimeouts = n
				} else {
					t.StoreErrors = n
				}
			case "sluice_config_reloads_total":
				if label(m, "result") == "ok" {
					t.ReloadsOK = n
				} else {
					t.ReloadsFailed = n
				}
			case "sluice_store_seconds":
				if s.opts.Local {
					continue
				}
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					t.StoreBounds = append(t.StoreBounds, b.GetUpperBound())
					t.StoreCalls = append(t.StoreCalls, b.GetCumulativeCount())
				}
				t.StoreCalls = append(t.StoreCalls, h.GetSampleCount())
			}
		}
	}
	return t, nil
}

// label is the value of m's label name, "" if it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
