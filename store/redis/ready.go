package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

// Ping reports whether the store can decide now: whether every master that owns slots accepts a
// write, as a check's script needs. One Redis, or the master that Sentinel names, is sent one
// probe. A Cluster is asked for its slots (CLUSTER SLOTS, of the nodes in the client's topology,
// the first to answer), and each range of slots is sent a probe that the client routes as it
// routes a check's script on that slot. So a seed node of the URL that is dead but owns no slots
// does not count; a Cluster with a slot that no live master serves, a replica (a demoted master
// the client still talks to) and a master refusing writes (out of memory, min-replicas-to-write)
// do.
//
// The probe is SET <prefix>:ready:{tag} "" XX PX 1: a write that writes nothing (the key never
// exists), which a replica refuses as it would a check's, and which an ACL that lets the store
// run its scripts allows.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	if !s.cluster {
		return unavailable(probeErr(s.do(ctx, s.probe(s.prefix+":ready"))))
	}
	_, err := bounded(ctx, func() (struct{}, error) { return struct{}{}, unavailable(s.pingCluster(ctx)) })
	return err
}

// probe is the write that Ping sends to key's master.
func (s *Store) probe(key string) rueidis.Completed {
	return s.client.B().Set().Key(key).Value("").Xx().PxMilliseconds(1).Build()
}

// probeErr is a probe's error: none when the key was not there to set (the usual answer, nil).
func probeErr(r rueidis.RedisResult) error {
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	return nil
}

// slotRange is a range of a Cluster's slots and the address of its master, as a node reported.
type slotRange struct {
	first, last int64
	master      string
}

// pingCluster probes every range of slots of the Cluster, all at once.
func (s *Store) pingCluster(ctx context.Context) error {
	ranges, err := s.slotRanges(ctx)
	if err != nil {
		return err
	}
	if err := covered(ranges); err != nil {
		return err
	}
	cmds := make(rueidis.Commands, len(ranges))
	for i, r := range ranges {
		cmds[i] = s.probe(s.prefix + ":ready:{" + tagOf(uint16(r.first)) + "}").ToPipe()
	}
	var errs []error
	for i, r := range s.client.DoMulti(ctx, cmds...) {
		if err := probeErr(r); err != nil {
			errs = append(errs, fmt.Errorf("slots %d-%d (master %s): %v", ranges[i].first, ranges[i].last, ranges[i].master, err))
		}
	}
	return errors.Join(errs...)
}

// slotRanges asks every node of the client's topology (its masters and replicas, not the URL's
// seeds, which it keeps even when they are dead) for the Cluster's slots, all at once, and returns
// the first answer.
func (s *Store) slotRanges(ctx context.Context) ([]slotRange, error) {
	nodes := s.client.Nodes()
	if len(nodes) == 0 {
		return nil, errors.New("the client knows no node of the cluster")
	}
	// The others are left to finish within ctx: cancelling a command while its connection dials
	// fails the dial, and the commands that wait for that connection, the probes among them.
	type answer struct {
		ranges []slotRange
		err    error
	}
	answers := make(chan answer, len(nodes))
	for addr, n := range nodes {
		go func() {
			r, err := parseSlots(n.Do(ctx, n.B().ClusterSlots().Build().ToPipe()), addr)
			if err != nil {
				err = fmt.Errorf("CLUSTER SLOTS on %s: %v", addr, err)
			}
			answers <- answer{r, err}
		}()
	}
	var errs []error
	for range nodes {
		a := <-answers
		if a.err == nil {
			return a.ranges, nil
		}
		errs = append(errs, a.err)
	}
	return nil, errors.Join(errs...)
}

// parseSlots reads CLUSTER SLOTS: [first, last, [ip, port, id…], replicas…] per range. An empty ip
// is the node that answered, at addr.
func parseSlots(r rueidis.RedisResult, addr string) ([]slotRange, error) {
	entries, err := r.ToArray()
	if err != nil {
		return nil, err
	}
	out := make([]slotRange, 0, len(entries))
	for _, e := range entries {
		f, err := e.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("unexpected reply %v", e)
		}
		var sr slotRange
		sr.first, err = f[0].AsInt64()
		if err == nil {
			sr.last, err = f[1].AsInt64()
		}
		if err != nil || sr.first < 0 || sr.last < sr.first || sr.last > 16383 {
			return nil, fmt.Errorf("unexpected slot range %v", e)
		}
		if m, err := f[2].ToArray(); err == nil && len(m) >= 2 {
			host, _ := m[0].ToString()
			port, _ := m[1].AsInt64()
			if host == "" {
				host, _, _ = net.SplitHostPort(addr)
			}
			sr.master = net.JoinHostPort(host, strconv.FormatInt(port, 10))
		}
		out = append(out, sr)
	}
	return out, nil
}

// covered returns an error naming the slots that no range holds.
func covered(ranges []slotRange) error {
	ranges = slices.Clone(ranges)
	slices.SortFunc(ranges, func(a, b slotRange) int { return int(a.first - b.first) })
	var missing []string
	next := int64(0)
	for _, r := range ranges {
		if r.first > next {
			missing = append(missing, fmt.Sprintf("%d-%d", next, r.first-1))
		}
		next = max(next, r.last+1)
	}
	if next <= 16383 {
		missing = append(missing, fmt.Sprintf("%d-%d", next, 16383))
	}
	if len(missing) > 0 {
		return fmt.Errorf("slots %v have no master", missing)
	}
	return nil
}

// tags holds, by slot, a hash tag that falls in it (tagOf).
var tags sync.Map // uint16 → string

// tagOf returns a short hash tag whose key falls in slot sl: the first decimal number that does,
// found in about 16384 tries and kept.
func tagOf(sl uint16) string {
	if t, ok := tags.Load(sl); ok {
		return t.(string)
	}
	var buf [20]byte
	for i := int64(0); ; i++ {
		t := strconv.AppendInt(buf[:0], i, 10)
		if crc16(string(t))&16383 == sl {
			tags.Store(sl, string(t))
			return string(t)
		}
	}
}
