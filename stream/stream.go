package stream

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// Event is one request on a stream. Key is the aggregation key (an API key, a tenant): every key
// has windows of its own. Cost 0 counts as 1, so a plain request needs none. At is the event's
// time in epoch milliseconds; 0 means the instant Append is called. ID, when set, makes the event
// idempotent: a second Append of the same (Stream, ID) is ignored, so a producer can retry.
type Event struct {
	Stream string `json:"stream"`
	Key    string `json:"key"`
	Cost   int64  `json:"cost,omitempty"`
	At     int64  `json:"at,omitempty"`
	ID     string `json:"id,omitempty"`
}

// Window is one closed tumbling window of one key: [Start, End) in epoch ms, Count events whose
// costs total Sum. Query and Offset say which query emitted it and where it sits in its stream's
// output; pass Offset as the next read's after.
type Window struct {
	Offset int64  `json:"offset"`
	Query  string `json:"query"`
	Stream string `json:"stream"`
	Key    string `json:"key"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Count  int64  `json:"count"`
	Sum    int64  `json:"sum"`
}

// Decision is the gate's verdict on a window whose Count went over its query's Quota: throttle
// Key, which made Count requests in [WindowStart, WindowEnd) against a Quota, OverBy = Count -
// Quota too many. Offset orders decisions like Window.Offset.
type Decision struct {
	Offset      int64  `json:"offset"`
	Query       string `json:"query"`
	Stream      string `json:"stream"`
	Key         string `json:"key"`
	WindowStart int64  `json:"windowStart"`
	WindowEnd   int64  `json:"windowEnd"`
	Count       int64  `json:"count"`
	Quota       int64  `json:"quota"`
	OverBy      int64  `json:"overBy"`
}

// Query is a named streaming query over one stream: per key tumbling windows of WindowMs,
// aligned to the epoch. A window closes once the watermark (the latest event time seen, minus
// GraceMs) reaches its end or, when IdleFlushMs > 0, once the clock passed to Process reaches
// End + IdleFlushMs, so a key that went quiet still gets its last window. Quota > 0 makes a
// Decision of every closed window with Count > Quota; 0 emits windows only.
//
// The name is the query's identity: its offset and window state are stored under it, and a
// stored query keeps its definition (a different one is ErrQueryChanged until Reset).
type Query struct {
	Name        string `json:"name"`
	Stream      string `json:"stream"`
	WindowMs    int64  `json:"windowMs"`
	GraceMs     int64  `json:"graceMs"`
	IdleFlushMs int64  `json:"idleFlushMs"`
	Quota       int64  `json:"quota"`
}

// Stats is a query's progress: the log offset it consumed through and how many events of its
// stream that was, the watermark-or-idle horizon below which its windows are closed, how many
// events (and their cost) arrived after their window had closed and so are in no window, and how
// many windows are open. Offsets are positions in one log that every stream of the backend
// shares, so Offset is not a count of the stream's events: Events is.
type Stats struct {
	Offset  int64 `json:"offset"`
	Events  int64 `json:"events"` // since the query was registered or last Reset
	Horizon int64 `json:"horizon"`
	MaxAt   int64 `json:"maxAt"`
	Late    int64 `json:"late"`
	LateSum int64 `json:"lateSum"`
	Open    int64 `json:"open"`
}

// ErrQueryChanged means a query name is stored with another definition. Reset the name to start
// it over with the new one.
var ErrQueryChanged = errors.New("stream: query definition changed")

// Backend is what every engine of stream mode does: MemoryEngine here, pgstream.Engine on
// PostgreSQL. Each must pass the contract in internal/streamtest.
type Backend interface {
	// Append stores events at the end of their streams, all or none.
	Append(ctx context.Context, events []Event) error
	// Register stores q, or checks that it is the stored definition.
	Register(ctx context.Context, q Query) error
	// Reset forgets the query name's definition, offset and open windows (not its outputs).
	Reset(ctx context.Context, name string) error
	// Process folds up to max events after q's offset into its windows and emits what closes
	// at now (epoch ms), in one step, returning how many events it consumed.
	Process(ctx context.Context, q Query, now int64, max int) (int, error)
	// Windows reads closed windows of stream with Offset > after, in order.
	Windows(ctx context.Context, stream string, after int64, limit int) ([]Window, error)
	// Decisions reads decisions of stream with Offset > after, in order.
	Decisions(ctx context.Context, stream string, after int64, limit int) ([]Decision, error)
	// Stats reports a stored query's progress.
	Stats(ctx context.Context, name string) (Stats, error)
	// Pull leases to r.Consumer one partition of r.Group's view of the stream's outputs of
	// r.Kind, one that has items after the group's committed offset and no live lease, and
	// returns up to r.Limit of those items. With no such partition it returns an empty Batch.
	Pull(ctx context.Context, r PullRequest) (Batch, error)
	// Ack commits the partition of lease r.Lease through r.Offset (at most the batch's last
	// offset; one at or below the committed offset commits nothing) and releases the lease.
	// An expired or unknown lease is ErrLeaseLost, and commits nothing.
	Ack(ctx context.Context, r AckRequest) error
	Close() error
}

// DefaultBatch is Process's max, and the limit of Windows and Decisions, when it is 0 or less.
const DefaultBatch = 1000

const maxName = 200

func invalid(field, format string, args ...any) error {
	return &sluice.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func checkName(field, s string) error {
	switch {
	case s == "":
		return invalid(field, "is empty")
	case len(s) > maxName:
		return invalid(field, "is longer than %d bytes", maxName)
	}
	return nil
}

// Validate reports the first invalid field of q as a *sluice.InvalidError.
func (q Query) Validate() error {
	if err := checkName("name", q.Name); err != nil {
		return err
	}
	if err := checkName("stream", q.Stream); err != nil {
		return err
	}
	switch {
	case q.WindowMs <= 0:
		return invalid("windowMs", "must be positive, got %d", q.WindowMs)
	case q.GraceMs < 0:
		return invalid("graceMs", "must not be negative, got %d", q.GraceMs)
	case q.IdleFlushMs < 0:
		return invalid("idleFlushMs", "must not be negative, got %d", q.IdleFlushMs)
	case q.Quota < 0:
		return invalid("quota", "must not be negative, got %d", q.Quota)
	// Keep window arithmetic (start + window, at - grace) far from overflow.
	case q.WindowMs > math.MaxInt64/4 || q.GraceMs > math.MaxInt64/4 || q.IdleFlushMs > math.MaxInt64/4:
		return invalid("windowMs", "durations must be under 2^61 ms")
	}
	return nil
}

// NormalizeEvents validates the events of one Append and returns a copy with the defaults filled
// in: Cost 0 is 1, At 0 is now (epoch ms). The first invalid event is a *sluice.InvalidError
// naming its field as events[i].field. Every Backend's Append starts with it, so that an event is
// accepted or refused alike by all of them.
func NormalizeEvents(events []Event, now int64) ([]Event, error) {
	out := make([]Event, len(events))
	for i, e := range events {
		var err error
		if out[i], err = normalize(e, i, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// normalize validates e (index i of an Append) and fills its defaults.
func normalize(e Event, i int, now int64) (Event, error) {
	field := func(f string) string { return fmt.Sprintf("events[%d].%s", i, f) }
	if err := checkName(field("stream"), e.Stream); err != nil {
		return e, err
	}
	if e.Key == "" {
		return e, invalid(field("key"), "is empty")
	}
	if err := checkText(field("key"), e.Key); err != nil {
		return e, err
	}
	if err := checkText(field("id"), e.ID); err != nil {
		return e, err
	}
	if e.Cost < 0 {
		return e, invalid(field("cost"), "must not be negative, got %d", e.Cost)
	}
	if e.At < 0 || e.At > math.MaxInt64/4 {
		return e, invalid(field("at"), "out of range: %d", e.At)
	}
	if e.Cost == 0 {
		e.Cost = 1
	}
	if e.At == 0 {
		e.At = now
	}
	return e, nil
}

// checkText rejects a key or an ID that PostgreSQL's text cannot hold (NUL, bytes that are not
// UTF-8), on every backend, so that an event is accepted or refused alike everywhere, and one longer
// than sluice.MaxKeyLen.
func checkText(field, s string) error {
	switch {
	case len(s) > sluice.MaxKeyLen:
		return invalid(field, "is %d bytes, more than %d", len(s), sluice.MaxKeyLen)
	case !utf8.ValidString(s):
		return invalid(field, "is not valid UTF-8")
	case strings.IndexByte(s, 0) >= 0:
		return invalid(field, "holds a NUL byte")
	}
	return nil
}

// Decide is the gate: the Decision on a closed window of q, and true, when its Count is over
// q.Quota; with Quota 0 nothing is decided.
func (q Query) Decide(w Window) (Decision, bool) {
	if q.Quota <= 0 || w.Count <= q.Quota {
		return Decision{}, false
	}
	return Decision{Query: w.Query, Stream: w.Stream, Key: w.Key, WindowStart: w.Start, WindowEnd: w.End,
		Count: w.Count, Quota: q.Quota, OverBy: w.Count - q.Quota}, true
}
