// Package redisstore is sluice's shared store on Redis: many sluice servers or embedded limiters in
// front of one Redis, a Sentinel-watched Redis or a Redis Cluster decide every key exactly, as if
// they were one process. Its directory is store/redis; import it as
//
//	import redisstore "github.com/sluicehq/sluice/store/redis"
//
// # Decisions
//
// Every operation is one Lua script (lua/*.lua, assembled in scripts.go), run with EVALSHA and, when Redis answers
// NOSCRIPT (after a restart or a SCRIPT FLUSH), run again with EVAL, which loads it. A check is one
// atomic step and one round trip: a composite policy's limits, and CheckAll's items whose keys
// share a Cluster slot, are decided in one script, all or nothing. The script computes package
// algo's float64 operations in algo's order, so decisions equal the memory store's and the
// conformance vectors field for field.
//
// now = 0 decides at the Redis server's clock (TIME, read inside the script: one clock for the
// whole fleet; Redis 7 replicates a script's writes, not the script, so replicas and the AOF hold
// the states the master computed). An explicit now is used as given, for replays and tests.
//
// The client is rueidis, chosen by measurement (docs/benchmarks.md): it pipelines the commands of
// concurrent callers on one connection by itself, so concurrent checks share round trips.
// Concurrent calls of one operation share script runs too (Config.BatchSize): Check, CheckMany
// and a CheckAll in one slot with one another, and Peek, Forecast, Refund and Debit each with
// concurrent calls of their own kind. Every call is still decided on its own, in arrival order,
// exactly as a run of its own at the same instant would decide it.
//
// # Keys
//
// A limit keeps a key's state under
//
//	<prefix>:{<policy>:<key>}     a policy with one limit
//	<prefix>:{<policy>:<key>}:<i> limit i of a composite policy
//
// (prefix "sluice" by default). The braces are a Redis Cluster hash tag: every limit of one policy
// and key lives in one slot, so a composite policy is always one script. States are short strings
// (see lua/strategy.lua), written with a TTL: the time until the key decides exactly like a fresh key,
// plus Config.TTLSlack. The slack keeps a key a little past that instant, so that rounding at the
// boundary, or a replay whose explicit instants run slower than the wall clock, never sees a key
// vanish while it still counts. GCRA checks on the server's clock set up to twice the slack and
// keep that TTL while it covers the new state, which spares Redis most expiry updates: such a key
// vanishes between one and two slacks after it went idle. Idle keys vanish by themselves; a key
// whose policy changed under the same name keeps its state until then.
//
// # CheckAll on a Cluster
//
// CheckAll's items whose keys fall in different slots cannot share a script. The store then
// reserves in each slot (one script per slot, all sent at once, each all or nothing) and, if any
// slot denied, refunds what the others consumed. It never admits past any limit: every unit
// admitted was consumed atomically in its slot. The window is between the reservations and the
// refunds (one more round trip): a concurrent check of the same keys may be denied by a
// reservation that is about to be refunded. Once the refunds land, a denied CheckAll has consumed
// nothing, up to what refunding means for the strategy (Refund's documentation in package sluice).
//
// # Errors
//
// A Redis failure, a timeout or a context deadline is an error matching sluice.ErrUnavailable; a
// call after Close is sluice.ErrClosed. Calls honour the context's deadline, and a script that
// consumes gives up, counting nothing, when it reaches Redis past an instant a little before that
// deadline (late.go): that error matches context.DeadlineExceeded too.
package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/algo"
	"github.com/sluicehq/sluice/internal/await"
	"github.com/sluicehq/sluice/internal/batch"
	"github.com/sluicehq/sluice/internal/storeerr"
	"github.com/sluicehq/sluice/internal/unspent"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Prefix starts every key. Empty means "sluice".
	Prefix string
	// TTLSlack is added to every key's TTL past the instant the key becomes idle (GCRA checks on
	// the server's clock: between once and twice TTLSlack, see Keys). 0 means one second; a
	// negative value adds nothing.
	TTLSlack time.Duration
	// BatchSize is the most concurrent calls one script run decides. Each operation batches its
	// own calls: Checks, CheckManys (each key counts as one) and CheckAlls in one slot share runs
	// of the check script, and Peeks, Forecasts, Refunds and Debits each runs of theirs. 0 means
	// 32; 1 sends every call on its own. On a Cluster a run holds the calls of one slot.
	BatchSize int
	// InFlight is how many batched runs, of all operations together, may be in flight at once
	// before new calls wait and batch: each operation spreads keys over InFlight lanes, each with
	// one run in flight, so the calls of a hot key batch rather than race. 0 means 1: Redis runs
	// one script at a time anyway, and a run costs it about as much to start as a dozen checks
	// cost to decide, so calls that wait for the run in flight are cheaper sent together in the
	// next (docs/redis.md, "Batching"). On a Cluster each operation has a lane per slot, and runs
	// are not bounded across slots.
	InFlight int
	// WaitReplicas, above 0, follows every script that consumes (checks, debits) with WAIT for that
	// many replicas to acknowledge its writes, on the same connection, so that an admission
	// outlives a failover of its master (docs/redis.md, "Replication"). The decision stands when
	// fewer acknowledge within WaitTimeout, and Unreplicated counts it. 0, the default, waits for
	// none: Redis replicates asynchronously, and a master that dies can take its latest
	// admissions with it.
	WaitReplicas int
	// WaitTimeout bounds each WAIT, rounded up to whole ms. 0 means 10 ms. A script followed by
	// WAIT gives up WaitTimeout earlier (see giveUpAt), so calls' deadlines must leave room for it.
	WaitTimeout time.Duration
}

// Store is the Redis sluice.Store. It is safe for concurrent use.
type Store struct {
	client   rueidis.Client
	cluster  bool // keys of one script must share a slot
	prefix   string
	slack    string                              // TTL slack in ms, as a script argument
	owns     bool                                // Close closes the client: it came from Open
	batchers [numOps]*batch.Batcher[call, int64] // per operation; nil: every call runs on its own
	closed   atomic.Bool

	wait         replication   // the WAIT after each script that consumes (Config.WaitReplicas)
	unreplicated atomic.Uint64 // runs whose WAIT fell short (Unreplicated)
	late         atomic.Uint64 // runs that consumed and answered past their deadline (Late)
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store on client. The caller keeps ownership of client: Close does not close it.
// A client with rueidis's DisableAutoPipelining (as ParseURL's options have it) sends each batched
// run on a connection of its own and pipelines the store's other commands; with automatic
// pipelining it pipelines them all, which decides the same but costs more CPU per check.
func New(client rueidis.Client, cfg Config) *Store {
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = "sluice"
	}
	slack := cfg.TTLSlack
	switch {
	case slack == 0:
		slack = time.Second
	case slack < 0:
		slack = 0
	}
	s := &Store{
		client:  client,
		cluster: client.Mode() == rueidis.ClientModeCluster,
		prefix:  prefix,
		slack:   strconv.FormatInt(slack.Milliseconds(), 10),
		wait:    replicationOf(cfg),
	}

	size, inFlight := cfg.BatchSize, cfg.InFlight
	if size == 0 {
		size = 32
	}
	if inFlight <= 0 {
		inFlight = 1
	}
	if size > 1 {
		// The runs of every operation share InFlight slots: each run takes a connection of its
		// own (see route), and the store holds InFlight such connections whatever the mix.
		slots := make(chan struct{}, inFlight)
		for o := range numOps {
			s.batchers[o] = s.newBatcher(o, size, inFlight, slots)
		}
	}
	return s
}

// newBatcher returns the batcher of operation o: runs of at most size groups (a Check's, a
// CheckMany key's, a Peek's...), over lanes lanes whose runs in flight share slots. Each caller's
// groups are appended by the add it hands runGroups.
func (s *Store) newBatcher(o op, size, lanes int, slots chan struct{}) *batch.Batcher[call, int64] {
	cfg := batch.Config[call, int64]{
		Max:   size,
		Lanes: lanes,
		Slots: slots,
		NewCall: func(now int64, steps int) call {
			c := newCall(o, now, s.slack, steps)
			c.ownConn = !s.cluster
			c.keys = make([]string, 0, size*steps) // room for a full batch: no growing
			c.steps = make([]string, 0, 2*size*steps)
			return c
		},
		Run: func(ctx context.Context, c call) ([]int64, error) {
			v, err := s.run(ctx, c)
			if err == nil {
				err = replyLen(v, width[o]*len(c.keys))
			}
			return v, err
		},
	}
	if s.cluster {
		// A script's keys must share a slot: a lane per slot, so a hot key batches as it does on
		// one Redis, and keys of other slots run beside it, unbounded.
		cfg.Lanes, cfg.Slots = 16384, nil
		cfg.Lane = func(p *sluice.Policy, key string) int { return int(slot(s.key(p, key, 0))) }
	}
	return batch.New(cfg)
}

// width is how many numbers each operation's script replies per step.
var width = [numOps]int{opCheck: 5, opPeek: 5, opForecast: 3, opRefund: 0, opDebit: 0}

// runGroups runs count groups of n steps of operation o, which add appends to a call, and returns
// their part of the reply, width[o] numbers per step. With batching, the groups share a run with
// concurrent callers' groups of o of n steps at the same now (p and key pick the lane: on a
// Cluster, every key of the groups must be in key's slot); without, they are a run of their own.
// Either way the script decides each group as a run of its own at that instant would.
func (s *Store) runGroups(ctx context.Context, o op, now int64, n, count int, p *sluice.Policy, key string, add func(call) call) ([]int64, error) {
	w := width[o] * n
	if b := s.batchers[o]; b != nil {
		v, first, err := b.Groups(ctx, now, n, count, p, key, add)
		if err != nil {
			return nil, err
		}
		return v[w*first : w*(first+count)], nil
	}
	v, err := s.run(ctx, add(newCall(o, now, s.slack, n)))
	if err == nil {
		err = replyLen(v, w*count)
	}
	return v, err
}

// Open connects to the Redis that url names (see ParseURL for the forms). A standalone Redis that is
// down shows on the first call (or Ping) as sluice.ErrUnavailable, and the client keeps trying;
// Sentinel and Cluster clients must reach a node to learn the topology, so Open fails when none
// answers. Close closes the client.
func Open(url string) (*Store, error) {
	opt, cfg, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(opt)
	if c == nil {
		return nil, fmt.Errorf("%w: redis store: %v", sluice.ErrUnavailable, err)
	}
	// A standalone client comes back with the dial error when Redis is down; it redials on use.
	s := New(c, cfg)
	s.owns = true
	return s, nil
}

// Close makes every later call return sluice.ErrClosed and, for a Store from Open, closes the
// client. It is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) || !s.owns {
		return nil
	}
	s.client.Close()
	return nil
}

func unavailable(err error) error { return storeerr.Unavailable("redis store", err) }

// key is where limit i of p keeps key's state: prefix:{policy:key}, then :i for each limit of a
// composite policy. All limits of one policy and key share the hash tag, so one script reaches them.
//
// A policy name may hold ':' too, and then policy "a:b" with key "c" and policy "a" with key "b:c"
// would meet at prefix:{a:b:c}; so such a name's key ends with :n and the name's length, which
// fixes where the name ends. A key without that suffix ends with '}' or a limit's index, never
// with :n and digits, and names without ':' keep the shorter form (and the state stored under it).
func (s *Store) key(p *sluice.Policy, key string, i int) string {
	name := p.Name()
	var b strings.Builder
	b.Grow(len(s.prefix) + len(name) + len(key) + 16)
	b.WriteString(s.prefix)
	b.WriteString(":{")
	b.WriteString(name)
	b.WriteByte(':')
	b.WriteString(key)
	b.WriteByte('}')
	if len(p.Limits()) > 1 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(i))
	}
	if strings.IndexByte(name, ':') >= 0 {
		b.WriteString(":n")
		b.WriteString(strconv.Itoa(len(name)))
	}
	return b.String()
}

func ftoa(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// script is a Lua script run with EVALSHA, and with EVAL (which loads it) where Redis does not hold
// it.
type script struct {
	source, sha string
}

func newScript(source string) *script {
	sum := sha1.Sum([]byte(source))
	return &script{source: source, sha: hex.EncodeToString(sum[:])}
}

// call is one run of a script: its operation, the strategies it needs, its keys and arguments,
// built step by step. Each limit's parameters are sent once however many steps use it.
type call struct {
	op       op
	now      int64 // the instant asked for; 0 is the Redis clock
	perGroup int   // steps per all-or-nothing group
	set      uint8 // bit i: a step of strategy kinds[i]
	head     []string
	limits   []limitRef // the limits the steps use, in the order of their arguments
	defs     []string   // seven per limit
	keys     []string
	steps    []string // two per step: the limit (1-based) and the cost
	ownConn  bool     // a run of the batcher: sent on a connection of its own (see route)
}

type limitRef struct {
	p *sluice.Policy
	i int
}

func newCall(o op, now int64, slack string, perGroup int) call {
	// head[2], the instant to give up, is set when the call is sent (setGiveUp).
	return call{op: o, now: now, perGroup: perGroup, head: []string{strconv.FormatInt(now, 10), slack, "0", strconv.Itoa(perGroup)}}
}

// limit returns the argument number of limit i of p, adding its parameters on first use.
func (c *call) limit(p *sluice.Policy, i int) string {
	for j, l := range c.limits {
		if l.p == p && l.i == i {
			return strconv.Itoa(j + 1)
		}
	}
	c.limits = append(c.limits, limitRef{p, i})
	d := [7]string{"", "0", "0", "0", "0", "0", "0"}
	switch st := p.Limits()[i].Strategy.(type) {
	case sluice.GCRA:
		d[0], d[1], d[2], d[3] = "g", ftoa(st.Limit), ftoa(st.PeriodMs), ftoa(st.Burst)
	case sluice.TokenBucket:
		d[0], d[1], d[2] = "t", ftoa(st.Capacity), ftoa(st.RefillPerSec)
	case sluice.FixedWindow:
		d[0], d[1], d[2] = "f", ftoa(st.Limit), ftoa(st.WindowMs)
		if st.Calendar != "" {
			copy(d[3:], calendarBounds(st, c.now))
		}
	case sluice.SlidingWindow:
		d[0], d[1], d[2], d[3] = "s", ftoa(st.Limit), ftoa(st.WindowMs), strconv.Itoa(st.Buckets)
	case sluice.SlidingWindowLog:
		d[0], d[1], d[2] = "l", ftoa(st.Limit), ftoa(st.WindowMs)
	default:
		panic(fmt.Sprintf("redisstore: unknown strategy %T", st)) // NewPolicy admits only the five
	}
	c.set |= 1 << strings.IndexByte(kinds, d[0][0])
	c.defs = append(c.defs, d[:]...)
	return strconv.Itoa(len(c.limits))
}

// calendarBounds returns the bounds of three calendar windows in a row: the one holding now
// (this process's clock when now is 0) and its neighbours, so that the script finds the window
// holding the Redis clock's instant even across a boundary the two clocks disagree on.
func calendarBounds(st sluice.FixedWindow, now int64) []string {
	if now == 0 {
		now = time.Now().UnixMilli()
	}
	start, end := st.Bounds(now)
	before, _ := st.Bounds(int64(start) - 1)
	_, after := st.Bounds(int64(end))
	return []string{ftoa(before), ftoa(start), ftoa(end), ftoa(after)}
}

// add appends one step: limit i of p for key, with cost.
func (c *call) add(s *Store, p *sluice.Policy, key string, i int, cost int64) {
	c.keys = append(c.keys, s.key(p, key, i))
	c.steps = append(c.steps, c.limit(p, i), strconv.FormatInt(cost, 10))
}

// stepArgs is the steps' arguments: one pair when every step has the same limit and cost (a
// batch of checks of one policy), which spares Redis reading the same two numbers per step.
func (c *call) stepArgs() []string {
	for i := 2; i < len(c.steps); i += 2 {
		if c.steps[i] != c.steps[0] || c.steps[i+1] != c.steps[1] {
			return c.steps
		}
	}
	return c.steps[:min(2, len(c.steps))]
}

// addPolicy appends one step per limit of p for key, each with the cost that limit counts.
func (c *call) addPolicy(s *Store, p *sluice.Policy, key string, cost int64) {
	for i := range p.Limits() {
		c.add(s, p, key, i, p.Cost(i, cost))
	}
}

func (s *Store) evalsha(c call) rueidis.Completed {
	sc, argv := c.plan()
	return route(c, s.client.B().Evalsha().Sha1(sc.sha).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(argv...).Build())
}

func (s *Store) eval(c call) rueidis.Completed {
	sc, argv := c.plan()
	return route(c, s.client.B().Eval().Script(sc.source).Numkeys(int64(len(c.keys))).Key(c.keys...).Arg(argv...).Build())
}

// route sends a run of a batcher on a connection of its own and pipelines every other command.
//
// The batchers already make one command of many concurrent calls, and keep at most
// Config.InFlight of them in flight. On a connection of its own (a client with rueidis's
// DisableAutoPipelining, as Open's is), such a run is written and its reply read by the goroutine
// that sends it, where a pipelined one passes through rueidis's writing and reading goroutines on
// the way out and back. Every other command is marked to be pipelined, so that many concurrent
// calls share a few connections rather than take one each. A client with automatic pipelining
// (rueidis's default) pipelines both.
func route(c call, cmd rueidis.Completed) rueidis.Completed {
	if c.ownConn {
		return cmd
	}
	return cmd.ToPipe()
}

func noScript(r rueidis.RedisResult) bool {
	err, ok := rueidis.IsRedisErr(r.Error())
	return ok && err.IsNoScript()
}

// bounded returns f's result, or ctx's error as soon as ctx is done. rueidis can hold a call up to
// a second past its context while it tears down a connection whose dial failed (it waits for a
// PING to a Redis that may be hung), and every call is promised its deadline; f then finishes on
// its own goroutine, one per call at most, for at most that second.
func bounded[T any](ctx context.Context, f func() (T, error)) (T, error) {
	return boundedLate(ctx, nil, f)
}

// boundedLate is bounded, and calls late (if not nil) when f succeeds after the caller was
// answered with ctx's error.
func boundedLate[T any](ctx context.Context, late func(), f func() (T, error)) (T, error) {
	v, err := await.Call(ctx, late, f)
	if err != nil && err == ctx.Err() { // the caller's deadline, not Redis's answer
		return v, unavailable(err)
	}
	return v, err
}

// run runs the script once and returns its reply.
func (s *Store) run(ctx context.Context, c call) ([]int64, error) {
	if s.waits(c) {
		v, err := s.runAll(ctx, []call{c})
		if err != nil {
			return nil, err
		}
		return v[0], nil
	}
	if !consumes(c.op) {
		// Sent lingering too, though nothing is decided: a script cut off at the caller's deadline
		// costs the connection it came on (bounded answers the caller at its deadline anyway).
		return bounded(ctx, func() ([]int64, error) {
			qctx, cancel := lingering(ctx)
			defer cancel()
			r := s.client.Do(qctx, s.evalsha(c))
			if noScript(r) {
				r = s.client.Do(qctx, s.eval(c))
			}
			return numbers(c, r)
		})
	}
	c.setGiveUp(giveUpAt(ctx, 0))
	return boundedLate(ctx, s.countLate, func() ([]int64, error) {
		qctx, cancel := lingering(ctx)
		defer cancel()
		r := s.client.Do(qctx, s.evalsha(c))
		if noScript(r) {
			r = s.client.Do(qctx, s.eval(c))
		}
		return numbers(c, r)
	})
}

// do runs one command, pipelined (see route), bounded by ctx.
func (s *Store) do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	r, _ := bounded(ctx, func() (rueidis.RedisResult, error) {
		qctx, cancel := lingering(ctx) // as run's scripts: cut off, a command costs its connection
		defer cancel()
		return s.client.Do(qctx, cmd.ToPipe()), nil
	})
	if err := ctx.Err(); err != nil && r.Error() == nil {
		return rueidis.NewErrorResult(err)
	}
	return r
}

// runAll runs the script once per call, all sent at once (rueidis pipelines them, and sends each
// to its slot's node on a Cluster), and returns the replies in order. With Config.WaitReplicas,
// calls that consume run as runWaited does instead, side by side.
func (s *Store) runAll(ctx context.Context, calls []call) ([][]int64, error) {
	// The calls of one runAll all consume, or none do.
	if len(calls) == 0 || !consumes(calls[0].op) {
		return bounded(ctx, func() ([][]int64, error) {
			qctx, cancel := lingering(ctx)
			defer cancel()
			return s.runAllNow(qctx, calls)
		})
	}
	if s.waits(calls[0]) {
		return boundedLate(ctx, s.countLate, func() ([][]int64, error) { return s.runAllWaited(ctx, calls) })
	}
	at := giveUpAt(ctx, 0)
	for i := range calls {
		calls[i].setGiveUp(at)
	}
	return boundedLate(ctx, s.countLate, func() ([][]int64, error) {
		qctx, cancel := lingering(ctx)
		defer cancel()
		return s.runAllNow(qctx, calls)
	})
}

func (s *Store) runAllNow(ctx context.Context, calls []call) ([][]int64, error) {
	cmds := make(rueidis.Commands, len(calls))
	for i, c := range calls {
		cmds[i] = s.evalsha(c)
	}
	rs := s.client.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range rs {
		if noScript(r) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		cmds = cmds[:0]
		for _, i := range again {
			cmds = append(cmds, s.eval(calls[i]))
		}
		for j, r := range s.client.DoMulti(ctx, cmds...) {
			rs[again[j]] = r
		}
	}
	out := make([][]int64, len(rs))
	var firstErr error
	for i, r := range rs {
		v, err := numbers(calls[i], r)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		out[i] = v
	}
	return out, firstErr
}

// numbers reads the reply of c's script: an array of integers, or the string of a batch
// (lua/batch.lua), which it turns into the same five integers per step.
func numbers(c call, r rueidis.RedisResult) ([]int64, error) {
	if late(r) {
		return nil, errLate
	}
	if msg, err := r.ToMessage(); err == nil && msg.IsString() {
		b, _ := msg.ToString()
		return batchReply(c, b)
	}
	return ints(r)
}

// ints reads a script's reply, an array of integers.
func ints(r rueidis.RedisResult) ([]int64, error) {
	arr, err := r.ToArray()
	if err != nil {
		return nil, unavailable(err)
	}
	out := make([]int64, len(arr))
	for i := range arr {
		if out[i], err = arr[i].AsInt64(); err != nil {
			return nil, unavailable(fmt.Errorf("unexpected script reply: %w", err))
		}
	}
	return out, nil
}

// batchReply decides the steps of c, all of one limit and cost, from the reply of a batch script
// (lua/batch.lua): the instant, each step's state before it (GCRA: the TAT; token bucket: the
// tokens; fixed window: what the window had spent) and whether the script admitted it. Package
// algo does what the script's step does, operation for operation, so the two agree; a step where
// they do not is an error rather than a decision the script did not make.
func batchReply(c call, b string) ([]int64, error) {
	n := len(c.keys)
	if len(c.limits) != 1 || len(b) != 8+9*n {
		return nil, unavailable(fmt.Errorf("script replied %d bytes for %d steps", len(b), n))
	}
	cost, err := strconv.ParseInt(c.steps[1], 10, 64)
	if err != nil {
		return nil, unavailable(err)
	}
	now := int64(float64At(b, 0))
	var decide func(before float64) sluice.Decision
	switch st := c.limits[0].p.Limits()[c.limits[0].i].Strategy.(type) {
	case sluice.GCRA:
		g := algo.NewGCRA(st)
		decide = func(tat float64) sluice.Decision {
			_, d := g.Check(algo.GCRAState{TAT: tat}, now, cost)
			return d
		}
	case sluice.TokenBucket:
		tb, limit := algo.NewTokenBucket(st), int64(st.Capacity)
		decide = func(tokens float64) sluice.Decision { return tb.Verdict(tokens, now, cost).Decision(limit) }
	case sluice.FixedWindow:
		f, start := algo.NewFixedWindow(st), math.Floor(float64(now)/st.WindowMs)*st.WindowMs
		decide = func(spent float64) sluice.Decision {
			_, d := f.Check(algo.FixedWindowState{Start: start, Count: spent}, now, cost)
			return d
		}
	default:
		return nil, unavailable(fmt.Errorf("script replied a batch for %T", st))
	}
	admitted := b[8+8*n:]
	out := make([]int64, 0, 5*n)
	for i := range n {
		d := decide(float64At(b, 8+8*i))
		if d.Allowed != (admitted[i] == '1') {
			return nil, unavailable(fmt.Errorf("step %d: the script admitted %c, package algo %v", i, admitted[i], d.Allowed))
		}
		allowed := int64(0)
		if d.Allowed {
			allowed = 1
		}
		out = append(out, allowed, d.Limit, d.Remaining, d.ResetAt, d.RetryAfterMs)
	}
	return out, nil
}

// float64At reads the little-endian double at b[i:].
func float64At(b string, i int) float64 {
	return math.Float64frombits(binary.LittleEndian.Uint64([]byte(b[i : i+8])))
}

// decision is the decision of one step, from its five numbers.
func decision(n []int64) sluice.Decision {
	d := sluice.Decision{Allowed: n[0] == 1, Limit: n[1], Remaining: n[2], ResetAt: n[3], RetryAfterMs: n[4]}
	if d.Allowed {
		d.DeniedBy = -1
	}
	return d
}

// decide is the decision of one policy from the five numbers of each of its limits' steps.
func decide(v []int64) sluice.Decision {
	if len(v) == 5 {
		return decision(v)
	}
	return sluice.Combine(decisions(v))
}

// decisions is one decision per step, from five numbers each.
func decisions(v []int64) []sluice.Decision {
	ds := make([]sluice.Decision, len(v)/5)
	for i := range ds {
		ds[i] = decision(v[5*i:])
	}
	return ds
}

// checked is decide for a check of cost under p: a denied check spent nothing of the limits that
// allowed, and their parts say so (package unspent).
func checked(v []int64, p *sluice.Policy, cost int64) sluice.Decision {
	if len(v) == 5 {
		return decision(v)
	}
	ds := decisions(v)
	unspent.Check(p, cost, ds)
	return sluice.Combine(ds)
}

// combine folds ds, one decision per limit of each op in turn, into one decision per op in out:
// a denied CheckAll spent nothing of the parts that allowed (package unspent).
func combine(ps []*sluice.Policy, items []sluice.Item, ds []sluice.Decision, out []sluice.Decision) {
	unspent.CheckAll(ps, items, ds)
	for i := range items {
		n := len(ps[i].Limits())
		if n == 1 {
			out[i] = ds[0]
		} else {
			out[i] = sluice.Combine(ds[:n:n])
		}
		ds = ds[n:]
	}
}

func (s *Store) open() error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	return nil
}

func replyLen(v []int64, want int) error {
	if len(v) != want {
		return unavailable(fmt.Errorf("script replied %d numbers, want %d", len(v), want))
	}
	return nil
}

// Check implements sluice.Store: one script, one round trip, for every limit of p. Concurrent
// Checks, CheckManys and one-slot CheckAlls of as many limits share script runs
// (Config.BatchSize): each is still decided on its own, atomically.
func (s *Store) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	if err := s.open(); err != nil {
		return sluice.Decision{}, err
	}
	v, err := s.runGroups(ctx, opCheck, now, len(p.Limits()), 1, p, key, func(c call) call { c.addPolicy(s, p, key, cost); return c })
	if err != nil {
		return sluice.Decision{}, err
	}
	return checked(v, p, cost), nil
}

// CheckMany implements sluice.Store: one script decides every key, each on its own, in order, at
// one instant. Its keys join one run together, which concurrent Checks and CheckManys of policies
// of as many limits share (Config.BatchSize), each key a check of its own. On a Cluster, keys in
// several slots are one script per slot, all sent at once, at one instant, on their own.
func (s *Store) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	if err := s.open(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	n := len(p.Limits())
	var groups [][]int
	if s.cluster {
		groups = groupBySlot(len(keys), func(i int) string { return s.key(p, keys[i], 0) })
	}
	if len(groups) <= 1 {
		v, err := s.runGroups(ctx, opCheck, now, n, len(keys), p, keys[0], func(c call) call {
			for _, k := range keys {
				c.addPolicy(s, p, k, cost)
			}
			return c
		})
		if err != nil {
			return err
		}
		for i := range keys {
			out[i] = checked(v[5*n*i:5*n*(i+1)], p, cost)
		}
		return nil
	}
	now, err := s.instant(ctx, now)
	if err != nil {
		return err
	}
	calls := make([]call, len(groups))
	for g, members := range groups {
		calls[g] = newCall(opCheck, now, s.slack, n)
		for _, i := range members {
			calls[g].addPolicy(s, p, keys[i], cost)
		}
	}
	replies, err := s.runAll(ctx, calls)
	if err != nil {
		return err
	}
	for g, members := range groups {
		if err := replyLen(replies[g], 5*n*len(members)); err != nil {
			return err
		}
		for j, i := range members {
			out[i] = checked(replies[g][5*n*j:5*n*(j+1)], p, cost)
		}
	}
	return nil
}

// instant resolves now = 0 to the Redis clock, for calls that span several scripts.
func (s *Store) instant(ctx context.Context, now int64) (int64, error) {
	if now != 0 {
		return now, nil
	}
	v, err := s.do(ctx, s.client.B().Time().Build()).AsIntSlice()
	if err != nil || len(v) != 2 {
		return 0, unavailable(fmt.Errorf("TIME: %v %v", v, err))
	}
	return v[0]*1000 + v[1]/1000, nil // as the script reads TIME
}

// CheckAll implements sluice.Store. On a standalone or Sentinel-watched Redis, and on a Cluster
// when every key falls in one slot, it is one script, all or nothing, whose run concurrent
// callers' checks and CheckAlls of as many steps share (Config.BatchSize): it is one group of the
// run, decided all or nothing as a run of its own would. Across Cluster slots it reserves in each
// slot and refunds if any denies (see the package documentation).
func (s *Store) CheckAll(ctx context.Context, now int64, ps []*sluice.Policy, items []sluice.Item, out []sluice.Decision) error {
	if err := s.open(); err != nil {
		return err
	}
	if len(items) == 0 {
		return nil
	}
	var groups [][]int
	if s.cluster {
		groups = groupBySlot(len(items), func(i int) string { return s.key(ps[i], items[i].Key, 0) })
	}
	if len(groups) <= 1 {
		steps := 0
		for _, p := range ps {
			steps += len(p.Limits())
		}
		v, err := s.runGroups(ctx, opCheck, now, steps, 1, ps[0], items[0].Key, func(c call) call {
			for j, it := range items {
				c.addPolicy(s, ps[j], it.Key, it.Cost)
			}
			return c
		})
		if err != nil {
			return err
		}
		combine(ps, items, decisions(v), out)
		return nil
	}
	now, err := s.instant(ctx, now)
	if err != nil {
		return err
	}
	calls := make([]call, len(groups))
	for g, members := range groups {
		steps := 0
		for _, i := range members {
			steps += len(ps[i].Limits())
		}
		calls[g] = newCall(opCheck, now, s.slack, steps)
		for _, i := range members {
			calls[g].addPolicy(s, ps[i], items[i].Key, items[i].Cost)
		}
	}
	replies, err := s.runAll(ctx, calls)
	if err != nil {
		// A slot that consumed and cannot be told apart from one that failed: give back what the
		// answered slots admitted, then report the failure.
		s.refundAllowed(ctx, now, ps, items, groups, replies)
		return err
	}
	first := make([]int, len(items)+1) // the parts of op i are ds[first[i]:first[i+1]]
	for i := range items {
		first[i+1] = first[i] + len(ps[i].Limits())
	}
	ds := make([]sluice.Decision, first[len(items)])
	allowed := true
	for g, members := range groups {
		steps := len(calls[g].keys)
		if err := replyLen(replies[g], 5*steps); err != nil {
			return err
		}
		v := replies[g]
		for _, i := range members {
			for k := first[i]; k < first[i+1]; k, v = k+1, v[5:] {
				ds[k] = decision(v)
				allowed = allowed && ds[k].Allowed
			}
		}
	}
	combine(ps, items, ds, out)
	if !allowed {
		return s.refundAllowed(ctx, now, ps, items, groups, replies)
	}
	return nil
}

// refundAllowed gives back, in every slot whose script admitted its part of a CheckAll, all that
// part consumed (every limit, whatever its unit): the second half of a cross-slot CheckAll that was
// denied.
func (s *Store) refundAllowed(ctx context.Context, now int64, ps []*sluice.Policy, items []sluice.Item, groups [][]int, replies [][]int64) error {
	var calls []call
	for g, members := range groups {
		if g >= len(replies) || replies[g] == nil || !allAllowed(replies[g]) {
			continue
		}
		c := newCall(opRefund, now, s.slack, 0)
		for _, i := range members {
			for j := range ps[i].Limits() {
				c.add(s, ps[i], items[i].Key, j, ps[i].Cost(j, items[i].Cost))
			}
		}
		calls = append(calls, c)
	}
	if len(calls) == 0 {
		return nil
	}
	_, err := s.runAll(ctx, calls)
	return err
}

func allAllowed(v []int64) bool {
	for i := 0; i < len(v); i += 5 {
		if v[i] != 1 {
			return false
		}
	}
	return len(v) > 0
}

// Peek implements sluice.Store: one script reads every limit of p without writing. Concurrent
// Peeks of policies of as many limits at the same now share script runs (Config.BatchSize); the
// script writes nothing, so each reads what a run of its own would.
func (s *Store) Peek(ctx context.Context, now int64, p *sluice.Policy, key string) (sluice.Decision, error) {
	if err := s.open(); err != nil {
		return sluice.Decision{}, err
	}
	v, err := s.runGroups(ctx, opPeek, now, len(p.Limits()), 1, p, key, func(c call) call { c.addPolicy(s, p, key, 1); return c })
	if err != nil {
		return sluice.Decision{}, err
	}
	return decide(v), nil
}

// Forecast implements sluice.Store. For a composite policy it reports the limit that can spend the
// least: the smallest SpendableNow with its NextReplenishAt, and the latest FullAt. Concurrent
// Forecasts share script runs as Peeks do.
func (s *Store) Forecast(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Forecast, error) {
	if err := s.open(); err != nil {
		return sluice.Forecast{}, err
	}
	n := len(p.Limits())
	v, err := s.runGroups(ctx, opForecast, now, n, 1, p, key, func(c call) call { c.addPolicy(s, p, key, cost); return c })
	if err != nil {
		return sluice.Forecast{}, err
	}
	var out sluice.Forecast
	for i := range n {
		f := sluice.Forecast{SpendableNow: v[3*i], NextReplenishAt: v[3*i+1], FullAt: v[3*i+2]}
		if i == 0 || f.SpendableNow < out.SpendableNow {
			out.SpendableNow, out.NextReplenishAt = f.SpendableNow, f.NextReplenishAt
		}
		out.FullAt = max(out.FullAt, f.FullAt)
	}
	return out, nil
}

// Refund implements sluice.Store: one script gives cost back to every limit of p that counts cost;
// limits that count requests are left alone. Concurrent Refunds touching as many limits at the
// same now share script runs (Config.BatchSize), applied one after another in arrival order.
func (s *Store) Refund(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	return s.onCostLimits(ctx, opRefund, now, p, key, cost)
}

// Debit implements sluice.Store: one script charges cost to every limit of p that counts cost,
// past the limit if need be; limits that count requests are left alone. Concurrent Debits share
// script runs as Refunds do.
func (s *Store) Debit(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	return s.onCostLimits(ctx, opDebit, now, p, key, cost)
}

// onCostLimits runs operation o with cost on key under every limit of p that counts cost, in one
// script run (shared with concurrent calls of o, see runGroups).
func (s *Store) onCostLimits(ctx context.Context, o op, now int64, p *sluice.Policy, key string, cost int64) error {
	if err := s.open(); err != nil {
		return err
	}
	n := 0
	for _, l := range p.Limits() {
		if l.Unit == sluice.UnitCost {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	_, err := s.runGroups(ctx, o, now, n, 1, p, key, func(c call) call {
		for i, l := range p.Limits() {
			if l.Unit == sluice.UnitCost {
				c.add(s, p, key, i, cost)
			}
		}
		return c
	})
	return err
}

// Reset implements sluice.Store: it deletes the key's state for every limit of p.
func (s *Store) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	if err := s.open(); err != nil {
		return err
	}
	keys := make([]string, len(p.Limits()))
	for i := range keys {
		keys[i] = s.key(p, key, i)
	}
	return unavailable(s.do(ctx, s.client.B().Del().Key(keys...).Build()).Error())
}
