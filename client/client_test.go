package client_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/client"
)

// api is what the Client shares with the Limiter: code written against one runs on the other.
type api interface {
	Check(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error)
	CheckMany(ctx context.Context, policy string, keys []string, cost int64) ([]sluice.Decision, error)
	CheckAll(ctx context.Context, items ...sluice.Item) (sluice.Decision, error)
	Peek(ctx context.Context, policy, key string) (sluice.Decision, error)
	Forecast(ctx context.Context, policy, key string, cost int64) (sluice.Forecast, error)
	Refund(ctx context.Context, policy, key string, cost int64) error
	Settle(ctx context.Context, policy, key string, reserved, actual int64) error
	Reset(ctx context.Context, policy, key string) error
}

var (
	_ api = (*client.Client)(nil)
	_ api = (*sluice.Limiter)(nil)
)

func newClient(t testing.TB, url string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestMirrorsLimiter runs each script against the client (over the fake, over a Limiter) and
// against a Limiter of its own, and wants the same results step by step, errors included.
func TestMirrorsLimiter(t *testing.T) {
	type step func(ctx context.Context, a api) (any, error)
	check := func(policy, key string, cost int64) step {
		return func(ctx context.Context, a api) (any, error) { return a.Check(ctx, policy, key, cost) }
	}
	at := func(now int64, s step) step {
		return func(ctx context.Context, a api) (any, error) { return s(sluice.WithNow(ctx, now), a) }
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"check until denied", []step{check("api", "k", 1), check("api", "k", 2), check("api", "k", 1)}},
		{"check at a later instant", []step{
			at(t0, check("api", "k", 3)), at(t0, check("api", "k", 1)), at(t0+1000, check("api", "k", 1)),
		}},
		{"composite denies by tokens", []step{check("model:gpt", "tenant", 900), check("model:gpt", "tenant", 200)}},
		{"composite denies by requests", []step{check("model:gpt", "t", 1), check("model:gpt", "t", 1), check("model:gpt", "t", 1)}},
		{"check many", []step{
			check("api", "b", 3),
			func(ctx context.Context, a api) (any, error) {
				return a.CheckMany(ctx, "api", []string{"a", "b", "c"}, 2)
			},
		}},
		{"check all leaks nothing", []step{
			check("login-account", "asha", 5),
			func(ctx context.Context, a api) (any, error) {
				return a.CheckAll(ctx, sluice.Item{Policy: "login-ip", Key: "1.2.3.4", Cost: 1}, sluice.Item{Policy: "login-account", Key: "asha", Cost: 1})
			},
			func(ctx context.Context, a api) (any, error) { return a.Peek(ctx, "login-ip", "1.2.3.4") },
		}},
		{"check all allows", []step{
			func(ctx context.Context, a api) (any, error) {
				return a.CheckAll(ctx, sluice.Item{Policy: "login-ip", Key: "1.2.3.4", Cost: 1}, sluice.Item{Policy: "api", Key: "u", Cost: 2})
			},
		}},
		{"peek, forecast, refund, reset", []step{
			check("api", "k", 3),
			func(ctx context.Context, a api) (any, error) { return a.Peek(ctx, "api", "k") },
			func(ctx context.Context, a api) (any, error) { return a.Forecast(ctx, "api", "k", 2) },
			func(ctx context.Context, a api) (any, error) { return nil, a.Refund(ctx, "api", "k", 2) },
			func(ctx context.Context, a api) (any, error) { return a.Peek(ctx, "api", "k") },
			func(ctx context.Context, a api) (any, error) { return nil, a.Settle(ctx, "api", "k", 1, 3) },
			func(ctx context.Context, a api) (any, error) { return a.Peek(ctx, "api", "k") },
			func(ctx context.Context, a api) (any, error) { return nil, a.Settle(ctx, "api", "k", 3, 1) },
			func(ctx context.Context, a api) (any, error) { return a.Peek(ctx, "api", "k") },
			func(ctx context.Context, a api) (any, error) { return nil, a.Reset(ctx, "api", "k") },
			func(ctx context.Context, a api) (any, error) { return a.Forecast(ctx, "api", "k", 1) },
		}},
		{"bad input", []step{
			check("api", "k", 0),
			check("api", "k", 4),
			check("api", "", 1),
			check("nope", "k", 1),
			check("", "k", 1),
			func(ctx context.Context, a api) (any, error) { return a.CheckMany(ctx, "api", nil, 1) },
			func(ctx context.Context, a api) (any, error) { return a.CheckMany(ctx, "api", nil, 0) },
			func(ctx context.Context, a api) (any, error) { return a.Peek(ctx, "api", "") },
			func(ctx context.Context, a api) (any, error) { return nil, a.Reset(ctx, "nope", "k") },
			func(ctx context.Context, a api) (any, error) { return a.CheckMany(ctx, "api", []string{"a", ""}, 1) },
			func(ctx context.Context, a api) (any, error) { return a.CheckAll(ctx) },
			func(ctx context.Context, a api) (any, error) {
				return a.CheckAll(ctx, sluice.Item{Policy: "api", Key: "a", Cost: 1}, sluice.Item{Policy: "api", Key: "", Cost: 1})
			},
			func(ctx context.Context, a api) (any, error) { return nil, a.Refund(ctx, "api", "k", 0) },
			func(ctx context.Context, a api) (any, error) { return nil, a.Settle(ctx, "api", "k", 0, 1) },
			func(ctx context.Context, a api) (any, error) { return nil, a.Settle(ctx, "nope", "k", 1, 2) },
			func(ctx context.Context, a api) (any, error) { return a.Forecast(ctx, "nope", "k", 1) },
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, srv := startFake(t, "")
			c := newClient(t, srv.URL, client.Options{})
			lim := newLimiter(t)
			ctx := context.Background()
			for i, s := range tt.steps {
				got, gotErr := s(ctx, c)
				want, wantErr := s(ctx, lim)
				if !reflect.DeepEqual(got, want) {
					t.Errorf("step %d: client answered %+v, limiter %+v", i, got, want)
				}
				if errClass(gotErr) != errClass(wantErr) {
					t.Errorf("step %d: client error %v (%s), limiter %v (%s)", i, gotErr, errClass(gotErr), wantErr, errClass(wantErr))
				}
				var gie, wie *sluice.InvalidError
				if errors.As(wantErr, &wie) && (!errors.As(gotErr, &gie) || *gie != *wie) {
					t.Errorf("step %d: client error %#v, want %#v", i, gotErr, wie)
				}
			}
		})
	}
}

// errClass names the root error err matches.
func errClass(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, sluice.ErrInvalid):
		return "invalid"
	case errors.Is(err, sluice.ErrUnknownPolicy):
		return "unknown policy"
	case errors.Is(err, sluice.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, client.ErrUnauthorized):
		return "unauthorized"
	}
	return "other"
}

func TestErrorMapping(t *testing.T) {
	tests := []struct {
		name      string
		status    int
		raw       string
		wantClass string
		wantField string // for "invalid"
	}{
		{"invalid_argument with another message", 400, "", "invalid", "request"},
		{"invalid_argument by status only", 400, "no json here", "invalid", "request"},
		{"the API's own message", 400, `{"error":"httpapi: items[3].cost: must be an integer","code":"invalid_argument"}`, "invalid", "items[3].cost"},
		{"too_large", 400, `{"error":"httpapi: body: over 1048576 bytes","code":"too_large"}`, "invalid", "body"},
		{"not_found", 404, "", "unknown policy", ""},
		{"unavailable", 503, "", "unavailable", ""},
		{"internal", 500, "", "unavailable", ""},
		{"a proxy's bad gateway page", 502, "<html>bad gateway</html>", "unavailable", ""},
		{"unimplemented is an answer", 501, "", "other", ""},
		{"unauthorized", 401, "", "unauthorized", ""},
		{"unauthorized by status only", 401, "go away", "unauthorized", ""},
		{"not found by status only", 404, "404 page not found", "unknown policy", ""},
		{"unavailable by status only", 503, "", "unavailable", ""},
		{"teapot", 418, "", "other", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, srv := startFake(t, "")
			f.fail(tt.status, tt.raw)
			c := newClient(t, srv.URL, client.Options{})
			_, err := c.Check(context.Background(), "api", "k", 1)
			if got := errClass(err); got != tt.wantClass {
				t.Fatalf("Check: %v is %s, want %s", err, got, tt.wantClass)
			}
			var ie *sluice.InvalidError
			if tt.wantClass == "invalid" {
				if !errors.As(err, &ie) || ie.Field != tt.wantField {
					t.Errorf("Check: %#v, want an *sluice.InvalidError of field %q", err, tt.wantField)
				}
				return
			}
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != tt.status || ce.Path != "/v1/check" {
				t.Errorf("Check: %#v, want a *client.Error of status %d on /v1/check", err, tt.status)
			}
		})
	}
}

func TestInvalidFieldFromServer(t *testing.T) {
	_, srv := startFake(t, "")
	c := newClient(t, srv.URL, client.Options{})
	_, err := c.CheckAll(context.Background(), sluice.Item{Policy: "api", Key: "a", Cost: 1}, sluice.Item{Policy: "api", Key: "b", Cost: 9})
	var ie *sluice.InvalidError
	if !errors.As(err, &ie) || ie.Field != "items[1].cost" || !errors.Is(err, sluice.ErrInvalid) {
		t.Fatalf("CheckAll: %#v, want an *sluice.InvalidError of field items[1].cost", err)
	}
}

func TestUnauthorized(t *testing.T) {
	tests := []struct {
		name, token string
		wantErr     error
	}{
		{"no token", "", client.ErrUnauthorized},
		{"wrong token", "guess", client.ErrUnauthorized},
		{"right token", "s3cret", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, srv := startFake(t, "s3cret")
			c := newClient(t, srv.URL, client.Options{Token: tt.token, FailOpen: true})
			_, err := c.Check(context.Background(), "api", "k", 1)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("Check: %v, want %v (a refused token never fails open)", err, tt.wantErr)
			}
			want := ""
			if tt.token != "" {
				want = "Bearer " + tt.token
			}
			if got := f.auth[len(f.auth)-1]; got != want {
				t.Errorf("Authorization: %q, want %q", got, want)
			}
		})
	}
}

func TestFailOpenAndClosed(t *testing.T) {
	type target struct {
		name string
		url  func(t *testing.T) string
	}
	targets := []target{
		{"closed server", func(t *testing.T) string {
			srv := httptest.NewServer(http.NotFoundHandler())
			srv.Close()
			return srv.URL
		}},
		{"503", func(t *testing.T) string {
			f, srv := startFake(t, "")
			f.fail(http.StatusServiceUnavailable, "")
			return srv.URL
		}},
		{"500", func(t *testing.T) string {
			f, srv := startFake(t, "")
			f.fail(http.StatusInternalServerError, "")
			return srv.URL
		}},
	}
	calls := []struct {
		name string
		call func(c *client.Client) (any, error)
		open any // the answer when failing open; nil: never fails open
	}{
		{"Check", func(c *client.Client) (any, error) { return c.Check(context.Background(), "api", "k", 1) },
			sluice.Decision{Allowed: true, DeniedBy: -1, FailOpen: true}},
		{"CheckMany", func(c *client.Client) (any, error) {
			return c.CheckMany(context.Background(), "api", []string{"a", "b"}, 1)
		}, []sluice.Decision{{Allowed: true, DeniedBy: -1, FailOpen: true}, {Allowed: true, DeniedBy: -1, FailOpen: true}}},
		{"CheckAll", func(c *client.Client) (any, error) {
			return c.CheckAll(context.Background(), sluice.Item{Policy: "api", Key: "a", Cost: 1}, sluice.Item{Policy: "api", Key: "b", Cost: 1})
		}, sluice.Decision{Allowed: true, DeniedBy: -1, FailOpen: true, Parts: []sluice.Decision{{Allowed: true, DeniedBy: -1, FailOpen: true}, {Allowed: true, DeniedBy: -1, FailOpen: true}}}},
		{"Peek", func(c *client.Client) (any, error) { return c.Peek(context.Background(), "api", "k") }, nil},
		{"Forecast", func(c *client.Client) (any, error) { return c.Forecast(context.Background(), "api", "k", 1) }, nil},
		{"Settle", func(c *client.Client) (any, error) { return nil, c.Settle(context.Background(), "api", "k", 2, 1) }, nil},
		{"Refund", func(c *client.Client) (any, error) { return nil, c.Refund(context.Background(), "api", "k", 1) }, nil},
		{"Reset", func(c *client.Client) (any, error) { return nil, c.Reset(context.Background(), "api", "k") }, nil},
	}
	for _, tg := range targets {
		for _, tc := range calls {
			for _, failOpen := range []bool{false, true} {
				name := tg.name + "/" + tc.name + "/closed"
				if failOpen {
					name = tg.name + "/" + tc.name + "/open"
				}
				t.Run(name, func(t *testing.T) {
					var failures []error
					c := newClient(t, tg.url(t), client.Options{FailOpen: failOpen, OnFailure: func(err error) { failures = append(failures, err) }})
					got, err := tc.call(c)
					if failOpen && tc.open != nil {
						if err != nil || !reflect.DeepEqual(got, tc.open) {
							t.Fatalf("got %+v, %v; want %+v and no error", got, err, tc.open)
						}
						if len(failures) != 1 || !errors.Is(failures[0], sluice.ErrUnavailable) {
							t.Errorf("OnFailure saw %v, want one error matching sluice.ErrUnavailable", failures)
						}
						return
					}
					if !errors.Is(err, sluice.ErrUnavailable) {
						t.Fatalf("error %v, want one matching sluice.ErrUnavailable", err)
					}
					if len(failures) != 0 {
						t.Errorf("OnFailure saw %v, want nothing", failures)
					}
				})
			}
		}
	}
}

func TestCanceledNeverFailsOpen(t *testing.T) {
	f, srv := startFake(t, "")
	f.hang = true
	c := newClient(t, srv.URL, client.Options{FailOpen: true, OnFailure: func(err error) { t.Errorf("OnFailure(%v)", err) }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Check(ctx, "api", "k", 1)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, sluice.ErrUnavailable) {
		t.Fatalf("Check: %v, want an error matching context.Canceled and sluice.ErrUnavailable", err)
	}
}

// TestTimeout lets a hanging server run into the per-call deadline.
func TestTimeout(t *testing.T) {
	tests := []struct {
		name     string
		failOpen bool
	}{
		{"fail closed", false},
		{"fail open", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, srv := startFake(t, "")
			f.hang = true
			c := newClient(t, srv.URL, client.Options{Timeout: 20 * time.Millisecond, FailOpen: tt.failOpen})
			d, err := c.Check(context.Background(), "api", "k", 1)
			if tt.failOpen {
				if err != nil || !d.Allowed {
					t.Fatalf("Check: %+v, %v; want allowed", d, err)
				}
				return
			}
			if !errors.Is(err, sluice.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Check: %v, want an error matching sluice.ErrUnavailable and context.DeadlineExceeded", err)
			}
		})
	}
}

// deadlineRecorder records the deadline of each request instead of sending it.
type deadlineRecorder struct {
	mu        sync.Mutex
	deadlines []time.Time // zero: none
}

func (d *deadlineRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	dl, _ := r.Context().Deadline()
	d.mu.Lock()
	d.deadlines = append(d.deadlines, dl)
	d.mu.Unlock()
	return nil, errors.New("recorded")
}

func TestDeadline(t *testing.T) {
	own := time.Now().Add(time.Hour)
	tests := []struct {
		name    string
		timeout time.Duration
		ctx     func() (context.Context, context.CancelFunc)
		want    func(dl, before, after time.Time) bool // before and after the call
	}{
		{"default 1s", 0, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} },
			func(dl, before, after time.Time) bool { return within(dl, before, after, time.Second) }},
		{"set", 5 * time.Second, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} },
			func(dl, before, after time.Time) bool { return within(dl, before, after, 5*time.Second) }},
		{"none", -1, func() (context.Context, context.CancelFunc) { return context.Background(), func() {} },
			func(dl, _, _ time.Time) bool { return dl.IsZero() }},
		{"the caller's wins", 10 * time.Millisecond, func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), own)
		}, func(dl, _, _ time.Time) bool { return dl.Equal(own) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &deadlineRecorder{}
			c := newClient(t, "http://sluice.invalid", client.Options{HTTPClient: &http.Client{Transport: rec}, Timeout: tt.timeout})
			ctx, cancel := tt.ctx()
			defer cancel()
			before := time.Now()
			if _, err := c.Check(ctx, "api", "k", 1); !errors.Is(err, sluice.ErrUnavailable) {
				t.Fatalf("Check: %v, want the transport's error as sluice.ErrUnavailable", err)
			}
			after := time.Now()
			if len(rec.deadlines) != 1 || !tt.want(rec.deadlines[0], before, after) {
				t.Fatalf("deadlines %v (call from %v to %v)", rec.deadlines, before, after)
			}
		})
	}
}

// within reports whether dl is timeout after a moment from before to after.
func within(dl, before, after time.Time, timeout time.Duration) bool {
	return !dl.Before(before.Add(timeout)) && !dl.After(after.Add(timeout))
}

func TestWithNow(t *testing.T) {
	tests := []struct {
		name    string
		route   string
		call    func(ctx context.Context, c *client.Client) error
		takesAt bool
	}{
		{"Check", "/v1/check", func(ctx context.Context, c *client.Client) error { _, err := c.Check(ctx, "api", "k", 1); return err }, true},
		{"CheckMany", "/v1/check-many", func(ctx context.Context, c *client.Client) error {
			_, err := c.CheckMany(ctx, "api", []string{"k"}, 1)
			return err
		}, true},
		{"CheckAll", "/v1/check-all", func(ctx context.Context, c *client.Client) error {
			_, err := c.CheckAll(ctx, sluice.Item{Policy: "api", Key: "k", Cost: 1})
			return err
		}, true},
		{"Peek", "/v1/peek", func(ctx context.Context, c *client.Client) error { _, err := c.Peek(ctx, "api", "k"); return err }, true},
		{"Forecast", "/v1/forecast", func(ctx context.Context, c *client.Client) error {
			_, err := c.Forecast(ctx, "api", "k", 1)
			return err
		}, true},
		{"Refund", "/v1/refund", func(ctx context.Context, c *client.Client) error { return c.Refund(ctx, "api", "k", 1) }, true},
		{"Settle", "/v1/settle", func(ctx context.Context, c *client.Client) error { return c.Settle(ctx, "api", "k", 2, 1) }, true},
		{"Reset", "/v1/reset", func(ctx context.Context, c *client.Client) error { return c.Reset(ctx, "api", "k") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, srv := startFake(t, "")
			c := newClient(t, srv.URL, client.Options{})
			if err := tt.call(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			if now, sent := f.lastNow(tt.route); sent {
				t.Errorf("without WithNow the call sent now %d", now)
			}
			if err := tt.call(sluice.WithNow(context.Background(), t0+5000), c); err != nil {
				t.Fatal(err)
			}
			now, sent := f.lastNow(tt.route)
			if sent != tt.takesAt || tt.takesAt && now != t0+5000 {
				t.Errorf("with WithNow(t0+5000) the call sent now %d (sent %v), want sent %v", now, sent, tt.takesAt)
			}
		})
	}
}

// TestTimeTravel checks that a pinned instant decides: the bucket refills a token a second.
func TestTimeTravel(t *testing.T) {
	_, srv := startFake(t, "")
	c := newClient(t, srv.URL, client.Options{})
	ctx := sluice.WithNow(context.Background(), t0)
	if d, err := c.Check(ctx, "api", "k", 3); err != nil || !d.Allowed {
		t.Fatalf("first check: %+v, %v", d, err)
	}
	d, err := c.Check(ctx, "api", "k", 1)
	if err != nil || d.Allowed || d.RetryAfterMs != 1000 {
		t.Fatalf("second check: %+v, %v; want denied for 1000 ms", d, err)
	}
	d, err = c.Check(sluice.WithNow(ctx, t0+1000), "api", "k", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("check 1 s later: %+v, %v; want allowed", d, err)
	}
}

func TestConnectionReuse(t *testing.T) {
	var conns atomic.Int32
	f := &fake{lim: newLimiter(t)}
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, client.Options{})

	const workers, calls = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				// Errors as well as decisions must leave the connection reusable.
				policy := "api"
				if i%5 == 0 {
					policy = "missing" // the server answers 404
				}
				if _, err := c.Check(context.Background(), policy, string(rune('a'+w)), 1); err != nil && !errors.Is(err, sluice.ErrUnknownPolicy) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	// Reused connections number about one per caller; a transport that did not reuse them would
	// open one per call (200). A little slack keeps a loaded machine from failing the test.
	if n := conns.Load(); n > 2*workers {
		t.Errorf("%d connections for %d concurrent callers making %d calls, want at most %d", n, workers, workers*calls, 2*workers)
	}
}

func TestBadAnswers(t *testing.T) {
	tests := []struct {
		name string
		body string
		call func(c *client.Client) error
	}{
		{"not json", "nope", func(c *client.Client) error { _, err := c.Check(context.Background(), "api", "k", 1); return err }},
		{"too few decisions", `{"decisions":[]}`, func(c *client.Client) error {
			_, err := c.CheckMany(context.Background(), "api", []string{"a"}, 1)
			return err
		}},
		{"too few items", `{"allowed":true,"decisions":[]}`, func(c *client.Client) error {
			_, err := c.CheckAll(context.Background(), sluice.Item{Policy: "api", Key: "a", Cost: 1})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(tt.body)) }))
			t.Cleanup(srv.Close)
			// A garbled answer is a bug to see, not an outage to paper over: it never fails open.
			c := newClient(t, srv.URL, client.Options{FailOpen: true})
			if err := tt.call(c); err == nil || errors.Is(err, sluice.ErrUnavailable) {
				t.Fatalf("error %v, want one that is not sluice.ErrUnavailable", err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name, url string
		ok        bool
	}{
		{"http", "http://127.0.0.1:8080", true},
		{"https with a prefix and a slash", "https://limits.example/sluice/", true},
		{"no scheme", "127.0.0.1:8080", false},
		{"ftp", "ftp://host", false},
		{"no host", "http://", false},
		{"query", "http://host/?a=b", false},
		{"garbage", "http://[::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client.New(tt.url, client.Options{})
			if (err == nil) != tt.ok {
				t.Fatalf("New(%q): %v, want ok %v", tt.url, err, tt.ok)
			}
		})
	}
}

func TestBaseURLPrefix(t *testing.T) {
	f := &fake{lim: newLimiter(t)}
	mux := http.NewServeMux()
	mux.Handle("/sluice/", http.StripPrefix("/sluice", f))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL+"/sluice/", client.Options{})
	if d, err := c.Check(context.Background(), "api", "k", 1); err != nil || !d.Allowed {
		t.Fatalf("Check through a prefix: %+v, %v", d, err)
	}
}

// TestCostBelowOne: a cost below 1 is refused before anything is sent, naming the field, as
// sluice.Limiter refuses it (the service would read 0 as 1).
func TestCostBelowOne(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, client.Options{FailOpen: true})
	ctx := context.Background()
	tests := []struct {
		name  string
		call  func() error
		field string
	}{
		{"Check 0", func() error { _, err := c.Check(ctx, "api", "k", 0); return err }, "cost"},
		{"Check -1", func() error { _, err := c.Check(ctx, "api", "k", -1); return err }, "cost"},
		{"CheckMany 0", func() error { _, err := c.CheckMany(ctx, "api", []string{"k"}, 0); return err }, "cost"},
		{"CheckAll item 1", func() error {
			_, err := c.CheckAll(ctx, sluice.Item{Policy: "api", Key: "k", Cost: 1}, sluice.Item{Policy: "api", Key: "k"})
			return err
		}, "items[1].cost"},
		{"Forecast 0", func() error { _, err := c.Forecast(ctx, "api", "k", 0); return err }, "cost"},
		{"Refund 0", func() error { return c.Refund(ctx, "api", "k", 0) }, "cost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ie *sluice.InvalidError
			if err := tt.call(); !errors.As(err, &ie) || ie.Field != tt.field || !errors.Is(err, sluice.ErrInvalid) {
				t.Errorf("%v, want an *InvalidError naming %q (and never failed open)", err, tt.field)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests reached the server", n)
	}
}
