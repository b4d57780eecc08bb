// Package storeerr marks the failures of a store's backend (Redis, PostgreSQL) as
// sluice.ErrUnavailable, keeping the cause for errors.Is and the log, so that every store and
// engine words them alike.
package storeerr

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice"
)

// Unavailable is err as a sluice.ErrUnavailable, prefixed with who failed ("redis store"): nil stays
// nil, and bad input (sluice.ErrInvalid) or an error already marked stays as it is.
func Unavailable(who string, err error) error {
	if err == nil || errors.Is(err, sluice.ErrInvalid) || errors.Is(err, sluice.ErrUnavailable) {
		return err
	}
	if who == "" {
		return fmt.Errorf("%w: %w", sluice.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %s: %w", sluice.ErrUnavailable, who, err)
}
