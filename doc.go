// Package sluice decides whether a request may go ahead under a rate limit, exactly, whether the
// limit is kept in this process or shared by a fleet.
//
// A [Policy] names one or more [Limit]s, each a strategy ([GCRA], [TokenBucket], [FixedWindow],
// [SlidingWindow], [SlidingWindowLog]) checked together, all or nothing. A [Limiter] holds the
// policies, validates every call and asks a [Store] to decide: the memory store
// (store/memory) keeps the state in this process; the Redis and PostgreSQL stores (store/redis,
// store/postgres) share it across processes, each deciding a key in one atomic step. Every store
// gives the same [Decision] for the same calls at the same instants.
//
//	store := memory.New(memory.Config{})
//	lim, err := sluice.New(store, sluice.MustPolicy("api", sluice.Limit{
//		Strategy: sluice.GCRA{Limit: 100, PeriodMs: 60_000, Burst: 20},
//	}))
//	d, err := lim.Check(ctx, "api", userID, 1)
//	if !d.Allowed {
//		// come back after d.RetryAfter()
//	}
//
// Instants are epoch milliseconds. A store reads its own clock unless the context carries an
// instant ([WithNow]), which is how tests and replays decide at fixed instants.
//
// Errors: bad input is an [*InvalidError] naming the field (and matches [ErrInvalid]); it never
// reaches the store and changes no state. An unknown policy is [ErrUnknownPolicy]; a store that
// cannot answer, [ErrUnavailable]. docs/semantics.md defines every strategy and field.
package sluice
