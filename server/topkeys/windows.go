package topkeys

import (
	"slices"
	"strings"
)

// The two windows' buckets: a window is its bucket of now and the buckets before it.
const (
	minuteBucketMs = 10_000
	minuteBuckets  = 6
	hourBucketMs   = 5 * 60_000
	hourBuckets    = 12
)

// maxPolicies bounds the policies a windows holds at once. The server observes only its configured
// policies, far fewer; the bound keeps a caller that names policies at will from growing it.
const maxPolicies = 4096

// windows counts the events of every policy in buckets of both windows. It reads no clock: every
// call says the instant (epoch ms, not negative) it happens at. Not safe for concurrent use.
type windows struct {
	k        int
	policies map[string]*series
}

// series is one policy's buckets: its events at instant t count in slot id%n of each window's ring,
// id = t/width.
type series struct {
	minute [minuteBuckets]bucket
	hour   [hourBuckets]bucket
}

// bucket holds the events of one bucket's span, its sketches made at its first event (denied at its
// first denial). id is meaningful only while checked is not nil.
type bucket struct {
	id              int64
	checked, denied *sketch
}

func newWindows(k int) *windows {
	return &windows{k: k, policies: make(map[string]*series)}
}

// add counts a check of key under policy at now, and a denial if denied. It reports false when the
// event was dropped: a new policy while maxPolicies are held.
func (ws *windows) add(now int64, policy, key string, denied bool) bool {
	var denials int64
	if denied {
		denials = 1
	}
	return ws.addN(now, policy, key, 1, denials)
}

// addN counts checks of key under policy at now, denials of them denied (1 ≤ checks, 0 ≤ denials ≤
// checks), as add would one by one.
func (ws *windows) addN(now int64, policy, key string, checks, denials int64) bool {
	s := ws.policies[policy]
	if s == nil {
		if len(ws.policies) >= maxPolicies {
			return false
		}
		s = new(series)
		ws.policies[strings.Clone(policy)] = s // held for an hour: not a slice of a caller's buffer
	}
	now = max(now, 0)
	h := hashKey(key)
	key, owned := ws.addTo(s.minute[:], minuteBucketMs, now, key, h, checks, denials, false)
	ws.addTo(s.hour[:], hourBucketMs, now, key, h, checks, denials, owned)
	return true
}

// addTo counts the events in ring's bucket of now and returns the key as its sketches keep it (and
// true), for the next ring to share instead of cloning it again. An event older than the ring's
// span, which a bucket of a later instant has taken the place of, counts nowhere: it lies outside
// the windows of every instant that can still be asked about.
func (ws *windows) addTo(ring []bucket, widthMs, now int64, key string, h uint64, checks, denials int64, owned bool) (string, bool) {
	id := now / widthMs
	b := &ring[id%int64(len(ring))]
	if b.checked == nil || b.id < id {
		*b = bucket{id: id, checked: newSketch(ws.k)}
	} else if b.id > id {
		return key, owned
	}
	key = b.checked.add(key, h, checks, owned)
	if denials > 0 {
		if b.denied == nil {
			b.denied = newSketch(ws.k)
		}
		b.denied.add(key, h, denials, true)
	}
	return key, true
}

// window returns the policy's buckets in window w at now: the bucket of now and those before it,
// as many as the ring holds.
func (s *series) window(w Window, now int64) []*bucket {
	ring, widthMs := s.minute[:], int64(minuteBucketMs)
	if w == Hour {
		ring, widthMs = s.hour[:], hourBucketMs
	}
	id := max(now, 0) / widthMs
	var out []*bucket
	for i := range ring {
		if b := &ring[i]; b.checked != nil && b.id <= id && b.id > id-int64(len(ring)) {
			out = append(out, b)
		}
	}
	return out
}

// top returns the n keys checked most and denied most under policy in window w at now.
func (ws *windows) top(now int64, policy string, w Window, n int) (checked, denied Result) {
	checked.Keys, denied.Keys = []Count{}, []Count{}
	s := ws.policies[policy]
	if s == nil || (w != Minute && w != Hour) {
		return checked, denied
	}
	var cs, ds []*sketch
	for _, b := range s.window(w, now) {
		cs = append(cs, b.checked)
		if b.denied != nil {
			ds = append(ds, b.denied)
		}
	}
	return ws.result(cs, n), ws.result(ds, n)
}

func (ws *windows) result(parts []*sketch, n int) Result {
	m, floor := merge(ws.k, parts...)
	return Result{Total: m.Total(), ErrorBound: floor, Keys: m.Top(n)}
}

// names returns the policies with an event in window w at now, sorted.
func (ws *windows) names(now int64, w Window) []string {
	out := []string{}
	if w != Minute && w != Hour {
		return out
	}
	for name, s := range ws.policies {
		if len(s.window(w, now)) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// sweep deletes the policies with no event in the hour window at now, so that a renamed or
// removed policy's buckets go.
func (ws *windows) sweep(now int64) {
	for name, s := range ws.policies {
		if len(s.window(Hour, now)) == 0 {
			delete(ws.policies, name)
		}
	}
}
