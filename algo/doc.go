// Package algo holds the pure decision logic of sluice's five strategies: given a key's state, the
// instant now (epoch ms) and a cost, Check returns the key's next state and the decision. It reads
// no clock, takes no lock and does no I/O, so every store that keeps state in memory decides with
// it, and tests replay it at fixed instants.
//
// The arithmetic follows the reference Redis scripts that produced the conformance vectors
// (conformance/testdata/vectors) operation for operation in float64, so
// that a decision here equals, field for field, the one the Redis scripts return. Products that are
// then added are rounded explicitly (float64(a*b) + c) so that no platform fuses them into one
// multiply-add with a different rounding. Integer results are converted as Redis converts a Lua
// number: by truncation.
//
// Refund gives units back, never past a limit's ceiling. Debit is its opposite: it charges units as
// an admitted check of that cost would, but without the test, so a key may go into debt past its
// limit; its checks are then denied until the limit's own rate has paid the debt back, and
// retryAfterMs says when. It is the settle step of reserve-then-settle when the work cost more than
// was reserved (an LLM answer longer than its estimate).
//
// Every state type's zero value is a fresh key. States are passed by value; those holding a slice
// (the sliding windows) may share it with the state returned, so the caller serializes access to
// each key. Methods on a strategy are safe for concurrent use.
package algo

import (
	"math"

	"github.com/sluicehq/sluice"
)

func allow(remaining, resetAt int64) sluice.Verdict {
	return sluice.Verdict{Allowed: true, Remaining: max(remaining, 0), ResetAt: resetAt}
}

func deny(remaining, resetAt, retryAfter int64) sluice.Verdict {
	return sluice.Verdict{Remaining: max(remaining, 0), ResetAt: resetAt, RetryAfterMs: retryAfter}
}

// peek is the decision a Peek reports: whether a check of cost 1 would pass and what is left now.
func peek(ok bool, limit, remaining, resetAt, retryAfter int64) sluice.Decision {
	if ok {
		return allow(remaining, resetAt).Decision(limit)
	}
	return deny(remaining, resetAt, retryAfter).Decision(limit)
}

func ceil(x float64) int64 { return int64(math.Ceil(x)) }

// atLeast and atMost clamp as the reference scripts do ("if x < lo then x = lo end"): cheaper
// than the built-in max and min, which must order NaNs and signed zeros.
func atLeast(x, lo float64) float64 {
	if x < lo {
		return lo
	}
	return x
}

func atMost(x, hi float64) float64 {
	if x > hi {
		return hi
	}
	return x
}
func floor(x float64) int64 { return int64(math.Floor(x)) }

// whole is max(floor(x), 0), the whole units left of x, without the rounding: truncation differs
// from floor only below zero, where both are clamped to 0. Decisions report their Remaining so.
func whole(x float64) int64 { return max(int64(x), 0) }

// spendable is how many checks of cost fit in avail units.
func spendable(avail float64, cost int64) int64 {
	return max(floor(avail/float64(cost)), 0)
}
