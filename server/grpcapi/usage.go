package grpcapi

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice"
	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server/internal/grpcstatus"
	"github.com/sluicehq/sluice/stream"
)

// MaxUsageEvents is the most events one Record may carry: the bound of the HTTP API's POST
// /v1/usage, so that one call cannot hold the streams' store for long.
const MaxUsageEvents = 10000

// watchPage is the most outputs one poll of a Watch reads; a full page is followed at once by
// the next, so a watch far behind catches up without waiting for the poll.
const watchPage = 1000

// WatchPoll is how often a Watch that has sent everything looks for new outputs. It is a
// variable so that tests can shorten it; it must be positive, and is read when a Watch starts.
var WatchPoll = 100 * time.Millisecond

// RegisterUsage registers on gs the Usage service of stream mode over b. Record appends a batch
// of at most MaxUsageEvents events through b.Append, all or none. Watch sends a stream's
// decisions (or windows) in offset order from after a given offset, polling b every WatchPoll,
// until the client cancels or the server stops; each carries its offset, so a client that
// watches again after the last offset it received resumes with nothing repeated or skipped.
//
// Errors map as RateLimiter's do (Status): bad input is INVALID_ARGUMENT with a
// google.rpc.BadRequest detail naming the field (events[3].key), a store that cannot answer
// UNAVAILABLE, anything else INTERNAL. A backend error ends a Watch with its status.
//
// Call it only when stream mode is configured: without it the server answers Usage calls
// UNIMPLEMENTED, as for any service it does not have. A server's GracefulStop waits for open
// streams, so call the returned function first: it ends every open Watch (with OK; the client
// resumes elsewhere from its last offset) and refuses new ones with UNAVAILABLE. It is idempotent.
func RegisterUsage(gs *grpc.Server, b stream.Backend) (endWatches func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sluicev1.RegisterUsageServer(gs, &usage{b: b, stopping: ctx})
	return cancel
}

type usage struct {
	sluicev1.UnimplementedUsageServer
	b        stream.Backend
	stopping context.Context // ends when the server stops: watches end with it
}

func (u *usage) Record(ctx context.Context, req *sluicev1.RecordRequest) (*sluicev1.RecordResponse, error) {
	in := req.GetEvents()
	if len(in) > MaxUsageEvents {
		return nil, grpcstatus.Of(&sluice.InvalidError{Field: "events", Reason: fmt.Sprintf("%d events, more than %d per call", len(in), MaxUsageEvents)})
	}
	if len(in) == 0 {
		return &sluicev1.RecordResponse{}, nil
	}
	events := make([]stream.Event, len(in))
	for i, e := range in {
		events[i] = stream.Event{Stream: e.GetStream(), Key: e.GetKey(), Cost: e.GetCost(), At: e.GetAt(), ID: e.GetId()}
	}
	// Append checks every event before storing any, naming the bad field as events[i].key.
	if err := u.b.Append(ctx, events); err != nil {
		return nil, grpcstatus.Of(err)
	}
	return &sluicev1.RecordResponse{Appended: int32(len(events))}, nil // at most MaxUsageEvents
}

func (u *usage) Watch(req *sluicev1.WatchRequest, ss grpc.ServerStreamingServer[sluicev1.WatchResponse]) error {
	name, after := req.GetStream(), req.GetAfter()
	switch {
	case name == "":
		return grpcstatus.Of(&sluice.InvalidError{Field: "stream", Reason: "is empty"})
	case after < 0:
		return grpcstatus.Of(&sluice.InvalidError{Field: "after", Reason: fmt.Sprintf("must not be negative, got %d", after)})
	}
	if u.stopping.Err() != nil {
		return status.Error(codes.Unavailable, "grpcapi: the server is stopping")
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	defer context.AfterFunc(u.stopping, cancel)()
	switch req.GetKind() {
	case sluicev1.WatchKind_WATCH_KIND_UNSPECIFIED, sluicev1.WatchKind_WATCH_KIND_DECISIONS:
		return watch(ctx, ss, name, after, u.b.Decisions, decisionResponse)
	case sluicev1.WatchKind_WATCH_KIND_WINDOWS:
		return watch(ctx, ss, name, after, u.b.Windows, windowResponse)
	}
	return grpcstatus.Of(&sluice.InvalidError{Field: "kind", Reason: fmt.Sprintf("unknown watch kind %d", req.GetKind())})
}

// reader is Backend.Windows or Backend.Decisions.
type reader[T any] func(ctx context.Context, stream string, after int64, limit int) ([]T, error)

// watch sends the outputs of name after after, read by read and converted by msg, until ctx
// ends. That end is the client's cancellation or the server stopping, neither an error of the
// watch's, so it returns nil.
func watch[T any](ctx context.Context, ss grpc.ServerStreamingServer[sluicev1.WatchResponse], name string, after int64, read reader[T], msg func(T) *sluicev1.WatchResponse) error {
	tick := time.NewTicker(WatchPoll)
	defer tick.Stop()
	for {
		items, err := read(ctx, name, after, watchPage)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return grpcstatus.Of(err)
		}
		for _, it := range items {
			m := msg(it)
			if err := ss.Send(m); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			after = m.GetOffset()
		}
		if len(items) == watchPage {
			continue // more are waiting
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func decisionResponse(d stream.Decision) *sluicev1.WatchResponse {
	return &sluicev1.WatchResponse{Offset: d.Offset, Item: &sluicev1.WatchResponse_Decision{Decision: &sluicev1.StreamDecision{
		Offset: d.Offset, Query: d.Query, Stream: d.Stream, Key: d.Key, WindowStart: d.WindowStart, WindowEnd: d.WindowEnd,
		Count: d.Count, Quota: d.Quota, OverBy: d.OverBy,
	}}}
}

func windowResponse(w stream.Window) *sluicev1.WatchResponse {
	return &sluicev1.WatchResponse{Offset: w.Offset, Item: &sluicev1.WatchResponse_Window{Window: &sluicev1.StreamWindow{
		Offset: w.Offset, Query: w.Query, Stream: w.Stream, Key: w.Key, Start: w.Start, End: w.End, Count: w.Count, Sum: w.Sum,
	}}}
}
