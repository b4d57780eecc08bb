package redisstore

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluicehq/sluice"
)

// TestPlansAreSendable builds calls as the store's operations do, from random policies, and checks
// that each plans to a script that sendable reports, so that TestEveryScript, which runs every
// sendable script, runs every script the store can send.
func TestPlansAreSendable(t *testing.T) {
	s := &Store{prefix: "p", slack: "1000"}
	rng := rand.New(rand.NewPCG(1, 2))
	policy := func() *sluice.Policy {
		limits := make([]sluice.Limit, 1+rng.IntN(5))
		for i := range limits {
			limits[i].Strategy = testLimits[rng.IntN(2)][rng.IntN(len(kinds))]
			limits[i].Unit = sluice.Unit(rng.IntN(2))
		}
		return sluice.MustPolicy("p"+strings.Repeat("x", rng.IntN(3)), limits...)
	}
	keys := func() []string {
		out := make([]string, 1+rng.IntN(4))
		for i := range out {
			out[i] = string(rune('a' + rng.IntN(3)))
		}
		return out
	}
	seen := make(map[scriptKey]bool)
	for range 20_000 {
		p := policy()
		n := len(p.Limits())
		var c call
		switch rng.IntN(6) {
		case 0: // Check, CheckMany (also a lane of the batcher)
			c = newCall(opCheck, 0, s.slack, n)
			for _, k := range keys() {
				c.addPolicy(s, p, k, 1)
			}
		case 1: // CheckAll
			ops := []*sluice.Policy{p, policy(), policy()}[:1+rng.IntN(3)]
			steps := 0
			for _, q := range ops {
				steps += len(q.Limits())
			}
			c = newCall(opCheck, 0, s.slack, steps)
			for _, q := range ops {
				c.addPolicy(s, q, keys()[0], 2)
			}
		case 2:
			c = newCall(opPeek, 0, s.slack, n)
			c.addPolicy(s, p, "a", 1)
		case 3:
			c = newCall(opForecast, 0, s.slack, n)
			c.addPolicy(s, p, "a", 3)
		default: // Refund, Debit: the limits that count cost; refundAllowed: all of them
			c = newCall([]op{opRefund, opDebit}[rng.IntN(2)], 0, s.slack, 0)
			for i, l := range p.Limits() {
				if l.Unit == sluice.UnitCost || rng.IntN(2) == 0 {
					c.add(s, p, "a", i, 1)
				}
			}
			if len(c.keys) == 0 {
				continue
			}
		}
		k, _ := c.scriptKey()
		if !k.sendable() {
			t.Fatalf("a call plans to %v, which sendable does not report (keys %v)", k, c.keys)
		}
		seen[k] = true
	}
	t.Logf("%d scripts planned", len(seen))
}
