// Package redisstore is sluice's shared store on Redis: many sluice servers or embedded limiters in
// front of one Redis decide every key exactly, as if they were one process. Its directory is
// store/redis; import it as
//
//	import redisstore "github.com/sluicehq/sluice/store/redis"
//
// so that it does not clash with the client package, github.com/redis/go-redis/v9, which this
// package refers to as goredis.
//
// # Decisions
//
// Each strategy is one Lua script, run with EVALSHA (go-redis reloads it transparently on a NOSCRIPT
// reply, as after a Redis restart or SCRIPT FLUSH), so a check is one atomic step and one round trip.
// The scripts compute package algo's float64 operations in algo's order, so decisions equal the
// memory store's and the conformance vectors field for field. now = 0 decides at the Redis server's
// clock (TIME, read inside the script: one clock for the whole fleet; Redis 7 replicates a script's
// writes, not the script, so replicas see the same state); an explicit now is used as given, for
// replays and tests.
//
// CheckMany sends every key's script in one pipeline, at one instant: with now = 0 it reads TIME
// once first (a second round trip) and passes that instant to every script.
//
// # Keys
//
// A single-limit policy keeps a key's state under
//
//	<prefix>:{<policy>:<key>}
//
// (prefix "sluice" by default). The braces are a Redis Cluster hash tag: all the state of one policy
// and key lives in one slot, and composite policies will keep limit i at <prefix>:{<policy>:<key>}:i
// in that same slot. State by strategy: gcra a string holding the TAT; tokenBucket a string
// "tokens last"; fixedWindow a string "start count"; slidingWindow a hash of buckets+1 fields; and
// slidingWindowLog a sorted set with one member per instant that admitted units. Numbers are written
// with %.17g, which reads back as the same double.
//
// Every write sets a TTL: the time until the key decides exactly like a fresh key (gcra: its TAT;
// tokenBucket: full again; fixedWindow: the window's end; slidingWindow: its newest bucket leaves
// the window; slidingWindowLog: its newest unit leaves the window), plus Config.TTLSlack. The slack
// keeps a key a little past that instant, so that rounding at the boundary or a replay whose
// explicit instants run slower than the wall clock never sees a key vanish while it still counts.
// Idle keys therefore vanish by themselves; a key whose policy changed under the same name keeps
// its state until then.
//
// # Not yet implemented
//
// This is the first step of the Redis store. Policies with more than one limit, CheckAll, Peek,
// Forecast and Refund return an error matching sluice.ErrUnsupported. Check, CheckMany (single-limit
// policies) and Reset work.
//
// # Errors
//
// A Redis failure, a timeout or a context deadline is an error matching sluice.ErrUnavailable; a
// call after Close is sluice.ErrClosed. Calls honour the context's deadline.
package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Prefix starts every key. Empty means "sluice".
	Prefix string
	// TTLSlack is added to every key's TTL past the instant the key becomes idle. 0 means one second;
	// a negative value adds nothing.
	TTLSlack time.Duration
}

// Store is the Redis sluice.Store. It is safe for concurrent use.
type Store struct {
	client goredis.UniversalClient
	prefix string
	slack  string // TTL slack in ms, as a script argument
	owns   bool   // Close closes the client: it came from Open
	closed atomic.Bool
}

var _ sluice.Store = (*Store)(nil)

// New returns a Store on client. The caller keeps ownership of client: Close does not close it.
func New(client goredis.UniversalClient, cfg Config) *Store {
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
	return &Store{client: client, prefix: prefix, slack: strconv.FormatInt(slack.Milliseconds(), 10)}
}

// Open connects to the Redis that url names: redis://[user:password@]host:port[/db] or, over TLS,
// rediss://…, with the query options goredis.ParseURL accepts (dial_timeout, pool_size, …). It does
// not dial: a Redis that is down shows on the first call (or Ping) as sluice.ErrUnavailable. Close
// closes the connection pool.
func Open(url string) (*Store, error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis store: %w", err)
	}
	s := New(goredis.NewClient(opts), Config{})
	s.owns = true
	return s, nil
}

// Close makes every later call return sluice.ErrClosed and, for a Store from Open, closes the
// client. It is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) || !s.owns {
		return nil
	}
	return s.client.Close()
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	return unavailable(s.client.Ping(ctx).Err())
}

func unavailable(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %v", sluice.ErrUnavailable, err)
}

// key is where limit i of p keeps key's state; all limits of one policy and key share a hash tag.
func (s *Store) key(p *sluice.Policy, key string, i int) string {
	var b strings.Builder
	b.Grow(len(s.prefix) + len(p.Name()) + len(key) + 8)
	b.WriteString(s.prefix)
	b.WriteString(":{")
	b.WriteString(p.Name())
	b.WriteByte(':')
	b.WriteString(key)
	b.WriteByte('}')
	if len(p.Limits()) > 1 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(i))
	}
	return b.String()
}

func ftoa(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// call is one script run: the script and its arguments.
type call struct {
	script *goredis.Script
	args   []any
}

// prepare picks the script of strategy st and lays out its arguments.
func (s *Store) prepare(st sluice.Strategy, now, cost int64) call {
	args := make([]any, 3, 6)
	args[0], args[1], args[2] = strconv.FormatInt(now, 10), strconv.FormatInt(cost, 10), s.slack
	switch st := st.(type) {
	case sluice.GCRA:
		return call{gcraScript, append(args, ftoa(st.Limit), ftoa(st.PeriodMs), ftoa(st.Burst))}
	case sluice.TokenBucket:
		return call{tokenBucketScript, append(args, ftoa(st.Capacity), ftoa(st.RefillPerSec))}
	case sluice.FixedWindow:
		return call{fixedWindowScript, append(args, ftoa(st.Limit), ftoa(st.WindowMs))}
	case sluice.SlidingWindow:
		return call{slidingWindowScript, append(args, ftoa(st.Limit), ftoa(st.WindowMs), strconv.Itoa(st.Buckets))}
	case sluice.SlidingWindowLog:
		return call{slidingWindowLogScript, append(args, ftoa(st.Limit), ftoa(st.WindowMs))}
	}
	panic(fmt.Sprintf("redisstore: unknown strategy %T", st)) // NewPolicy admits only the five
}

// single returns the one limit's strategy of p, or ErrUnsupported for a composite policy.
func single(p *sluice.Policy) (sluice.Strategy, error) {
	if len(p.Limits()) != 1 {
		return nil, fmt.Errorf("%w: redis store: policies with more than one limit are not yet implemented", sluice.ErrUnsupported)
	}
	return p.Limits()[0].Strategy, nil
}

// decision reads a script's reply {allowed, limit, remaining, resetAt, retryAfterMs}.
func decision(v any, err error) (sluice.Decision, error) {
	if err != nil {
		return sluice.Decision{}, unavailable(err)
	}
	r, ok := v.([]any)
	if !ok || len(r) != 5 {
		return sluice.Decision{}, unavailable(fmt.Errorf("unexpected script reply %v", v))
	}
	var n [5]int64
	for i, x := range r {
		if n[i], ok = x.(int64); !ok {
			return sluice.Decision{}, unavailable(fmt.Errorf("unexpected script reply %v", v))
		}
	}
	d := sluice.Decision{Allowed: n[0] == 1, Limit: n[1], Remaining: n[2], ResetAt: n[3], RetryAfterMs: n[4]}
	if d.Allowed {
		d.DeniedBy = -1
	}
	return d, nil
}

// Check implements sluice.Store: one EVALSHA, one round trip.
func (s *Store) Check(ctx context.Context, now int64, p *sluice.Policy, key string, cost int64) (sluice.Decision, error) {
	if s.closed.Load() {
		return sluice.Decision{}, sluice.ErrClosed
	}
	st, err := single(p)
	if err != nil {
		return sluice.Decision{}, err
	}
	c := s.prepare(st, now, cost)
	return decision(c.script.Run(ctx, s.client, []string{s.key(p, key, 0)}, c.args...).Result())
}

// CheckMany implements sluice.Store: every key's script in one pipeline, at one instant.
func (s *Store) CheckMany(ctx context.Context, now int64, p *sluice.Policy, keys []string, cost int64, out []sluice.Decision) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	st, err := single(p)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	if now == 0 {
		t, err := s.client.Time(ctx).Result()
		if err != nil {
			return unavailable(err)
		}
		now = t.UnixMilli() // seconds·1000 + ⌊µs/1000⌋, as the scripts read TIME
	}
	c := s.prepare(st, now, cost)
	cmds := make([]*goredis.Cmd, len(keys))
	todo := make([]int, len(keys))
	for i := range todo {
		todo[i] = i
	}
	// A NOSCRIPT reply means that script did not run, so those keys are sent again once the script
	// is loaded; a second NOSCRIPT (a flush racing the reload) is a failure.
	for attempt := 0; ; attempt++ {
		pipe := s.client.Pipeline()
		for _, i := range todo {
			cmds[i] = c.script.EvalSha(ctx, pipe, []string{s.key(p, keys[i], 0)}, c.args...)
		}
		_, _ = pipe.Exec(ctx) // errors are read per command below
		var again []int
		for _, i := range todo {
			if err := cmds[i].Err(); err != nil && goredis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			break
		}
		if err := c.script.Load(ctx, s.client).Err(); err != nil {
			return unavailable(err)
		}
		todo = again
	}
	for i, cmd := range cmds {
		d, err := decision(cmd.Result())
		if err != nil {
			return err
		}
		out[i] = d
	}
	return nil
}

var errNotYet = errors.New("redis store: not yet implemented")

func unsupported(op string) error {
	return fmt.Errorf("%w: %s: %w", sluice.ErrUnsupported, op, errNotYet)
}

// CheckAll implements sluice.Store. Not yet implemented: it returns sluice.ErrUnsupported.
func (s *Store) CheckAll(context.Context, int64, []sluice.Op, []sluice.Decision) error {
	return unsupported("CheckAll")
}

// Peek implements sluice.Store. Not yet implemented: it returns sluice.ErrUnsupported.
func (s *Store) Peek(context.Context, int64, *sluice.Policy, string) (sluice.Decision, error) {
	return sluice.Decision{}, unsupported("Peek")
}

// Forecast implements sluice.Store. Not yet implemented: it returns sluice.ErrUnsupported.
func (s *Store) Forecast(context.Context, int64, *sluice.Policy, string, int64) (sluice.Forecast, error) {
	return sluice.Forecast{}, unsupported("Forecast")
}

// Refund implements sluice.Store. Not yet implemented: it returns sluice.ErrUnsupported.
func (s *Store) Refund(context.Context, int64, *sluice.Policy, string, int64) error {
	return unsupported("Refund")
}

// Reset implements sluice.Store: it deletes the key's state for every limit of p.
func (s *Store) Reset(ctx context.Context, p *sluice.Policy, key string) error {
	if s.closed.Load() {
		return sluice.ErrClosed
	}
	keys := make([]string, len(p.Limits()))
	for i := range keys {
		keys[i] = s.key(p, key, i)
	}
	return unavailable(s.client.Del(ctx, keys...).Err())
}
