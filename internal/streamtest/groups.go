package streamtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/stream"
)

var kinds = []stream.Kind{stream.KindWindows, stream.KindDecisions}

const (
	groupKeys    = 64 // keys of stream "s"
	groupWindows = 3  // windows of each key of "s"
	groupItems   = groupKeys * groupWindows
	soloWindows  = 5 // windows of the one key of stream "solo"
)

// fillGroups emits outputs of three streams: "s", keys k0…k63 with three windows each; "solo",
// one key with five; "other", one window of k0, which no pull of "s" may return. Every window
// holds two events against a quota of 1, so each is also a decision.
func fillGroups(t *testing.T, b stream.Backend) {
	t.Helper()
	ctx := context.Background()
	emit := func(name string, keys, windows int) {
		t.Helper()
		q := stream.Query{Name: "g-" + name, Stream: name, WindowMs: 1000, IdleFlushMs: 1, Quota: 1}
		var evs []stream.Event
		for w := range windows { // in time order: an event behind the watermark would be late
			for k := range keys {
				key := fmt.Sprint("k", k)
				if name == "solo" {
					key = "only"
				}
				at := T0 + int64(w)*1000 + int64(k)
				evs = append(evs, stream.Event{Stream: name, Key: key, At: at}, stream.Event{Stream: name, Key: key, At: at})
			}
		}
		if err := b.Append(ctx, evs); err != nil {
			t.Fatal(err)
		}
		if err := b.Register(ctx, q); err != nil {
			t.Fatal(err)
		}
		ProcessAll(t, b, q, T0+1_000_000, 0)
	}
	emit("s", groupKeys, groupWindows)
	emit("solo", 1, soloWindows)
	emit("other", 1, 1)
	var covered [stream.Partitions]bool
	for k := range groupKeys {
		covered[stream.Partition(fmt.Sprint("k", k))] = true
	}
	if slices.Contains(covered[:], false) {
		t.Fatalf("keys of stream s leave a partition empty: %v", covered)
	}
}

// item is a Window or a Decision, for checks that hold for both.
type item struct {
	offset      int64
	stream, key string
}

func itemsOf(b stream.Batch) []item {
	var out []item
	for _, w := range b.Windows {
		out = append(out, item{w.Offset, w.Stream, w.Key})
	}
	for _, d := range b.Decisions {
		out = append(out, item{d.Offset, d.Stream, d.Key})
	}
	return out
}

// checkBatch checks that b holds only items of its kind, stream and partition, in offset order.
func checkBatch(t *testing.T, b stream.Batch, kind stream.Kind, name string) []item {
	t.Helper()
	if (kind == stream.KindWindows && len(b.Decisions) > 0) || (kind == stream.KindDecisions && len(b.Windows) > 0) {
		t.Fatalf("%s batch holds the other kind: %+v", kind, b)
	}
	items := itemsOf(b)
	if (b.Lease == "") != (len(items) == 0) {
		t.Fatalf("lease %q with %d items", b.Lease, len(items))
	}
	for i, it := range items {
		if it.stream != name || stream.Partition(it.key) != b.Partition || (i > 0 && it.offset <= items[i-1].offset) {
			t.Fatalf("item %d of %s batch of partition %d: %+v (batch %+v)", i, name, b.Partition, it, items)
		}
	}
	return items
}

func pull(t *testing.T, b stream.Backend, r stream.PullRequest) stream.Batch {
	t.Helper()
	batch, err := b.Pull(context.Background(), r)
	if err != nil {
		t.Fatalf("pull %+v: %v", r, err)
	}
	checkBatch(t, batch, r.Kind, r.Stream)
	return batch
}

func ack(t *testing.T, b stream.Backend, r stream.AckRequest) {
	t.Helper()
	if err := b.Ack(context.Background(), r); err != nil {
		t.Fatalf("ack %+v: %v", r, err)
	}
}

// offsets lists the offsets of a batch.
func offsets(b stream.Batch) []int64 {
	var out []int64
	for _, it := range itemsOf(b) {
		out = append(out, it.offset)
	}
	return out
}

// groupsLeaseExclusively has more pullers than partitions pull at once: each partition goes to
// one of them, and another group's leases are its own.
func groupsLeaseExclusively(t *testing.T, b Harness) {
	fillGroups(t, b)
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			const pullers = stream.Partitions + 8
			start := make(chan struct{})
			batches := make([]stream.Batch, pullers)
			errs := make([]error, pullers)
			var wg sync.WaitGroup
			for i := range pullers {
				wg.Go(func() {
					<-start
					batches[i], errs[i] = b.Pull(context.Background(), stream.PullRequest{Group: "g", Stream: "s", Kind: kind, Consumer: fmt.Sprint("c", i), Limit: 2})
				})
			}
			close(start)
			wg.Wait()
			seen := map[int]bool{}
			for i, batch := range batches {
				if errs[i] != nil {
					t.Fatalf("puller %d: %v", i, errs[i])
				}
				if batch.Lease == "" {
					continue
				}
				checkBatch(t, batch, kind, "s")
				if seen[batch.Partition] {
					t.Fatalf("partition %d leased twice", batch.Partition)
				}
				seen[batch.Partition] = true
			}
			if len(seen) != stream.Partitions {
				t.Fatalf("%d pullers leased %d partitions, want all %d", pullers, len(seen), stream.Partitions)
			}
			// Every partition is leased now; another group's leases are its own.
			if batch := pull(t, b, stream.PullRequest{Group: "g", Stream: "s", Kind: kind, Consumer: "late"}); batch.Lease != "" {
				t.Fatalf("a pull with every partition leased got %+v", batch)
			}
			if batch := pull(t, b, stream.PullRequest{Group: "g2", Stream: "s", Kind: kind, Consumer: "c"}); batch.Lease == "" {
				t.Fatal("another group found nothing to pull")
			}
		})
	}
}

// groupsDeliverEachOnce has consumers pull and ack every batch concurrently: together they
// see every item once, and each key's items in offset order.
func groupsDeliverEachOnce(t *testing.T, b Harness) {
	fillGroups(t, b)
	for _, tc := range []struct {
		name      string
		kind      stream.Kind
		consumers int
		limit     int
	}{
		{"windows one consumer", stream.KindWindows, 1, 5},
		{"windows eight consumers", stream.KindWindows, 8, 3},
		{"decisions eight consumers", stream.KindDecisions, 8, 1},
		{"decisions four consumers whole partitions", stream.KindDecisions, 4, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			group := tc.name
			var mu sync.Mutex // guards got and byKey
			got := map[int64]int{}
			byKey := map[string][]int64{}
			consume := func(consumer string) error {
				for {
					batch, err := b.Pull(context.Background(), stream.PullRequest{Group: group, Stream: "s", Kind: tc.kind, Consumer: consumer, Limit: tc.limit})
					if err != nil || batch.Lease == "" {
						return err
					}
					items := itemsOf(batch)
					// Recorded before the ack: the partition's next batch is pulled after it.
					mu.Lock()
					for _, it := range items {
						got[it.offset]++
						byKey[it.key] = append(byKey[it.key], it.offset)
					}
					mu.Unlock()
					err = b.Ack(context.Background(), stream.AckRequest{Group: group, Stream: "s", Kind: tc.kind, Lease: batch.Lease, Offset: items[len(items)-1].offset})
					if err != nil {
						return err
					}
				}
			}
			errs := make(chan error, tc.consumers)
			var wg sync.WaitGroup
			for i := range tc.consumers {
				wg.Go(func() { errs <- consume(fmt.Sprint("c", i)) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// A consumer stops at its first empty pull, which may come while others hold the
			// last partitions: one more pass finds whatever they left.
			if err := consume("drain"); err != nil {
				t.Fatal(err)
			}
			if len(got) != groupItems {
				t.Errorf("delivered %d distinct items, want %d", len(got), groupItems)
			}
			for off, n := range got {
				if n != 1 {
					t.Errorf("offset %d delivered %d times", off, n)
				}
			}
			for key, offs := range byKey {
				if len(offs) != groupWindows || !slices.IsSorted(offs) {
					t.Errorf("key %s delivered as %v, want %d offsets in order", key, offs, groupWindows)
				}
			}
		})
	}
}

// groupsAck walks one partition (stream solo has one key) through partial, empty, repeated
// and out of range acks.
func groupsAck(t *testing.T, b Harness) {
	fillGroups(t, b)
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			ctx := context.Background()
			req := stream.PullRequest{Group: "g", Stream: "solo", Kind: kind, Consumer: "c", Limit: 2}
			acked := func(lease string, offset int64) stream.AckRequest {
				return stream.AckRequest{Group: "g", Stream: "solo", Kind: kind, Lease: lease, Offset: offset}
			}
			first := pull(t, b, stream.PullRequest{Group: "g", Stream: "solo", Kind: kind, Consumer: "c", Limit: soloWindows})
			all := offsets(first) // every offset of the partition, to name them
			if len(all) != soloWindows || first.Partition != stream.Partition("only") {
				t.Fatalf("first pull: %+v", first)
			}
			if d := first.ExpiresAt - b.Now() - stream.DefaultLeaseMs; d < -b.Slack || d > b.Slack {
				t.Errorf("default lease expires at %d, %d ms off now + %d", first.ExpiresAt, d, stream.DefaultLeaseMs)
			}
			ack(t, b, acked(first.Lease, 0)) // commits nothing, releases the lease

			steps := []struct {
				name  string
				ack   int   // index into all of the offset to ack; -1 for none
				want  []int // indexes of the next pull's offsets
				retry bool  // the lease is acked again afterwards: stream.ErrLeaseLost
			}{
				{"partial ack", 0, []int{0, 1}, true},
				{"resumes after the ack", 1, []int{1, 2}, false},
				{"ack below the committed offset releases only", -1, []int{2, 3}, false},
				{"the same batch again", 3, []int{2, 3}, false},
				{"the rest", 4, []int{4}, true},
			}
			for _, s := range steps {
				batch := pull(t, b, req)
				var want []int64
				for _, i := range s.want {
					want = append(want, all[i])
				}
				if !slices.Equal(offsets(batch), want) {
					t.Fatalf("%s: pulled %v, want %v", s.name, offsets(batch), want)
				}
				if again := pull(t, b, req); again.Lease != "" {
					t.Fatalf("%s: the leased partition was pulled again: %+v", s.name, again)
				}
				offset := int64(0)
				if s.ack >= 0 {
					offset = all[s.ack]
				}
				ack(t, b, acked(batch.Lease, offset))
				if s.retry {
					if err := b.Ack(ctx, acked(batch.Lease, offset)); !errors.Is(err, stream.ErrLeaseLost) {
						t.Fatalf("%s: a second ack of the lease: %v, want ErrLeaseLost", s.name, err)
					}
				}
			}
			if batch := pull(t, b, req); batch.Lease != "" {
				t.Fatalf("after the last ack: %+v", batch)
			}
		})
	}
}

// groupsRedeliver lets leases expire: the batch goes to the next puller, and the late ack
// commits nothing.
func groupsRedeliver(t *testing.T, b Harness) {
	fillGroups(t, b)
	for _, kind := range kinds {
		t.Run(string(kind), func(t *testing.T) {
			ctx := context.Background()
			// Leases of a minute, moved in steps of half of one: the real time a step takes
			// does not decide a lease's fate, on the database clock either.
			const lease, half = 60_000, 30_000
			req := func(consumer string) stream.PullRequest {
				return stream.PullRequest{Group: "g", Stream: "solo", Kind: kind, Consumer: consumer, Limit: 2, LeaseMs: lease}
			}
			acked := func(lease string, offset int64) stream.AckRequest {
				return stream.AckRequest{Group: "g", Stream: "solo", Kind: kind, Lease: lease, Offset: offset}
			}
			a := pull(t, b, req("a"))
			if d := a.ExpiresAt - b.Now() - lease; d < -b.Slack || d > b.Slack {
				t.Errorf("lease expires at %d, %d ms off now + %d", a.ExpiresAt, d, lease)
			}
			b.Advance(half)
			if got := pull(t, b, req("b")); got.Lease != "" {
				t.Fatalf("pulled a live lease's partition: %+v", got)
			}
			b.Advance(half)
			redelivered := pull(t, b, req("b"))
			if redelivered.Lease == "" || redelivered.Lease == a.Lease || !slices.Equal(offsets(redelivered), offsets(a)) {
				t.Fatalf("after expiry pulled %+v, want the batch %v again under a new lease", redelivered, offsets(a))
			}
			if err := b.Ack(ctx, acked(a.Lease, offsets(a)[1])); !errors.Is(err, stream.ErrLeaseLost) {
				t.Fatalf("ack of a lease taken over: %v, want ErrLeaseLost", err)
			}
			// Expired and not taken over: still lost, and nothing committed.
			b.Advance(lease)
			if err := b.Ack(ctx, acked(redelivered.Lease, offsets(a)[1])); !errors.Is(err, stream.ErrLeaseLost) {
				t.Fatalf("ack of an expired lease: %v, want ErrLeaseLost", err)
			}
			third := pull(t, b, req("c"))
			if !slices.Equal(offsets(third), offsets(a)) {
				t.Fatalf("after two lost leases pulled %v, want %v", offsets(third), offsets(a))
			}
			ack(t, b, acked(third.Lease, offsets(third)[1]))
			if next := pull(t, b, req("c")); len(offsets(next)) == 0 || offsets(next)[0] <= offsets(a)[1] {
				t.Fatalf("after the ack pulled %v, want offsets after %d", offsets(next), offsets(a)[1])
			}
			if err := b.Ack(ctx, stream.AckRequest{Group: "g", Stream: "solo", Kind: kind, Lease: "never-issued"}); !errors.Is(err, stream.ErrLeaseLost) {
				t.Fatalf("ack of an unknown lease: %v, want ErrLeaseLost", err)
			}
		})
	}
}

// groupsInvalid sends bad pulls and acks, which name their field and change nothing.
func groupsInvalid(t *testing.T, b Harness) {
	fillGroups(t, b)
	ctx := context.Background()
	long := strings.Repeat("x", 201) // one byte over stream's limit on names, which TestPullDefaults pins

	held := pull(t, b, stream.PullRequest{Group: "g", Stream: "solo", Kind: stream.KindWindows, Consumer: "c", Limit: 2})
	last := offsets(held)[1]
	for _, tc := range []struct {
		name  string
		field string
		edit  func(*stream.PullRequest)
	}{
		{"no group", "group", func(r *stream.PullRequest) { r.Group = "" }},
		{"long group", "group", func(r *stream.PullRequest) { r.Group = long }},
		{"no stream", "stream", func(r *stream.PullRequest) { r.Stream = "" }},
		{"no consumer", "consumer", func(r *stream.PullRequest) { r.Consumer = "" }},
		{"long consumer", "consumer", func(r *stream.PullRequest) { r.Consumer = long }},
		{"unknown kind", "kind", func(r *stream.PullRequest) { r.Kind = "log" }},
		{"no kind", "kind", func(r *stream.PullRequest) { r.Kind = "" }},
		{"negative limit", "limit", func(r *stream.PullRequest) { r.Limit = -1 }},
		{"limit too large", "limit", func(r *stream.PullRequest) { r.Limit = stream.MaxPullLimit + 1 }},
		{"negative lease", "leaseMs", func(r *stream.PullRequest) { r.LeaseMs = -1 }},
		{"lease too long", "leaseMs", func(r *stream.PullRequest) { r.LeaseMs = stream.MaxLeaseMs + 1 }},
	} {
		t.Run("pull "+tc.name, func(t *testing.T) {
			r := stream.PullRequest{Group: "g2", Stream: "s", Kind: stream.KindWindows, Consumer: "c"}
			tc.edit(&r)
			batch, err := b.Pull(ctx, r)
			var ie *sluice.InvalidError
			if !errors.As(err, &ie) || ie.Field != tc.field || batch.Lease != "" {
				t.Errorf("Pull %+v = %+v, %v; want an invalid %s", r, batch, err, tc.field)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		field string
		edit  func(*stream.AckRequest)
	}{
		{"no group", "group", func(r *stream.AckRequest) { r.Group = "" }},
		{"no stream", "stream", func(r *stream.AckRequest) { r.Stream = "" }},
		{"no lease", "lease", func(r *stream.AckRequest) { r.Lease = "" }},
		{"long lease", "lease", func(r *stream.AckRequest) { r.Lease = long }},
		{"unknown kind", "kind", func(r *stream.AckRequest) { r.Kind = "Windows" }},
		{"negative offset", "offset", func(r *stream.AckRequest) { r.Offset = -1 }},
		{"past the batch", "offset", func(r *stream.AckRequest) { r.Offset = last + 1 }},
	} {
		t.Run("ack "+tc.name, func(t *testing.T) {
			r := stream.AckRequest{Group: "g", Stream: "solo", Kind: stream.KindWindows, Lease: held.Lease, Offset: last}
			tc.edit(&r)
			var ie *sluice.InvalidError
			if err := b.Ack(ctx, r); !errors.As(err, &ie) || ie.Field != tc.field {
				t.Errorf("Ack %+v = %v; want an invalid %s", r, err, tc.field)
			}
		})
	}
	// The held lease is intact and nothing was committed: its ack works, the partition
	// resumes right after it, and group g2 finds all of stream s.
	ack(t, b, stream.AckRequest{Group: "g", Stream: "solo", Kind: stream.KindWindows, Lease: held.Lease, Offset: last})
	if next := pull(t, b, stream.PullRequest{Group: "g", Stream: "solo", Kind: stream.KindWindows, Consumer: "c", Limit: 1}); len(offsets(next)) != 1 || offsets(next)[0] <= last {
		t.Errorf("after the ack: %+v", next)
	}
	n := 0
	for {
		batch := pull(t, b, stream.PullRequest{Group: "g2", Stream: "s", Kind: stream.KindWindows, Consumer: "c", Limit: stream.MaxPullLimit, LeaseMs: stream.MaxLeaseMs})
		if batch.Lease == "" {
			break
		}
		n += len(batch.Windows)
		ack(t, b, stream.AckRequest{Group: "g2", Stream: "s", Kind: stream.KindWindows, Lease: batch.Lease, Offset: batch.Windows[len(batch.Windows)-1].Offset})
	}
	if n != groupItems {
		t.Errorf("group g2 drained %d windows, want %d", n, groupItems)
	}
	// Unknown streams and groups hold nothing; closed engines refuse.
	if batch := pull(t, b, stream.PullRequest{Group: "g3", Stream: "nothing-here", Kind: stream.KindDecisions, Consumer: "c"}); batch.Lease != "" {
		t.Errorf("pull of an empty stream: %+v", batch)
	}
	b.Close()
	if _, err := b.Pull(ctx, stream.PullRequest{Group: "g", Stream: "s", Kind: stream.KindWindows, Consumer: "c"}); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("pull after close: %v", err)
	}
	if err := b.Ack(ctx, stream.AckRequest{Group: "g", Stream: "s", Kind: stream.KindWindows, Lease: "x"}); !errors.Is(err, sluice.ErrClosed) {
		t.Errorf("ack after close: %v", err)
	}
}
