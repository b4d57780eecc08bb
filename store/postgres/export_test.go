package pgstore

// Statements reports how many statements of decide (or debit) s has sent, retries included: the
// tests count them to see concurrent calls share statements.
func (s *Store) Statements() uint64 { return s.statements.Load() }
