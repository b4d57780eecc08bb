package memory

import (
	"context"

	"github.com/sluicehq/sluice"
)

var _ sluice.Debiter = (*Store)(nil)

// Debit implements sluice.Debiter. Limits that count requests are left alone.
func (s *Store) Debit(_ context.Context, now int64, p *sluice.Policy, key string, cost int64) error {
	now, err := s.begin(now)
	if err != nil {
		return err
	}
	h := hash(s.seed, key)
	for i, part := range s.partsOf(p) {
		if p.Limits()[i].Unit == sluice.UnitCost {
			part.debit(h, key, now, cost)
		}
	}
	return nil
}
