package sluice

import "context"

// Store keeps the state of every key and decides checks atomically: each method is one atomic step
// per key (CheckAll and a composite policy: one step for all their keys), with no read-then-write
// race between concurrent callers, in this process or across a fleet sharing the store.
//
// The Limiter validates input and resolves policy names before it calls a Store, so a Store may
// assume a valid policy, a cost from 1 to the policy's MaxCost and a key of 1 to MaxKeyLen bytes.
//
// now is the instant to decide at, in epoch milliseconds; 0 means the store's own clock (the process
// clock for the memory store, the server clock for a shared store). All keys of one call are decided
// at one instant. A Store is safe for concurrent use.
type Store interface {
	// Check consumes cost for key from every limit of p, all or nothing.
	Check(ctx context.Context, now int64, p *Policy, key string, cost int64) (Decision, error)
	// CheckMany checks each key independently at one instant, writing decision i to out[i].
	CheckMany(ctx context.Context, now int64, p *Policy, keys []string, cost int64, out []Decision) error
	// CheckAll checks every item together, items[i] under ps[i] (its Policy, resolved): if any is
	// denied, nothing is consumed. Decision i of out is what item i decided, as if each earlier item
	// had been consumed.
	CheckAll(ctx context.Context, now int64, ps []*Policy, items []Item, out []Decision) error
	// Peek reports a key's state without consuming: Allowed says whether a check of cost 1 would
	// pass, Remaining is what is left now.
	Peek(ctx context.Context, now int64, p *Policy, key string) (Decision, error)
	// Forecast projects a key's capacity for checks of cost without consuming.
	Forecast(ctx context.Context, now int64, p *Policy, key string, cost int64) (Forecast, error)
	// Refund gives cost units back to key from the limits of p that count cost, never past a
	// limit's ceiling.
	Refund(ctx context.Context, now int64, p *Policy, key string, cost int64) error
	// Debit charges cost to key under every limit of p that counts cost, whatever the limit: the
	// key may go into debt, and its checks are then denied until the limit's rate has paid it back.
	Debit(ctx context.Context, now int64, p *Policy, key string, cost int64) error
	// Reset forgets key under p, as if it had never been seen.
	Reset(ctx context.Context, p *Policy, key string) error
}

// VerdictStore is implemented by a Store that can decide a policy of one limit as a Verdict.
// Limiter.Check uses it for such policies, which spares the copies of a Decision through memory
// that returning one costs (see Verdict); the memory store implements it.
type VerdictStore interface {
	// CheckVerdict is Check for a policy of exactly one limit.
	CheckVerdict(ctx context.Context, now int64, p *Policy, key string, cost int64) (Verdict, error)
}
