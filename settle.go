package sluice

import "context"

// Debit charges cost units to key under the named policy as an admitted check of that cost would,
// but without the test, so the key may go into debt past its ceiling: its checks are then denied,
// with a retryAfterMs saying when the limit's own rate will have paid the debt back. Limits that
// count requests are left alone (the request was counted when it was checked). A cost above the
// policy's MaxCost is allowed: debt has no ceiling but 2^53, where float64 stops counting whole
// units.
func (l *Limiter) Debit(ctx context.Context, policy, key string, cost int64) error {
	e, err := l.entry(policy)
	if err != nil {
		return err
	}
	if cost < 1 || cost > maxParam {
		return invalid("cost", "must be from 1 to 2^53, got %d", cost)
	}
	if err := checkKey(key); err != nil {
		return err
	}
	now := NowFrom(ctx)
	p, _ := l.apply(e, key, now)
	return l.store.Debit(ctx, now, p, key, cost)
}

// Settle ends a reservation: a Check of reserved units taken before work whose real cost was
// unknown (an LLM call whose token count is known only from its answer), now that the work cost
// actual. Units not used go back (Refund); units used past the reservation are charged (Debit),
// which may leave the key in debt and delay its next checks. actual may be 0 (the work failed
// before it cost anything).
func (l *Limiter) Settle(ctx context.Context, policy, key string, reserved, actual int64) error {
	switch {
	case reserved < 1 || reserved > maxParam:
		return invalid("reserved", "must be from 1 to 2^53, got %d", reserved)
	case actual < 0 || actual > maxParam:
		return invalid("actual", "must be from 0 to 2^53, got %d", actual)
	case actual < reserved:
		return l.Refund(ctx, policy, key, reserved-actual)
	case actual > reserved:
		return l.Debit(ctx, policy, key, actual-reserved)
	}
	// Nothing to move, but the policy and key must still be valid.
	if _, err := l.entry(policy); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	return nil
}
