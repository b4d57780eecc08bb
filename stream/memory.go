package stream

import (
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice"
)

// MemoryEngine is the Backend in one process's memory, for development and tests: the same
// model, offsets and outputs as pgstream.Engine, and nothing survives the process. It is safe
// for concurrent use; every call holds one mutex, so each Process is atomic like a transaction
// of pgstream.Engine. The zero value is not usable; call NewMemory.
type MemoryEngine struct {
	clock func() int64 // for Events with At 0 and lease expiry; set once by NewMemoryWith

	mu      sync.Mutex // guards every field below, so that each call is atomic
	closed  bool
	log     map[string][]logged
	ids     map[[2]string]bool
	queries map[string]*memQuery
	windows map[string][]Window
	decided map[string][]Decision
	decIDs  map[decisionID]bool // every decision published, across resets
	parts   map[partKey][]int   // per stream, kind and partition: indexes into windows or decided
	groups  map[groupKey]*memGroup
	seq     int64 // one offset sequence for the log and the outputs, like a bigserial
}

// MemoryConfig configures a MemoryEngine. The zero value is ready to use.
type MemoryConfig struct {
	// Now is the engine's clock in epoch ms: the time of an Event with At 0 and of lease
	// expiry. Nil means time.Now().UnixMilli(); tests set one they move by hand.
	Now func() int64
}

// decisionID identifies a decision, as the PostgreSQL schema's decisions_identity index does.
type decisionID struct {
	query, key string
	start      int64
}

type logged struct {
	offset int64
	e      Event
}

type memQuery struct {
	q      Query
	agg    *Aggregator
	offset int64
	events int64
}

var _ Backend = (*MemoryEngine)(nil)

// NewMemory returns an empty MemoryEngine on the system clock.
func NewMemory() *MemoryEngine { return NewMemoryWith(MemoryConfig{}) }

// NewMemoryWith returns an empty MemoryEngine configured by cfg.
func NewMemoryWith(cfg MemoryConfig) *MemoryEngine {
	clock := cfg.Now
	if clock == nil {
		clock = func() int64 { return time.Now().UnixMilli() }
	}
	return &MemoryEngine{
		clock:   clock,
		log:     map[string][]logged{},
		ids:     map[[2]string]bool{},
		queries: map[string]*memQuery{},
		windows: map[string][]Window{},
		decided: map[string][]Decision{},
		decIDs:  map[decisionID]bool{},
		parts:   map[partKey][]int{},
		groups:  map[groupKey]*memGroup{},
	}
}

func (m *MemoryEngine) lock() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return sluice.ErrClosed
	}
	return nil
}

// Append implements Backend.
func (m *MemoryEngine) Append(ctx context.Context, events []Event) error {
	norm, err := NormalizeEvents(events, m.clock())
	if err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	for _, e := range norm {
		if e.ID != "" {
			id := [2]string{e.Stream, e.ID}
			if m.ids[id] {
				continue
			}
			m.ids[id] = true
		}
		m.seq++
		m.log[e.Stream] = append(m.log[e.Stream], logged{m.seq, e})
	}
	return nil
}

// register returns q's state, creating it; the caller holds mu.
func (m *MemoryEngine) register(q Query) (*memQuery, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if mq := m.queries[q.Name]; mq != nil {
		if mq.q != q {
			return nil, ErrQueryChanged
		}
		return mq, nil
	}
	agg, _ := NewAggregator(q)
	mq := &memQuery{q: q, agg: agg}
	m.queries[q.Name] = mq
	return mq, nil
}

// Register implements Backend.
func (m *MemoryEngine) Register(ctx context.Context, q Query) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	_, err := m.register(q)
	return err
}

// Reset implements Backend.
func (m *MemoryEngine) Reset(ctx context.Context, name string) error {
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	delete(m.queries, name)
	return nil
}

// Process implements Backend.
func (m *MemoryEngine) Process(ctx context.Context, q Query, now int64, max int) (int, error) {
	if err := m.lock(); err != nil {
		return 0, err
	}
	defer m.mu.Unlock()
	mq, err := m.register(q)
	if err != nil {
		return 0, err
	}
	max = batchSize(max)
	log := m.log[q.Stream]
	// Offsets grow along the log: find the first one after the query's.
	i, _ := searchOffset(log, mq.offset)
	n := 0
	for ; i < len(log) && n < max; i++ {
		mq.agg.Add(log[i].e)
		mq.offset = log[i].offset
		n++
	}
	mq.events += int64(n)
	for _, w := range mq.agg.Close(now) {
		m.seq++
		w.Offset = m.seq
		p := Partition(w.Key)
		wk := partKey{q.Stream, KindWindows, p}
		m.parts[wk] = append(m.parts[wk], len(m.windows[q.Stream]))
		m.windows[q.Stream] = append(m.windows[q.Stream], w)
		// A window decided before a Reset keeps its first decision: publish no second one.
		if d, ok := q.Decide(w); ok && !m.decIDs[decisionID{d.Query, d.Key, d.WindowStart}] {
			m.decIDs[decisionID{d.Query, d.Key, d.WindowStart}] = true
			d.Offset = m.seq
			dk := partKey{q.Stream, KindDecisions, p}
			m.parts[dk] = append(m.parts[dk], len(m.decided[q.Stream]))
			m.decided[q.Stream] = append(m.decided[q.Stream], d)
		}
	}
	return n, nil
}

func searchOffset(log []logged, after int64) (int, bool) {
	lo, hi := 0, len(log)
	for lo < hi {
		mid := (lo + hi) / 2
		if log[mid].offset <= after {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < len(log)
}

// batchSize is Process's max, or Windows' and Decisions' limit, with its default.
func batchSize(max int) int {
	if max <= 0 {
		return DefaultBatch
	}
	return max
}

// Windows implements Backend.
func (m *MemoryEngine) Windows(ctx context.Context, stream string, after int64, limit int) ([]Window, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return after_(m.windows[stream], after, limit, func(w Window) int64 { return w.Offset }), nil
}

// Decisions implements Backend.
func (m *MemoryEngine) Decisions(ctx context.Context, stream string, after int64, limit int) ([]Decision, error) {
	if err := m.lock(); err != nil {
		return nil, err
	}
	defer m.mu.Unlock()
	return after_(m.decided[stream], after, limit, func(d Decision) int64 { return d.Offset }), nil
}

// after_ copies up to limit items of the ordered xs whose offset is above after.
func after_[T any](xs []T, after int64, limit int, offset func(T) int64) []T {
	limit = batchSize(limit)
	var out []T
	for _, x := range xs {
		if offset(x) > after {
			out = append(out, x)
			if len(out) == limit {
				break
			}
		}
	}
	return out
}

// Stats implements Backend. An unknown name has zero Stats.
func (m *MemoryEngine) Stats(ctx context.Context, name string) (Stats, error) {
	if err := m.lock(); err != nil {
		return Stats{}, err
	}
	defer m.mu.Unlock()
	mq := m.queries[name]
	if mq == nil {
		return Stats{}, nil
	}
	st := mq.agg.Stats()
	st.Offset, st.Events = mq.offset, mq.events
	return st, nil
}

// Close makes later calls return sluice.ErrClosed.
func (m *MemoryEngine) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}
