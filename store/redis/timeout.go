package redisstore

import "time"

// DefaultTimeout is the store timeout sluice serve gives the store's calls when its config sets
// none: well past Redis's slowest answer under a hot key and 64 concurrent callers on a busy
// two-core host (docs/operations.md), so that a timeout means Redis is in trouble.
const DefaultTimeout = 250 * time.Millisecond

// DefaultTimeout returns the package's DefaultTimeout, for sluice serve.
func (s *Store) DefaultTimeout() time.Duration { return DefaultTimeout }
