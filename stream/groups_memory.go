package stream

import (
	"context"
	"sort"
)

// partKey names one partition of one output of a stream.
type partKey struct {
	stream string
	kind   Kind
	part   int
}

// groupKey names a group's view of one output of a stream.
type groupKey struct {
	group, stream string
	kind          Kind
}

// memGroup is a group's state of one output of a stream, per partition.
type memGroup [Partitions]memPart

// memPart is a group's committed offset in one partition and its lease, if any (lease "").
type memPart struct {
	committed int64
	lease     string
	consumer  string
	expires   int64 // epoch ms; the lease is live while the clock is below it
	upto      int64 // offset of the leased batch's last item
}

// offsetOf is the offset of item i of kind in stream; the caller holds mu.
func (m *MemoryEngine) offsetOf(stream string, kind Kind, i int) int64 {
	if kind == KindWindows {
		return m.windows[stream][i].Offset
	}
	return m.decided[stream][i].Offset
}

// pending is the indexes of partition k's items after offset after; the caller holds mu.
func (m *MemoryEngine) pending(k partKey, after int64) []int {
	idx := m.parts[k]
	i := sort.Search(len(idx), func(i int) bool { return m.offsetOf(k.stream, k.kind, idx[i]) > after })
	return idx[i:]
}

// Pull implements Backend. Of the partitions free to lease, it takes the one whose next item is
// oldest, so that no partition waits behind the others for long.
func (m *MemoryEngine) Pull(ctx context.Context, r PullRequest) (Batch, error) {
	r, err := r.Normalize()
	if err != nil {
		return Batch{}, err
	}
	if err := m.lock(); err != nil {
		return Batch{}, err
	}
	defer m.mu.Unlock()
	now := m.clock()
	gk := groupKey{r.Group, r.Stream, r.Kind}
	g := m.groups[gk]
	if g == nil {
		g = new(memGroup) // stored once it leases: a pull of a typo stores nothing
	}
	best, bestOffset := -1, int64(0)
	var items []int
	for p := range Partitions {
		st := &g[p]
		if st.lease != "" && now < st.expires {
			continue
		}
		next := m.pending(partKey{r.Stream, r.Kind, p}, st.committed)
		if len(next) == 0 {
			continue
		}
		if off := m.offsetOf(r.Stream, r.Kind, next[0]); best < 0 || off < bestOffset {
			best, bestOffset, items = p, off, next
		}
	}
	if best < 0 {
		return Batch{}, nil
	}
	items = items[:min(len(items), r.Limit)]
	b := Batch{Partition: best, Lease: newLease(), ExpiresAt: now + r.LeaseMs}
	for _, i := range items {
		if r.Kind == KindWindows {
			b.Windows = append(b.Windows, m.windows[r.Stream][i])
		} else {
			b.Decisions = append(b.Decisions, m.decided[r.Stream][i])
		}
	}
	m.groups[gk] = g
	g[best] = memPart{committed: g[best].committed, lease: b.Lease, consumer: r.Consumer, expires: b.ExpiresAt,
		upto: m.offsetOf(r.Stream, r.Kind, items[len(items)-1])}
	return b, nil
}

// Ack implements Backend.
func (m *MemoryEngine) Ack(ctx context.Context, r AckRequest) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if err := m.lock(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	now := m.clock()
	if g := m.groups[groupKey{r.Group, r.Stream, r.Kind}]; g != nil {
		for p := range g {
			st := &g[p]
			if st.lease != r.Lease {
				continue
			}
			if now >= st.expires {
				break
			}
			if err := r.CheckBatch(st.upto); err != nil {
				return err
			}
			*st = memPart{committed: max(st.committed, r.Offset)}
			return nil
		}
	}
	return r.LeaseLost()
}
