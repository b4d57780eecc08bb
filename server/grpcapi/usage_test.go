package grpcapi_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/config"
	sluicev1 "github.com/sluicehq/sluice/proto/sluice/v1"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/grpcapi"
	"github.com/sluicehq/sluice/server/httpapi"
	"github.com/sluicehq/sluice/store/memory"
	"github.com/sluicehq/sluice/stream"
)

// query windows stream s by the second and throttles a key with more than one event in one.
// Its idle flush closes a window once Process is given a clock past its end.
var query = stream.Query{Name: "q", Stream: "s", WindowMs: 1000, IdleFlushMs: 1, Quota: 1}

// closed is how long after events a clock closes their windows; later ones must be later still,
// since query drops an event whose window has closed.
const closed = 60_000

// later is the time of events emitted after the first: their windows are still open.
const later = t0 + 10*closed

// fastPoll shortens grpcapi.WatchPoll for the test. Call it before startUsage: the value is put
// back after the server's handlers have returned.
func fastPoll(t *testing.T) {
	t.Helper()
	old := grpcapi.WatchPoll
	grpcapi.WatchPoll = 5 * time.Millisecond
	t.Cleanup(func() { grpcapi.WatchPoll = old })
}

// startUsage serves the Usage service over b on a loopback port and returns the server and a
// client of it. The server's Stop waits for its handlers, so none outlives the test.
func startUsage(t *testing.T, b stream.Backend, opts ...grpc.ServerOption) (*grpc.Server, sluicev1.UsageClient) {
	t.Helper()
	gs, c, _ := serveUsage(t, b, opts...)
	return gs, c
}

// serveUsage is startUsage, also returning the function RegisterUsage returned.
func serveUsage(t *testing.T, b stream.Backend, opts ...grpc.ServerOption) (*grpc.Server, sluicev1.UsageClient, func()) {
	t.Helper()
	gs := grpc.NewServer(append(opts, grpc.WaitForHandlers(true))...)
	end := grpcapi.RegisterUsage(gs, b)
	return gs, sluicev1.NewUsageClient(dial(t, gs)), end
}

func newMemory(t *testing.T) *stream.MemoryEngine {
	t.Helper()
	m := stream.NewMemory()
	t.Cleanup(func() { m.Close() })
	return m
}

// process runs query over everything appended, in one step so that no window closes before all
// its events are in, and closes its windows at now; it returns how many events it consumed.
func process(t *testing.T, b stream.Backend, now int64) int {
	t.Helper()
	n, err := b.Process(t.Context(), query, now, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// emit appends at at two events of each of over keys and one of each of under keys and processes
// them: over decisions and over+under windows.
func emit(t *testing.T, b stream.Backend, prefix string, at int64, over, under int) {
	t.Helper()
	var events []stream.Event
	for i := range over {
		k := fmt.Sprintf("%s-hot%04d", prefix, i)
		events = append(events, stream.Event{Stream: "s", Key: k, At: at}, stream.Event{Stream: "s", Key: k, At: at})
	}
	for i := range under {
		events = append(events, stream.Event{Stream: "s", Key: fmt.Sprintf("%s-cool%04d", prefix, i), At: at})
	}
	if err := b.Append(t.Context(), events); err != nil {
		t.Fatal(err)
	}
	process(t, b, at+closed)
}

// outputs reads every decision (or window) of stream s as Watch should send it.
func outputs(t *testing.T, b stream.Backend, kind sluicev1.WatchKind) []*sluicev1.WatchResponse {
	t.Helper()
	var out []*sluicev1.WatchResponse
	if kind == sluicev1.WatchKind_WATCH_KIND_WINDOWS {
		ws, err := b.Windows(t.Context(), "s", 0, 1_000_000)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			out = append(out, &sluicev1.WatchResponse{Offset: w.Offset, Item: &sluicev1.WatchResponse_Window{Window: &sluicev1.StreamWindow{
				Offset: w.Offset, Query: w.Query, Stream: w.Stream, Key: w.Key, Start: w.Start, End: w.End, Count: w.Count, Sum: w.Sum}}})
		}
		return out
	}
	ds, err := b.Decisions(t.Context(), "s", 0, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		out = append(out, &sluicev1.WatchResponse{Offset: d.Offset, Item: &sluicev1.WatchResponse_Decision{Decision: &sluicev1.StreamDecision{
			Offset: d.Offset, Query: d.Query, Stream: d.Stream, Key: d.Key, WindowStart: d.WindowStart, WindowEnd: d.WindowEnd,
			Count: d.Count, Quota: d.Quota, OverBy: d.OverBy}}})
	}
	return out
}

// recv reads n responses of w.
func recv(t *testing.T, w sluicev1.Usage_WatchClient, n int) []*sluicev1.WatchResponse {
	t.Helper()
	out := make([]*sluicev1.WatchResponse, 0, n)
	for len(out) < n {
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("Recv after %d of %d responses: %v", len(out), n, err)
		}
		out = append(out, r)
	}
	return out
}

// sameResponses fails unless got and want hold equal responses in the same order.
func sameResponses(t *testing.T, got, want []*sluicev1.WatchResponse) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d responses, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("response %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func watchCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func usageEvents(n int) []*sluicev1.UsageEvent {
	out := make([]*sluicev1.UsageEvent, n)
	for i := range out {
		out[i] = &sluicev1.UsageEvent{Stream: "s", Key: "k", At: t0}
	}
	return out
}

func TestMaxUsageEventsIsHTTPs(t *testing.T) {
	if grpcapi.MaxUsageEvents != httpapi.MaxUsageEvents {
		t.Errorf("grpcapi.MaxUsageEvents = %d, httpapi.MaxUsageEvents = %d: one bound for both APIs", grpcapi.MaxUsageEvents, httpapi.MaxUsageEvents)
	}
}

func TestRecord(t *testing.T) {
	tests := []struct {
		name         string
		batches      [][]*sluicev1.UsageEvent // recorded one after the other
		wantAppended []int32
		want         []stream.Window // query's windows afterwards, offsets aside
	}{
		{
			name:         "events default to cost 1",
			batches:      [][]*sluicev1.UsageEvent{{{Stream: "s", Key: "a", At: t0}, {Stream: "s", Key: "a", At: t0 + 999}, {Stream: "s", Key: "b", At: t0 + 1000}}},
			wantAppended: []int32{3},
			want: []stream.Window{
				{Query: "q", Stream: "s", Key: "a", Start: t0, End: t0 + 1000, Count: 2, Sum: 2},
				{Query: "q", Stream: "s", Key: "b", Start: t0 + 1000, End: t0 + 2000, Count: 1, Sum: 1},
			},
		},
		{
			name:         "costs are summed",
			batches:      [][]*sluicev1.UsageEvent{{{Stream: "s", Key: "a", At: t0, Cost: 5}, {Stream: "s", Key: "a", At: t0 + 1, Cost: 7}}},
			wantAppended: []int32{2},
			want:         []stream.Window{{Query: "q", Stream: "s", Key: "a", Start: t0, End: t0 + 1000, Count: 2, Sum: 12}},
		},
		{
			name:         "other streams are not the query's",
			batches:      [][]*sluicev1.UsageEvent{{{Stream: "other", Key: "a", At: t0}, {Stream: "s", Key: "a", At: t0}}},
			wantAppended: []int32{2},
			want:         []stream.Window{{Query: "q", Stream: "s", Key: "a", Start: t0, End: t0 + 1000, Count: 1, Sum: 1}},
		},
		{
			name: "a retried batch with ids counts once",
			batches: [][]*sluicev1.UsageEvent{
				{{Stream: "s", Key: "a", At: t0, Id: "1"}, {Stream: "s", Key: "a", At: t0, Id: "2"}},
				{{Stream: "s", Key: "a", At: t0, Id: "1"}, {Stream: "s", Key: "a", At: t0, Id: "2"}, {Stream: "s", Key: "a", At: t0, Id: "3"}},
			},
			wantAppended: []int32{2, 3},
			want:         []stream.Window{{Query: "q", Stream: "s", Key: "a", Start: t0, End: t0 + 1000, Count: 3, Sum: 3}},
		},
		{
			name:         "an empty batch appends nothing",
			batches:      [][]*sluicev1.UsageEvent{{}},
			wantAppended: []int32{0},
		},
		{
			name:         "the most events of one call",
			batches:      [][]*sluicev1.UsageEvent{usageEvents(grpcapi.MaxUsageEvents)},
			wantAppended: []int32{grpcapi.MaxUsageEvents},
			want:         []stream.Window{{Query: "q", Stream: "s", Key: "k", Start: t0, End: t0 + 1000, Count: grpcapi.MaxUsageEvents, Sum: grpcapi.MaxUsageEvents}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newMemory(t)
			_, c := startUsage(t, b)
			for i, events := range tt.batches {
				resp, err := c.Record(t.Context(), &sluicev1.RecordRequest{Events: events})
				if err != nil {
					t.Fatalf("Record %d: %v", i, err)
				}
				if resp.GetAppended() != tt.wantAppended[i] {
					t.Errorf("Record %d appended %d, want %d", i, resp.GetAppended(), tt.wantAppended[i])
				}
			}
			process(t, b, t0+closed)
			got, err := b.Windows(t.Context(), "s", 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i].Offset = 0
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("windows %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestRecordRefused(t *testing.T) {
	ok := func(key string) *sluicev1.UsageEvent { return &sluicev1.UsageEvent{Stream: "s", Key: key, At: t0} }
	tests := []struct {
		name      string
		closed    bool // the backend fails every call
		events    []*sluicev1.UsageEvent
		want      codes.Code
		wantField string // the BadRequest field violation of INVALID_ARGUMENT
	}{
		{name: "empty stream", events: []*sluicev1.UsageEvent{{Key: "a"}}, want: codes.InvalidArgument, wantField: "events[0].stream"},
		{name: "stream too long", events: []*sluicev1.UsageEvent{ok("a"), {Stream: strings.Repeat("s", 201), Key: "a"}}, want: codes.InvalidArgument, wantField: "events[1].stream"},
		{name: "empty key after good events", events: []*sluicev1.UsageEvent{ok("a"), ok("b"), ok("c"), {Stream: "s"}}, want: codes.InvalidArgument, wantField: "events[3].key"},
		{name: "negative cost", events: []*sluicev1.UsageEvent{ok("a"), {Stream: "s", Key: "b", Cost: -1}}, want: codes.InvalidArgument, wantField: "events[1].cost"},
		{name: "negative at", events: []*sluicev1.UsageEvent{{Stream: "s", Key: "a", At: -1}}, want: codes.InvalidArgument, wantField: "events[0].at"},
		{name: "too many events", events: usageEvents(grpcapi.MaxUsageEvents + 1), want: codes.InvalidArgument, wantField: "events"},
		{name: "backend closed", closed: true, events: []*sluicev1.UsageEvent{ok("a")}, want: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newMemory(t)
			if tt.closed {
				b.Close()
			}
			_, c := startUsage(t, b)
			_, err := c.Record(t.Context(), &sluicev1.RecordRequest{Events: tt.events})
			st := status.Convert(err)
			if st.Code() != tt.want {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, tt.want)
			}
			if got := violationField(st); got != tt.wantField {
				t.Errorf("BadRequest field %q, want %q (%v)", got, tt.wantField, err)
			}
			if !tt.closed {
				if n := process(t, b, t0+closed); n != 0 {
					t.Errorf("%d events appended, want none", n)
				}
			}
		})
	}
}

// TestWatch reads a backlog of outputs from after a given one, then one emitted while watching:
// the watch sends each exactly once, in offset order.
func TestWatch(t *testing.T) {
	tests := []struct {
		name        string
		over, under int // keys over and under the quota before the watch
		kind        sluicev1.WatchKind
		from        int // how many outputs the request's after skips
	}{
		{name: "decisions by default", over: 3, under: 2, kind: sluicev1.WatchKind_WATCH_KIND_UNSPECIFIED},
		{name: "decisions", over: 3, under: 2, kind: sluicev1.WatchKind_WATCH_KIND_DECISIONS},
		{name: "windows", over: 3, under: 2, kind: sluicev1.WatchKind_WATCH_KIND_WINDOWS},
		{name: "decisions after the first", over: 3, under: 2, kind: sluicev1.WatchKind_WATCH_KIND_DECISIONS, from: 1},
		{name: "windows after all of them", over: 3, under: 2, kind: sluicev1.WatchKind_WATCH_KIND_WINDOWS, from: 5},
		{name: "nothing yet", kind: sluicev1.WatchKind_WATCH_KIND_DECISIONS},
		{name: "pages of decisions", over: 2500, under: 10, kind: sluicev1.WatchKind_WATCH_KIND_DECISIONS},
		{name: "pages of windows, from a page's end", over: 1500, under: 1500, kind: sluicev1.WatchKind_WATCH_KIND_WINDOWS, from: 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fastPoll(t)
			b := newMemory(t)
			_, c := startUsage(t, b)
			emit(t, b, "before", t0, tt.over, tt.under)
			all := outputs(t, b, tt.kind)
			var after int64
			if tt.from > 0 {
				after = all[tt.from-1].GetOffset()
			}
			w, err := c.Watch(watchCtx(t), &sluicev1.WatchRequest{Stream: "s", After: after, Kind: tt.kind})
			if err != nil {
				t.Fatal(err)
			}
			sameResponses(t, recv(t, w, len(all)-tt.from), all[tt.from:])

			emit(t, b, "during", later, 1, 0)
			all = outputs(t, b, tt.kind)
			sameResponses(t, recv(t, w, 1), all[len(all)-1:])
		})
	}
}

// TestWatchResumes stops a watch part way and resumes it from the last offset received: the two
// together hold every output once, in order.
func TestWatchResumes(t *testing.T) {
	tests := []struct {
		name  string
		over  int
		first int // responses read before the first watch is cancelled
	}{
		{name: "after one", over: 5, first: 1},
		{name: "in the middle", over: 5, first: 3},
		{name: "after the last", over: 5, first: 5},
		{name: "across pages", over: 2200, first: 1500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fastPoll(t)
			b := newMemory(t)
			_, c := startUsage(t, b)
			emit(t, b, "k", t0, tt.over, 1)
			all := outputs(t, b, sluicev1.WatchKind_WATCH_KIND_DECISIONS)

			ctx, cancel := context.WithCancel(watchCtx(t))
			w, err := c.Watch(ctx, &sluicev1.WatchRequest{Stream: "s"})
			if err != nil {
				t.Fatal(err)
			}
			got := recv(t, w, tt.first)
			cancel()

			w, err = c.Watch(watchCtx(t), &sluicev1.WatchRequest{Stream: "s", After: got[len(got)-1].GetOffset()})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, recv(t, w, len(all)-tt.first)...)
			emit(t, b, "later", later, 1, 0)
			all = outputs(t, b, sluicev1.WatchKind_WATCH_KIND_DECISIONS)
			got = append(got, recv(t, w, 1)...)
			sameResponses(t, got, all)
		})
	}
}

func TestWatchRefused(t *testing.T) {
	tests := []struct {
		name      string
		closed    bool // the backend fails every call
		req       *sluicev1.WatchRequest
		want      codes.Code
		wantField string
	}{
		{name: "empty stream", req: &sluicev1.WatchRequest{}, want: codes.InvalidArgument, wantField: "stream"},
		{name: "negative after", req: &sluicev1.WatchRequest{Stream: "s", After: -1}, want: codes.InvalidArgument, wantField: "after"},
		{name: "unknown kind", req: &sluicev1.WatchRequest{Stream: "s", Kind: 7}, want: codes.InvalidArgument, wantField: "kind"},
		{name: "backend closed", closed: true, req: &sluicev1.WatchRequest{Stream: "s"}, want: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newMemory(t)
			if tt.closed {
				b.Close()
			}
			_, c := startUsage(t, b)
			w, err := c.Watch(watchCtx(t), tt.req)
			if err == nil {
				_, err = w.Recv()
			}
			st := status.Convert(err)
			if st.Code() != tt.want {
				t.Fatalf("code %v (%v), want %v", st.Code(), err, tt.want)
			}
			if got := violationField(st); got != tt.wantField {
				t.Errorf("BadRequest field %q, want %q (%v)", got, tt.wantField, err)
			}
		})
	}
}

// TestWatchEnds ends a watch that has sent a decision, and checks what its handler returned:
// nil when the client or the server ends it, the backend's status when the backend fails.
func TestWatchEnds(t *testing.T) {
	tests := []struct {
		name       string
		end        func(cancel context.CancelFunc, gs *grpc.Server, b stream.Backend)
		wantServer codes.Code // the handler's return
	}{
		{name: "client cancels", end: func(cancel context.CancelFunc, _ *grpc.Server, _ stream.Backend) { cancel() }, wantServer: codes.OK},
		{name: "server stops", end: func(_ context.CancelFunc, gs *grpc.Server, _ stream.Backend) { gs.Stop() }, wantServer: codes.OK},
		{name: "backend fails", end: func(_ context.CancelFunc, _ *grpc.Server, b stream.Backend) { b.Close() }, wantServer: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fastPoll(t)
			ended := make(chan error, 1)
			b := newMemory(t)
			gs, c := startUsage(t, b, grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				err := h(srv, ss)
				ended <- err
				return err
			}))
			emit(t, b, "k", t0, 1, 0)
			ctx, cancel := context.WithCancel(watchCtx(t))
			defer cancel()
			w, err := c.Watch(ctx, &sluicev1.WatchRequest{Stream: "s"})
			if err != nil {
				t.Fatal(err)
			}
			recv(t, w, 1)
			tt.end(cancel, gs, b)
			select {
			case err := <-ended:
				if status.Code(err) != tt.wantServer {
					t.Errorf("the handler returned %v, want %v", err, tt.wantServer)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the watch did not end")
			}
			if _, err := w.Recv(); err == nil {
				t.Error("Recv after the end succeeded")
			} else if tt.wantServer != codes.OK && status.Code(err) != tt.wantServer {
				t.Errorf("client got %v, want %v", err, tt.wantServer)
			}
		})
	}
}

// TestUsageRegistration serves RateLimiter as sluice serve does, with and without streams: the
// Usage service answers and is listed by reflection only when registered.
func TestUsageRegistration(t *testing.T) {
	tests := []struct {
		name       string
		streams    bool
		wantRecord codes.Code
	}{
		{name: "streams configured", streams: true, wantRecord: codes.OK},
		{name: "no streams", streams: false, wantRecord: codes.Unimplemented},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(testConfig))
			if err != nil {
				t.Fatal(err)
			}
			mem := memory.New(memory.Config{SweepInterval: -1})
			t.Cleanup(func() { mem.Close() })
			srv, err := server.New(cfg, mem, server.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			gs := grpc.NewServer()
			grpcapi.Register(gs, srv)
			if tt.streams {
				grpcapi.RegisterUsage(gs, newMemory(t))
			}
			conn := dial(t, gs)

			_, err = sluicev1.NewUsageClient(conn).Record(t.Context(), &sluicev1.RecordRequest{Events: usageEvents(1)})
			if status.Code(err) != tt.wantRecord {
				t.Errorf("Record: %v, want %v", err, tt.wantRecord)
			}
			rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if err := rs.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
				t.Fatal(err)
			}
			resp, err := rs.Recv()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, s := range resp.GetListServicesResponse().GetService() {
				names = append(names, s.GetName())
			}
			if listed := slices.Contains(names, "sluice.v1.Usage"); listed != tt.streams {
				t.Errorf("services %v: sluice.v1.Usage listed %v, want %v", names, listed, tt.streams)
			}
		})
	}
}

// The function RegisterUsage returns ends open watches, so that GracefulStop, which waits for
// open streams, returns at once; a watch begun after it is refused UNAVAILABLE.
func TestUsageEndWatches(t *testing.T) {
	fastPoll(t)
	b := newMemory(t)
	emit(t, b, "k", t0, 1, 0) // one decision, so that the watch has sent something before end
	gs, client, end := serveUsage(t, b)

	w, err := client.Watch(context.Background(), &sluicev1.WatchRequest{Stream: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil { // the server has the watch
		t.Fatal(err)
	}
	end()
	end() // idempotent
	if _, err := w.Recv(); err != io.EOF {
		t.Fatalf("the open watch after end: %v, want io.EOF", err)
	}
	w2, err := client.Watch(context.Background(), &sluicev1.WatchRequest{Stream: "s"})
	if err == nil {
		_, err = w2.Recv()
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a watch after end: %v, want UNAVAILABLE", err)
	}
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("GracefulStop still waiting 5 s after the watches were ended")
	}
}
