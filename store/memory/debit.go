package memory

import (
	"context"

	"github.com/sluicehq/sluice"
)

// Debit implements sluice.Store. Limits that count requests are left alone.
func (s *Store) Debit(_ context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	return s.onCostLimits(now, p, key, cost, part.debit)
}
