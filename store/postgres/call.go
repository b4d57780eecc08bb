package pgstore

import (
	"cmp"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/internal/unspent"
)

// op is an operation of decide.
type op string

const (
	opCheck    op = "c"
	opPeek     op = "p"
	opForecast op = "f"
	opRefund   op = "r"
	opDebit    op = "d" // run by the function debit, with decide's arguments
)

// call is one run of decide: its operation and its steps, each one limit of one key, in groups of
// perGroup steps. A batch of concurrent callers' calls of one operation is one call whose groups
// are theirs, in arrival order, all of one size (internal/batch batches only groups of equal size).
type call struct {
	op       op
	now      int64
	perGroup int // steps per group: all or nothing for a check; decided one after another
	steps    []step
}

type step struct {
	p    *sluice.Policy
	key  string
	i    int // the limit's index in p
	cost int64
}

func newCall(o op, now int64, perGroup int) *call {
	return &call{op: o, now: now, perGroup: perGroup}
}

// add appends one step: limit i of p for key, with cost.
func (c *call) add(p *sluice.Policy, key string, i int, cost int64) {
	c.steps = append(c.steps, step{p: p, key: key, i: i, cost: cost})
}

// addPolicy appends one step per limit of p for key, each with the cost that limit counts.
func (c *call) addPolicy(p *sluice.Policy, key string, cost int64) {
	for i := range p.Limits() {
		c.add(p, key, i, p.Cost(i, cost))
	}
}

// width is how many numbers decide replies per step of o.
func (o op) width() int {
	switch o {
	case opCheck, opPeek:
		return 5
	case opForecast:
		return 3
	}
	return 0
}

// writes says whether o writes rows, and so runs holding a writers' slot (Config.InFlight).
func (o op) writes() bool { return o != opPeek && o != opForecast }

// compareRows orders rows by (policy, key, limit): the order every call locks them in.
func compareRows(a, b *step) int {
	if a.p != b.p {
		if c := strings.Compare(a.p.Name(), b.p.Name()); c != 0 {
			return c
		}
	}
	if c := strings.Compare(a.key, b.key); c != 0 {
		return c
	}
	return cmp.Compare(a.i, b.i)
}

// args is decide's arguments: the distinct rows in lock order, and each step's row, strategy,
// parameters and cost. Argument 4, the wait, is set by each run.
func (c *call) args(round int64) []any {
	order := make([]int, len(c.steps))
	for i := range order {
		order[i] = i
	}
	if len(order) > 1 {
		slices.SortFunc(order, func(a, b int) int { return compareRows(&c.steps[a], &c.steps[b]) })
	}
	var (
		policies, keys []string
		idx            []int16
		rowOf          = make([]int32, len(c.steps))
	)
	for k, i := range order {
		st := &c.steps[i]
		if k == 0 || compareRows(&c.steps[order[k-1]], st) != 0 {
			policies = append(policies, st.p.Name())
			keys = append(keys, textOf(st.key))
			idx = append(idx, int16(st.i))
		}
		rowOf[i] = int32(len(keys))
	}
	kinds := make([]string, len(c.steps))
	params := make([]float64, 0, 3*len(c.steps))
	var bounds []float64 // four per step when any step is a calendar window, else none
	costs := make([]int64, len(c.steps))
	for i, st := range c.steps {
		var kind string
		var a, b, d float64
		switch s := st.p.Limits()[st.i].Strategy.(type) {
		case sluice.GCRA:
			kind, a, b, d = "g", s.Limit, s.PeriodMs, s.Burst
		case sluice.TokenBucket:
			kind, a, b = "t", s.Capacity, s.RefillPerSec
		case sluice.FixedWindow:
			kind, a, b = "f", s.Limit, s.WindowMs
			if s.Calendar != "" {
				if bounds == nil {
					bounds = make([]float64, 4*len(c.steps))
				}
				calendarBounds(s, c.now, bounds[4*i:4*i+4])
			}
		case sluice.SlidingWindow:
			kind, a, b, d = "s", s.Limit, s.WindowMs, float64(s.Buckets)
		case sluice.SlidingWindowLog:
			kind, a, b = "l", s.Limit, s.WindowMs
		default:
			panic(fmt.Sprintf("pgstore: unknown strategy %T", s)) // NewPolicy admits only the five
		}
		kinds[i] = kind
		params = append(params, a, b, d)
		costs[i] = st.cost
	}
	if bounds == nil {
		bounds = []float64{} // '{}', not NULL
	}
	return []any{string(c.op), c.now, int32(c.perGroup), round, int64(0), policies, keys, idx, rowOf, kinds, params, costs, bounds}
}

// calendarBounds writes the bounds of three calendar windows in a row to b: the one holding now
// (this process's clock when now is 0) and its neighbours, so that decide finds the window holding
// the database clock's instant even across a boundary the two clocks disagree on.
func calendarBounds(st sluice.FixedWindow, now int64, b []float64) {
	if now == 0 {
		now = time.Now().UnixMilli()
	}
	start, end := st.Bounds(now)
	b[0], _ = st.Bounds(int64(start) - 1)
	b[1], b[2] = start, end
	_, b[3] = st.Bounds(int64(end))
}

// decisions turns five numbers per step into decisions, truncating each as Redis truncates a Lua
// number and clamping remaining at 0 as package algo does.
func decisions(v []float64) []sluice.Decision {
	out := make([]sluice.Decision, len(v)/5)
	for i := range out {
		n := v[5*i:]
		d := sluice.Decision{Allowed: n[0] == 1, Limit: int64(n[1]), Remaining: max(int64(n[2]), 0), ResetAt: int64(n[3]), RetryAfterMs: int64(n[4])}
		if d.Allowed {
			d.DeniedBy = -1
		}
		out[i] = d
	}
	return out
}

// combine folds the decisions of one policy's limits into the policy's decision.
func combine(ds []sluice.Decision) sluice.Decision {
	if len(ds) == 1 {
		return ds[0]
	}
	return sluice.Combine(ds)
}

// checked is combine for a check of cost under p: a denied check spent nothing of the limits that
// allowed, and their parts say so (package unspent).
func checked(p *sluice.Policy, cost int64, ds []sluice.Decision) sluice.Decision {
	unspent.Check(p, cost, ds)
	return combine(ds)
}

// checkedAll folds ds, one decision per limit of each op in turn, into one decision per op in out:
// a denied CheckAll spent nothing of the parts that allowed (package unspent).
func checkedAll(ps []*sluice.Policy, items []sluice.Item, ds []sluice.Decision, out []sluice.Decision) {
	unspent.CheckAll(ps, items, ds)
	for i := range items {
		n := len(ps[i].Limits())
		out[i], ds = combine(ds[:n:n]), ds[n:]
	}
}

// textOf is s as a text column holds it. PostgreSQL's text holds valid UTF-8 without NUL, and a
// sluice key (or a lease's name or holder) is any bytes: such a string, or one that starts with the
// escape byte, is stored as the escape byte and the string in hex, a form no string stored as
// itself has. Every other string, which is nearly every key, is stored as it is, so the rows of
// earlier builds keep their keys. Without this, a key that PostgreSQL cannot hold made the store
// unavailable for it, which a fail-open policy answers by admitting it.
func textOf(s string) string {
	if s != "" && s[0] != textEscape && utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return string(rune(textEscape)) + hex.EncodeToString([]byte(s))
}

// textEscape starts a string stored in hex (see textOf).
const textEscape = 0x01
