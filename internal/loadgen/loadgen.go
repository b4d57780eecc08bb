// Package loadgen is the engine of sluice bench: it drives a running sluice server over gRPC,
// HTTP or Envoy's rate-limit API (or, for comparison, gubernator over its gRPC API) with a fixed number of concurrent callers
// for a fixed duration or number of calls, and reports throughput, outcomes and call latency.
//
// Each caller (worker) keeps its own counters and latency histogram, so the hot path takes no lock;
// progress reports and the final summary merge them.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Protocols Run can speak.
const (
	GRPC       = "grpc"
	HTTP       = "http"
	Gubernator = "gubernator" // gubernator's GetRateLimits over gRPC, for comparison
	Envoy      = "envoy"      // Envoy's ShouldRateLimit over gRPC: sluice's Envoy port, envoyproxy/ratelimit
)

// Config describes one run.
type Config struct {
	Target      string        // host:port of the server's gRPC or HTTP port (an http:// URL also works for HTTP)
	Proto       string        // GRPC, HTTP, Gubernator or Envoy
	Policy      string        // the policy to check against; with Envoy, the domain
	Keys        int           // distinct keys, chosen uniformly at random
	Concurrency int           // concurrent callers
	Conns       int           // gRPC connections, or HTTP connections per host at most
	Duration    time.Duration // how long to run
	Calls       int64         // stop after this many calls, counting the first; 0: no limit
	Rate        float64       // calls per second at most, spread evenly over the callers; 0: as fast as they go
	Batch       int           // 0 or 1: unary Check; more: CheckMany of Batch keys per call (Envoy: descriptors per request)
	Cost        int64         // the cost of each check; 0 means 1
	Token       string        // bearer token sent with every call, if not empty
	Limit       int64         // Gubernator only: the limit sent in each request
	Period      time.Duration // Gubernator only: the duration sent in each request (whole ms)

	// Progress, if set, is called about every ProgressEvery (default 1 s) from one goroutine with
	// the figures of the interval just past.
	Progress      func(Progress)
	ProgressEvery time.Duration
}

// Progress holds the figures of one progress interval.
type Progress struct {
	Elapsed      time.Duration // since the start of the run
	Calls        int64         // calls completed so far
	Checks       int64         // checks completed so far
	Errors       int64         // failed calls so far
	ChecksPerSec float64       // in the interval
	AllowedPct   float64       // of the interval's checks
	P50, P99     time.Duration // call latency in the interval
}

// Summary is the result of a run.
type Summary struct {
	Target       string        `json:"target"`
	Proto        string        `json:"proto"`
	Policy       string        `json:"policy"`
	Keys         int           `json:"keys"`
	Concurrency  int           `json:"concurrency"`
	Conns        int           `json:"conns"`
	Batch        int           `json:"batch"`
	Cost         int64         `json:"cost"`
	Limit        int64         `json:"limit,omitempty"`    // Gubernator only
	PeriodMs     int64         `json:"periodMs,omitempty"` // Gubernator only
	Elapsed      time.Duration `json:"-"`
	ElapsedSec   float64       `json:"elapsedSec"`
	Calls        int64         `json:"calls"` // successful calls; failed ones are Errors
	Checks       int64         `json:"checks"`
	ChecksPerSec float64       `json:"checksPerSec"`
	CallsPerSec  float64       `json:"callsPerSec"`
	Allowed      int64         `json:"allowed"`
	Denied       int64         `json:"denied"`
	FailOpen     int64         `json:"failOpen"` // allowed by the server's fail mode, not by a limit
	Errors       int64         `json:"errors"`
	FirstError   string        `json:"firstError,omitempty"`
	Latency      Latency       `json:"latencyMs"` // per call, successful or not
}

// Latency holds call latency quantiles. It marshals to JSON as milliseconds.
type Latency struct {
	P50, P90, P99, Max time.Duration
}

// MarshalJSON writes the quantiles as fractional milliseconds.
func (l Latency) MarshalJSON() ([]byte, error) {
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	return fmt.Appendf(nil, `{"p50":%g,"p90":%g,"p99":%g,"max":%g}`, ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max)), nil
}

// caller makes one call of Batch checks and reports their outcome.
type caller interface {
	call(ctx context.Context, keys []string) (outcome, error)
}

// outcome counts the checks of a call that were allowed, and of those, the ones the server's
// fail mode allowed without consulting a limit.
type outcome struct{ allowed, failOpen int }

func (o *outcome) add(p outcome) { o.allowed += p.allowed; o.failOpen += p.failOpen }

// transport opens the callers of one run: one caller per worker, sharing the run's connections.
type transport interface {
	caller(worker int) caller
	close()
}

// worker is one concurrent caller's state: written only by its goroutine, read by the reporters.
type worker struct {
	calls, checks, allowed, failOpen, errors atomic.Int64
	hist                                     Histogram
	firstErr                                 atomic.Pointer[string]
}

// Validate checks the configuration and fills in defaults.
func (c *Config) Validate() error {
	switch {
	case c.Target == "":
		return errors.New("no target: pass --target ADDR")
	case c.Proto != GRPC && c.Proto != HTTP && c.Proto != Gubernator && c.Proto != Envoy:
		return fmt.Errorf("proto %q: want grpc, http, gubernator or envoy", c.Proto)
	case c.Policy == "":
		return errors.New("no policy: pass --policy NAME")
	case c.Keys < 1:
		return fmt.Errorf("keys %d: want at least 1", c.Keys)
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency %d: want at least 1", c.Concurrency)
	case c.Conns < 1:
		return fmt.Errorf("conns %d: want at least 1", c.Conns)
	case c.Duration <= 0:
		return fmt.Errorf("duration %v: want more than 0", c.Duration)
	case c.Calls < 0:
		return fmt.Errorf("calls %d: want 0 (no limit) or more", c.Calls)
	case c.Rate < 0:
		return fmt.Errorf("rate %v: want 0 (no limit) or more", c.Rate)
	case c.Batch < 0 || c.Batch > 1000:
		return fmt.Errorf("batch %d: want 0 to 1000", c.Batch)
	case c.Cost < 0:
		return fmt.Errorf("cost %d: want 0 or more", c.Cost)
	case c.Proto == Gubernator && c.Limit < 1:
		return fmt.Errorf("limit %d: gubernator needs --limit N, at least 1", c.Limit)
	case c.Proto == Gubernator && c.Period < time.Millisecond:
		return fmt.Errorf("period %v: gubernator needs --period D, at least 1ms", c.Period)
	case c.Proto == Gubernator && c.Batch > gubernatorMaxBatch:
		return fmt.Errorf("batch %d: gubernator takes at most %d", c.Batch, gubernatorMaxBatch)
	case c.Proto == Envoy && c.Cost > math.MaxUint32:
		return fmt.Errorf("cost %d: Envoy's hits_addend takes at most %d", c.Cost, uint32(math.MaxUint32))
	}
	if c.Batch == 0 {
		c.Batch = 1
	}
	if c.Cost == 0 {
		c.Cost = 1
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = time.Second
	}
	return nil
}

// Run drives the server for cfg.Duration, or until cfg.Calls calls were made, and returns the
// summary. It first makes one call to fail fast on a wrong target, policy or token; that call is
// counted like the others, so that every check the server saw is in the summary. Calls still running at
// the end are given a few seconds, then cancelled. ctx cancels the run early (the summary then
// covers the time run).
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var tr transport
	var err error
	switch cfg.Proto {
	case GRPC:
		tr, err = newGRPC(cfg)
	case HTTP:
		tr, err = newHTTP(cfg)
	case Gubernator:
		tr, err = newGubernator(cfg)
	case Envoy:
		tr, err = newEnvoy(cfg)
	}
	if err != nil {
		return nil, err
	}
	defer tr.close()

	keys := make([]string, cfg.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-%d", i)
	}
	batch := cfg.Batch // with fewer keys than that, a batch may repeat keys

	workers := make([]*worker, cfg.Concurrency)
	for i := range workers {
		workers[i] = &worker{}
	}
	pre, cancelPre := context.WithTimeout(ctx, 10*time.Second)
	t0 := time.Now()
	firstKeys := make([]string, batch)
	for i := range firstKeys {
		firstKeys[i] = keys[i%len(keys)]
	}
	first, err := tr.caller(0).call(pre, firstKeys)
	cancelPre()
	if err != nil {
		return nil, fmt.Errorf("first call to %s: %w", cfg.Target, err)
	}
	workers[0].record(first, batch, time.Since(t0))
	var tickets atomic.Int64 // calls started; the first is made
	tickets.Store(1)

	// The calls' context outlives the duration by a grace period, so that calls in flight at the
	// end complete and count, but a hung server cannot keep the run going.
	callCtx, cancelCalls := context.WithTimeout(ctx, cfg.Duration+5*time.Second)
	defer cancelCalls()
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for i, w := range workers {
		c := tr.caller(i)
		rng := rand.New(rand.NewPCG(uint64(start.UnixNano()), uint64(i)))
		pace := newPace(cfg.Rate, cfg.Concurrency, i, start)
		wg.Go(func() { w.run(callCtx, c, &stop, &tickets, cfg.Calls, pace, rng, keys, batch) })
	}
	timer := time.NewTimer(cfg.Duration)
	defer timer.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	ticker := time.NewTicker(cfg.ProgressEvery)
	defer ticker.Stop()
	var prev snapshot
	prevAt := start
	var cur snapshot
wait:
	for {
		select {
		case <-timer.C:
			stop.Store(true)
		case <-ctx.Done():
			stop.Store(true)
		case now := <-ticker.C:
			if cfg.Progress == nil || stop.Load() {
				continue
			}
			cur.take(workers)
			cfg.Progress(cur.progress(&prev, now.Sub(prevAt), now.Sub(start)))
			prev, prevAt = cur, now
		case <-done:
			break wait
		}
	}
	elapsed := time.Since(start)

	var final snapshot
	final.take(workers)
	s := &Summary{
		Target: cfg.Target, Proto: cfg.Proto, Policy: cfg.Policy, Keys: cfg.Keys,
		Concurrency: cfg.Concurrency, Conns: cfg.Conns, Batch: cfg.Batch, Cost: cfg.Cost,
		Elapsed: elapsed, ElapsedSec: elapsed.Seconds(),
		Calls: final.calls, Checks: final.checks, Allowed: final.allowed,
		Denied: final.checks - final.allowed, FailOpen: final.failOpen, Errors: final.errors,
		ChecksPerSec: float64(final.checks) / elapsed.Seconds(),
		CallsPerSec:  float64(final.calls) / elapsed.Seconds(),
		Latency: Latency{
			P50: final.hist.Quantile(0.50), P90: final.hist.Quantile(0.90),
			P99: final.hist.Quantile(0.99), Max: final.hist.Max,
		},
	}
	if cfg.Proto == Gubernator {
		s.Limit, s.PeriodMs = cfg.Limit, cfg.Period.Milliseconds()
	}
	for _, w := range workers {
		if e := w.firstErr.Load(); e != nil {
			s.FirstError = *e
			break
		}
	}
	return s, nil
}

// pace spaces one worker's calls evenly: with rate calls a second over workers, each makes one
// every workers/rate, its first offset by its index, so that the calls of all interleave.
type pace struct {
	every time.Duration // 0: no pacing
	next  time.Time
}

func newPace(rate float64, workers, i int, start time.Time) *pace {
	if rate <= 0 {
		return &pace{}
	}
	every := time.Duration(float64(workers) / rate * float64(time.Second))
	return &pace{every: every, next: start.Add(every * time.Duration(i) / time.Duration(workers))}
}

// wait sleeps until the next call is due. A worker that fell behind (a slow answer) goes at once,
// and does not make up the calls it missed: the rate is a ceiling, not a debt.
func (p *pace) wait(stop *atomic.Bool) {
	if p.every == 0 {
		return
	}
	now := time.Now()
	if d := p.next.Sub(now); d > 0 {
		for d > 0 && !stop.Load() { // sleep in slices, so that a long period ends with the run
			time.Sleep(min(d, 100*time.Millisecond))
			d = time.Until(p.next)
		}
	} else {
		p.next = now
	}
	p.next = p.next.Add(p.every)
}

// run makes calls until stop, or until tickets reach calls (0: no limit), paced by pace.
func (w *worker) run(ctx context.Context, c caller, stop *atomic.Bool, tickets *atomic.Int64, calls int64, pace *pace, rng *rand.Rand, keys []string, batch int) {
	buf := make([]string, batch)
	n := uint64(len(keys))
	for pace.wait(stop); !stop.Load() && (calls == 0 || tickets.Add(1) <= calls); pace.wait(stop) {
		for i := range buf {
			buf[i] = keys[rng.Uint64N(n)]
		}
		t0 := time.Now()
		o, err := c.call(ctx, buf)
		if err != nil {
			w.hist.Record(time.Since(t0))
			if ctx.Err() != nil {
				return // cancelled: the run is over, not the server's fault
			}
			w.errors.Add(1)
			if w.firstErr.Load() == nil {
				msg := strings.TrimSpace(err.Error())
				w.firstErr.Store(&msg)
			}
			continue
		}
		w.record(o, batch, time.Since(t0))
	}
}

// record counts a call of batch checks that answered o after took.
func (w *worker) record(o outcome, batch int, took time.Duration) {
	w.hist.Record(took)
	w.calls.Add(1)
	w.checks.Add(int64(batch))
	w.allowed.Add(int64(o.allowed))
	w.failOpen.Add(int64(o.failOpen))
}

// snapshot is the merged state of all workers at one moment.
type snapshot struct {
	calls, checks, allowed, failOpen, errors int64
	hist                                     Counts
}

func (s *snapshot) take(workers []*worker) {
	*s = snapshot{}
	for _, w := range workers {
		s.calls += w.calls.Load()
		s.checks += w.checks.Load()
		s.allowed += w.allowed.Load()
		s.failOpen += w.failOpen.Load()
		s.errors += w.errors.Load()
		w.hist.AddTo(&s.hist)
	}
}

func (s *snapshot) progress(prev *snapshot, interval, elapsed time.Duration) Progress {
	p := Progress{Elapsed: elapsed, Calls: s.calls, Checks: s.checks, Errors: s.errors}
	checks := s.checks - prev.checks
	if interval > 0 {
		p.ChecksPerSec = float64(checks) / interval.Seconds()
	}
	if checks > 0 {
		p.AllowedPct = 100 * float64(s.allowed-prev.allowed) / float64(checks)
	}
	d := s.hist
	d.Sub(&prev.hist)
	d.Max = 0 // the interval's maximum is unknown; let quantiles report bucket bounds
	p.P50, p.P99 = d.Quantile(0.50), d.Quantile(0.99)
	return p
}
