package memory

import (
	"context"

	"github.com/sluicehq/sluice"
)

var _ sluice.Debiter = (*Store)(nil)

// Debit implements sluice.Debiter. Limits that count requests are left alone.
func (s *Store) Debit(_ context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	return s.onCostLimits(now, p, key, cost, part.debit)
}
