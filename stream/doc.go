// Package stream is sluice's stream mode: a rate limiter computed by a streaming query over the
// request log instead of a counter per key.
//
// # Model
//
// Producers Append Events (stream, key, cost, time) to a log. A named Query reads one stream in
// log order and counts each key's events in tumbling windows of Query.WindowMs, aligned to the
// epoch. When a window closes it is emitted as a Window, and, when its count is over
// Query.Quota, as a Decision: throttle that key. Readers (a gateway, a dashboard) follow Windows
// and Decisions by offset, in order.
//
// A window closes when the watermark (the latest event time the query has seen, minus
// Query.GraceMs) reaches its end, or, with Query.IdleFlushMs > 0, when the clock given to Process
// reaches its end plus IdleFlushMs: the last window of a key that went quiet still closes. An
// event arriving for a window already closed is late: it is counted in Stats.Late and
// Stats.LateSum, not in any window. The counting itself is the pure Aggregator, which takes the
// clock as an argument.
//
// # Backends
//
// A Backend stores the log, the queries' state and the outputs. MemoryEngine, here, keeps them
// in one process's memory, with no durability, for development and tests. pgstream.Engine
// (package stream/pgstream, apart so that programs without it do not link a PostgreSQL driver)
// keeps them in PostgreSQL and gives the guarantees below. Both fold events with the Aggregator
// and check input with the same functions, so they accept, refuse and count alike.
//
// # Guarantees
//
// pgstream.Engine keeps everything in PostgreSQL, in its own schema ("sluice_stream" by default,
// created and migrated when it opens, under an advisory lock). Process is one transaction: it
// reads a batch after the query's stored offset, folds it into the window rows, writes the closed
// windows and decisions and advances the offset, and commits all of it or none. So a processor
// killed at any instant neither loses nor double counts an event, no window is emitted twice
// (windows are unique per query run, key and window start, decisions per query, key and window
// start across runs), and a restarted processor
// resumes where the last commit left off. Processors of one query serialize on its row lock;
// different queries run in parallel.
//
// Offsets grow in commit order within a stream (each stream's offsets are assigned under a lock
// held to commit), so a reader that has seen offset n will not later find a smaller one: reading
// "after the last offset seen" misses nothing. Append with Event.ID set is idempotent per stream.
//
// A query's name is its identity. Processing a name stored with a different definition is
// ErrQueryChanged; Reset forgets the name's offset and open windows (not its outputs), and the
// next Process starts it over from the beginning of the log. The new run emits its windows again,
// but no second Decision for a (query, key, window start) already decided: the first stands.
//
// # Consumer groups
//
// Readers that share the work of following a stream's Windows or Decisions form a group (a
// name) and use Pull and Ack instead of keeping an offset each. A stream's outputs are split
// into Partitions by Partition(key), so all items of a key are in one partition; the group keeps
// a committed offset per partition and at most one lease on it. Pull leases a partition with
// items after its committed offset to one consumer and returns a batch of them in offset order;
// Ack commits through an offset of the batch and releases the lease. A lease that expires
// (LeaseMs, by the database clock for pgstream.Engine and MemoryConfig.Now for MemoryEngine)
// hands the batch to the next puller and makes the late Ack ErrLeaseLost, which commits nothing.
// So delivery is at least once, in order per key while consumers finish within their lease: a
// consumer must apply a batch before acking it, and apply idempotently.
//
// # Errors
//
// Invalid input is a *sluice.InvalidError (errors.Is sluice.ErrInvalid) naming the field; a
// database failure matches sluice.ErrUnavailable, and a Process that failed with it may or may
// not have committed (running it again is safe). A call after Close is sluice.ErrClosed.
//
// Both engines are safe for concurrent use; an Aggregator is not.
package stream
