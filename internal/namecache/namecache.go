// Package namecache finds a value by name without hashing the name, when the caller passes the
// very string the value was stored under: a constant is one string however often it is written,
// so a policy named by a constant at every call site always hits. Slots are indexed by the address
// of the name's bytes, and a hit is two compares; a name built at run time misses, and the caller
// looks in its map instead.
package namecache

import (
	"sync/atomic"
	"unsafe"
)

// Cache holds up to 64 names. The zero value is empty and ready; it is safe for concurrent use.
type Cache[T any] struct {
	slots [64]atomic.Pointer[entry[T]]
}

type entry[T any] struct {
	name string // the string stored under: its bytes must stay put and unchanged
	v    T
}

// Get returns the value stored under name's very bytes.
func (c *Cache[T]) Get(name string) (T, bool) {
	if e := c.slot(name).Load(); e != nil && unsafe.StringData(e.name) == unsafe.StringData(name) && len(e.name) == len(name) {
		return e.v, true
	}
	var zero T
	return zero, false
}

// Put stores v under name, whose bytes must not change while it is stored (a string's never do),
// replacing what shared its slot.
func (c *Cache[T]) Put(name string, v T) {
	c.slot(name).Store(&entry[T]{name: name, v: v})
}

func (c *Cache[T]) slot(name string) *atomic.Pointer[entry[T]] {
	return &c.slots[uintptr(unsafe.Pointer(unsafe.StringData(name)))>>3%uintptr(len(c.slots))]
}
