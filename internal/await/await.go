// Package await answers a store call by its caller's deadline while the call itself runs on: the
// shared stores' clients drop a connection when a call's context ends mid-flight, and a new one
// costs the next calls more than the wait saved (docs/operations.md).
package await

import (
	"context"
	"sync/atomic"
)

// Call returns f's result, or ctx's error as soon as ctx is done; f then finishes on a goroutine of
// its own, and late (if not nil) is called if it succeeds after the caller was answered with ctx's
// error. An answer that comes with the deadline is still the answer. Without a deadline or a
// cancel, f runs on the caller's goroutine.
func Call[T any](ctx context.Context, late func(), f func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	const pending, answered, gaveUp = 0, 1, 2
	var state atomic.Int32
	done := make(chan result, 1)
	go func() {
		v, err := f()
		if !state.CompareAndSwap(pending, answered) && err == nil && late != nil {
			late()
		}
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		if !state.CompareAndSwap(pending, gaveUp) {
			r := <-done
			return r.v, r.err
		}
		var zero T
		return zero, ctx.Err()
	}
}
