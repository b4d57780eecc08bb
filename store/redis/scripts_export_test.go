package redisstore

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice"
)

// ScriptRun is a run of one of the store's scripts, for TestEveryScript: the script, the keys and
// arguments of a valid run, and a check of its reply.
type ScriptRun struct {
	Name        string
	Source, SHA string
	Keys, Args  []string
	Check       func(rueidis.RedisResult) error
}

// testLimits are a limit of each strategy, in the order of kinds, and a second one of each for a
// composite policy of one strategy.
var testLimits = [2][len(kinds)]sluice.Strategy{
	{
		sluice.GCRA{Limit: 10, PeriodMs: 1000, Burst: 5},
		sluice.TokenBucket{Capacity: 5, RefillPerSec: 2},
		sluice.FixedWindow{Limit: 5, WindowMs: 1000},
		sluice.SlidingWindow{Limit: 5, WindowMs: 1000, Buckets: 4},
		sluice.SlidingWindowLog{Limit: 5, WindowMs: 1000},
	},
	{
		sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 20},
		sluice.TokenBucket{Capacity: 50, RefillPerSec: 0.5},
		sluice.FixedWindow{Limit: 1000, Calendar: sluice.Day},
		sluice.SlidingWindow{Limit: 50, WindowMs: 60_000, Buckets: 6},
		sluice.SlidingWindowLog{Limit: 50, WindowMs: 60_000},
	},
}

// ScriptRuns returns a run of every script s can send: every sendable scriptKey (each with a call
// that plans to it) and the leases', at now (0: the server's clock), giving up at giveUp. Runs of
// one strategy set use the same keys, checks first, so that the later ones read states.
func (s *Store) ScriptRuns(now, giveUp int64) ([]ScriptRun, error) {
	var runs []ScriptRun
	for set := uint8(1); int(set) < 1<<len(kinds); set++ {
		for shape := range numShapes {
			for o := range numOps {
				k := scriptKey{op: o, set: set, shape: shape}
				if !k.sendable() {
					continue
				}
				c := s.testCall(k, now)
				if got, _ := c.scriptKey(); got != k {
					return nil, fmt.Errorf("the call made for %v plans %v", k, got)
				}
				if consumes(o) {
					c.setGiveUp(giveUp)
				}
				sc, argv := c.plan()
				want := map[op]int{opCheck: 5, opPeek: 5, opForecast: 3}[o] * len(c.keys)
				runs = append(runs, ScriptRun{
					Name: k.String(), Source: sc.source, SHA: sc.sha, Keys: c.keys, Args: argv,
					Check: func(r rueidis.RedisResult) error {
						v, err := numbers(c, r)
						if err == nil {
							err = replyLen(v, want)
						}
						return err
					},
				})
			}
		}
	}
	key := s.leaseKey("every", "k")
	t := strconv.FormatInt(now, 10)
	leases := map[string]struct {
		args []string
		want int
	}{
		"admit":     {[]string{t, "h", "2", "1000", s.slack, strconv.FormatInt(giveUp, 10)}, 3},
		"heartbeat": {[]string{t, "h", "0", "1000", s.slack, "0"}, 1},
	}
	names := make([]string, 0, len(fixedScripts))
	for name := range fixedScripts {
		names = append(names, name)
	}
	slices.Sort(names) // admit before heartbeat
	for _, name := range names {
		l, ok := leases[name]
		if !ok {
			return nil, fmt.Errorf("no arguments for script %s", name)
		}
		sc := fixedScripts[name]
		runs = append(runs, ScriptRun{
			Name: name, Source: sc.source, SHA: sc.sha, Keys: []string{key}, Args: l.args,
			Check: func(r rueidis.RedisResult) error {
				v, err := ints(r)
				if err == nil {
					err = replyLen(v, l.want)
				}
				return err
			},
		})
	}
	return runs, nil
}

// testCall returns a call that plans to k, as the store's operations build them.
func (s *Store) testCall(k scriptKey, now int64) call {
	var limits []sluice.Limit
	for i := range len(kinds) {
		if k.set&(1<<i) != 0 {
			limits = append(limits, sluice.Limit{Strategy: testLimits[0][i]})
		}
	}
	switch {
	case k.shape == shapeOne && k.set&calendarKinds != 0: // a fixed window's one-step script is a calendar window's
		limits[0].Strategy = testLimits[1][2]
	case k.shape == shapeGeneral && len(limits) == 1: // a composite policy: not a batch nor one step
		for i := range len(kinds) {
			if k.set == 1<<i {
				limits = append(limits, sluice.Limit{Strategy: testLimits[1][i]})
			}
		}
	}
	p := sluice.MustPolicy(fmt.Sprintf("every-%d-%d", k.set, k.shape), limits...)
	n := len(limits)
	var c call
	switch {
	case k.shape == shapeBatch || k.shape == shapeBatchDistinct:
		c = newCall(opCheck, now, s.slack, n)
		keys := []string{"a", "b", "a"}
		if k.shape == shapeBatchDistinct {
			keys = []string{"a", "b", "c"}
		}
		for _, key := range keys {
			c.addPolicy(s, p, key, 1)
		}
		return c
	case k.op == opRefund || k.op == opDebit:
		c = newCall(k.op, now, s.slack, 0)
	default:
		c = newCall(k.op, now, s.slack, n)
	}
	c.addPolicy(s, p, "a", 1)
	return c
}

// String names k in tests' messages: operation/strategies/shape.
func (k scriptKey) String() string {
	var set []byte
	for i := range len(kinds) {
		if k.set&(1<<i) != 0 {
			set = append(set, kinds[i])
		}
	}
	return fmt.Sprintf("%s/%s/%s", opFiles[k.op], set, [...]string{"general", "one", "batch", "batch-distinct"}[k.shape])
}
