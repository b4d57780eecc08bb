package sluice

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalid is what every *InvalidError matches with errors.Is: bad input that changed no state.
	ErrInvalid = errors.New("sluice: invalid argument")
	// ErrUnknownPolicy means a check named a policy the limiter does not hold.
	ErrUnknownPolicy = errors.New("sluice: unknown policy")
	// ErrClosed means the store was closed.
	ErrClosed = errors.New("sluice: store closed")
	// ErrUnsupported means the store does not implement an operation for a strategy (every
	// operation of every strategy is implemented by the memory store).
	ErrUnsupported = errors.New("sluice: operation not supported")
	// ErrUnavailable means the store could not decide in time: unreachable, failing or too slow.
	// A service answers it according to the policy's fail mode.
	ErrUnavailable = errors.New("sluice: store unavailable")
	// ErrSchemaNewer means a PostgreSQL schema sluice keeps its tables in (the PostgreSQL store's,
	// stream mode's, the region coordinator's) holds migrations this build does not know: a newer
	// sluice migrated it. The build refuses to run on it rather than guess at its tables.
	ErrSchemaNewer = errors.New("sluice: database schema is newer than this build")
)

// InvalidError is bad input: a cost, key, parameter or name out of range. Field names the offending
// input with the wire names ("cost", "key", "limits[1].refillPerSec").
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return "sluice: invalid " + e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) *InvalidError {
	return &InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
