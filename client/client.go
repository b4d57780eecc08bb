// Package client is the Go client of a sluice server's HTTP JSON API. Its methods mirror those of
// *sluice.Limiter, and its errors match the same sentinels (sluice.ErrInvalid,
// sluice.ErrUnknownPolicy, sluice.ErrUnavailable) with errors.Is, so code written against the
// embedded library works against the service unchanged; a *Client is also a middleware.Checker.
//
// A Client reuses connections, bounds every call by a deadline, and lets the caller choose what an
// unreachable or failing service means: deny (fail closed, the default) or allow (fail open).
//
// A decision the server's fail mode allowed because its store could not answer has FailOpen set,
// as has one the Client's own FailOpen allowed: either way no limit was consulted. A check the
// server's fail-closed policy refused is an *Error with FailMode "closed".
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
)

// ErrUnauthorized means the server refused the bearer token (or its absence): HTTP 401.
var ErrUnauthorized = errors.New("client: unauthorized")

// DefaultTimeout bounds a call whose context has no deadline.
const DefaultTimeout = time.Second

// Options configure a Client. The zero value is ready to use.
type Options struct {
	// HTTPClient makes the requests. Nil means a Client of its own, whose transport keeps up to
	// 256 idle connections to the server so that concurrent callers reuse them instead of dialing.
	HTTPClient *http.Client
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Timeout bounds each call whose context has no deadline: 0 means DefaultTimeout, a negative
	// value no bound.
	Timeout time.Duration
	// FailOpen decides what Check, CheckMany and CheckAll return when the service cannot answer
	// (unreachable, timed out, or an HTTP 5xx): true, an allowed decision with FailOpen set and a
	// nil error; false, an error matching sluice.ErrUnavailable. Peek, Forecast, Refund and Reset admit nothing, so
	// they always return the error. A call whose context the caller canceled never fails open.
	FailOpen bool
	// OnFailure, if set, is told of every failure that FailOpen turned into an allowed decision,
	// so that an outage is not silent.
	OnFailure func(error)
}

// Client calls a sluice server. It is safe for concurrent use.
type Client struct {
	base string // scheme://host[/prefix], without a trailing slash
	hc   *http.Client
	opts Options
}

// New returns a Client of the server at baseURL, such as "http://127.0.0.1:8080".
func New(baseURL string, opts Options) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("client: base URL %q: want http:// or https:// and a host", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: base URL %q: must have no query or fragment", baseURL)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: newTransport()}
	}
	return &Client{base: strings.TrimRight(u.String(), "/"), hc: hc, opts: opts}, nil
}

// newTransport is http.DefaultTransport with room to keep a connection per concurrent caller:
// the default keeps 2 idle connections per host, so a busy client would dial and close the rest.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	return t
}

// Close closes the idle connections of the Client's own transport. The Client stays usable.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// The bodies of the routes. The API reads them strictly (an unknown member is a 400), so each
// route gets exactly its members; now is left out unless the caller pinned an instant.
type (
	keyRequest struct {
		Policy string `json:"policy"`
		Key    string `json:"key"`
		Cost   *int64 `json:"cost,omitempty"` // sent wherever the route takes one: absent reads as 1
		Now    int64  `json:"now,omitempty"`
	}
	manyRequest struct {
		Policy string   `json:"policy"`
		Keys   []string `json:"keys"`
		Cost   int64    `json:"cost"`
		Now    int64    `json:"now,omitempty"`
	}
	allRequest struct {
		Items []sluice.Item `json:"items"`
		Now   int64         `json:"now,omitempty"`
	}
	slotRequest struct {
		Name   string `json:"name"`
		Key    string `json:"key"`
		Holder string `json:"holder"`
		Limit  int64  `json:"limit,omitempty"`
		TTLMs  int64  `json:"ttlMs,omitempty"`
		Now    int64  `json:"now,omitempty"`
	}
	settleRequest struct {
		Policy   string `json:"policy"`
		Key      string `json:"key"`
		Reserved int64  `json:"reserved"`
		Actual   int64  `json:"actual"`
		Now      int64  `json:"now,omitempty"`
	}
)

// Check consumes cost for key under the named policy, as sluice.Limiter.Check. An instant set with
// sluice.WithNow on ctx is sent along (the server must run with --allow-client-time).
func (c *Client) Check(ctx context.Context, policy, key string, cost int64) (sluice.Decision, error) {
	if err := checkCost("cost", cost); err != nil {
		return sluice.Decision{}, err
	}
	var d sluice.Decision
	err := c.call(ctx, "/v1/check", keyRequest{Policy: policy, Key: key, Cost: &cost, Now: sluice.NowFrom(ctx)}, &d)
	if err != nil {
		if c.failOpen(ctx, err) {
			return allowed(), nil
		}
		return sluice.Decision{}, err
	}
	normalize(&d)
	return d, nil
}

// CheckMany checks each key independently under the named policy, as sluice.Limiter.CheckMany.
func (c *Client) CheckMany(ctx context.Context, policy string, keys []string, cost int64) ([]sluice.Decision, error) {
	if err := checkCost("cost", cost); err != nil {
		return nil, err
	}
	var resp struct {
		Decisions []sluice.Decision `json:"decisions"`
	}
	err := c.call(ctx, "/v1/check-many", manyRequest{Policy: policy, Keys: orEmpty(keys), Cost: cost, Now: sluice.NowFrom(ctx)}, &resp)
	if err == nil && len(resp.Decisions) != len(keys) {
		err = fmt.Errorf("client: /v1/check-many answered %d decisions for %d keys", len(resp.Decisions), len(keys))
	}
	if err != nil {
		if c.failOpen(ctx, err) {
			out := make([]sluice.Decision, len(keys))
			for i := range out {
				out[i] = allowed()
			}
			return out, nil
		}
		return nil, err
	}
	for i := range resp.Decisions {
		normalize(&resp.Decisions[i])
	}
	return resp.Decisions, nil
}

// CheckAll checks every item together, all or nothing, as sluice.Limiter.CheckAll: Parts holds one
// decision per item and DeniedBy is the index of the item that denied.
func (c *Client) CheckAll(ctx context.Context, items ...sluice.Item) (sluice.Decision, error) {
	for i, it := range items {
		if err := checkCost(fmt.Sprintf("items[%d].cost", i), it.Cost); err != nil {
			return sluice.Decision{}, err
		}
	}
	var resp struct {
		Allowed   bool              `json:"allowed"`
		DeniedBy  *int              `json:"deniedBy"`
		Decisions []sluice.Decision `json:"decisions"`
		FailOpen  bool              `json:"failOpen"`
	}
	err := c.call(ctx, "/v1/check-all", allRequest{Items: orEmpty(items), Now: sluice.NowFrom(ctx)}, &resp)
	if err == nil && len(resp.Decisions) != len(items) {
		err = fmt.Errorf("client: /v1/check-all answered %d decisions for %d items", len(resp.Decisions), len(items))
	}
	if err != nil {
		if c.failOpen(ctx, err) {
			d := allowed()
			d.Parts = make([]sluice.Decision, len(items))
			for i := range d.Parts {
				d.Parts[i] = allowed()
			}
			return d, nil
		}
		return sluice.Decision{}, err
	}
	for i := range resp.Decisions {
		normalize(&resp.Decisions[i])
	}
	// The route answers the items' decisions; folding them as the Limiter did restores limit,
	// remaining, resetAt and retryAfterMs of the binding item. The server's verdict stands.
	d := sluice.Combine(resp.Decisions)
	d.Allowed = resp.Allowed
	if resp.DeniedBy != nil {
		d.DeniedBy = *resp.DeniedBy
	}
	if d.Allowed {
		d.DeniedBy = -1
	}
	d.FailOpen = d.FailOpen || resp.FailOpen
	return d, nil
}

// Peek reports key's state under the named policy without consuming, as sluice.Limiter.Peek.
func (c *Client) Peek(ctx context.Context, policy, key string) (sluice.Decision, error) {
	var d sluice.Decision
	if err := c.call(ctx, "/v1/peek", keyRequest{Policy: policy, Key: key, Now: sluice.NowFrom(ctx)}, &d); err != nil {
		return sluice.Decision{}, err
	}
	normalize(&d)
	return d, nil
}

// Forecast projects key's capacity for checks of cost, as sluice.Limiter.Forecast.
func (c *Client) Forecast(ctx context.Context, policy, key string, cost int64) (sluice.Forecast, error) {
	if err := checkCost("cost", cost); err != nil {
		return sluice.Forecast{}, err
	}
	var f sluice.Forecast
	if err := c.call(ctx, "/v1/forecast", keyRequest{Policy: policy, Key: key, Cost: &cost, Now: sluice.NowFrom(ctx)}, &f); err != nil {
		return sluice.Forecast{}, err
	}
	return f, nil
}

// Refund gives cost units back to key under the named policy, as sluice.Limiter.Refund.
func (c *Client) Refund(ctx context.Context, policy, key string, cost int64) error {
	if err := checkCost("cost", cost); err != nil {
		return err
	}
	return c.call(ctx, "/v1/refund", keyRequest{Policy: policy, Key: key, Cost: &cost, Now: sluice.NowFrom(ctx)}, nil)
}

// Settle ends a reservation of reserved units with what the work cost, actual, as
// sluice.Limiter.Settle: it refunds the difference or debits the excess.
func (c *Client) Settle(ctx context.Context, policy, key string, reserved, actual int64) error {
	return c.call(ctx, "/v1/settle", settleRequest{Policy: policy, Key: key, Reserved: reserved, Actual: actual, Now: sluice.NowFrom(ctx)}, nil)
}

// Admit takes one of limit concurrency slots of (name, key) for holder until its lease of ttlMs
// ends, or renews the slot holder holds (package concurrency). It never fails open: a failure is
// the caller's to decide on.
func (c *Client) Admit(ctx context.Context, name, key, holder string, limit, ttlMs int64) (concurrency.Admission, error) {
	var a concurrency.Admission
	err := c.call(ctx, "/v1/admit", slotRequest{Name: name, Key: key, Holder: holder, Limit: limit, TTLMs: ttlMs, Now: sluice.NowFrom(ctx)}, &a)
	return a, err
}

// Heartbeat extends holder's lease of a slot of (name, key) to ttlMs from now; an error matching
// concurrency.ErrNotHeld means the lease ran out, and the holder must stop or Admit again.
func (c *Client) Heartbeat(ctx context.Context, name, key, holder string, ttlMs int64) error {
	return c.call(ctx, "/v1/heartbeat", slotRequest{Name: name, Key: key, Holder: holder, TTLMs: ttlMs, Now: sluice.NowFrom(ctx)}, nil)
}

// Release frees holder's slot of (name, key).
func (c *Client) Release(ctx context.Context, name, key, holder string) error {
	return c.call(ctx, "/v1/release", slotRequest{Name: name, Key: key, Holder: holder}, nil)
}

// Reset forgets key under the named policy, as sluice.Limiter.Reset. Reset takes no instant, so an
// instant set with sluice.WithNow is not sent.
func (c *Client) Reset(ctx context.Context, policy, key string) error {
	return c.call(ctx, "/v1/reset", keyRequest{Policy: policy, Key: key}, nil)
}

// orEmpty sends a nil slice as [], which the API reads as no keys or items rather than refusing a null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// allowed is the decision of a check that failed open: it knows no limit, so Limit is 0.
func allowed() sluice.Decision { return sluice.Decision{Allowed: true, DeniedBy: -1, FailOpen: true} }

// normalize restores DeniedBy -1 on allowed decisions, in case a server left the field out.
func normalize(d *sluice.Decision) {
	if d.Allowed {
		d.DeniedBy = -1
	}
	for i := range d.Parts {
		normalize(&d.Parts[i])
	}
}

// failOpen reports whether a failed check should be answered as allowed, telling OnFailure if so.
func (c *Client) failOpen(ctx context.Context, err error) bool {
	if !c.opts.FailOpen || !errors.Is(err, sluice.ErrUnavailable) || errors.Is(ctx.Err(), context.Canceled) {
		return false
	}
	if c.opts.OnFailure != nil {
		c.opts.OnFailure(err)
	}
	return true
}

// maxBody bounds what the client reads of an answer: a check-many of the server's 1000 keys is
// well below it.
const maxBody = 8 << 20

// call posts req to path and decodes a 2xx answer into out (if not nil), or maps the error.
func (c *Client) call(ctx context.Context, path string, req, out any) error {
	return c.send(ctx, http.MethodPost, path, req, out)
}

// send is call by any method: req nil sends no body. Errors name path without its query.
func (c *Client) send(ctx context.Context, method, path string, req, out any) error {
	target := c.base + path
	path, _, _ = strings.Cut(path, "?")
	var body io.Reader
	if req != nil {
		data, err := json.Marshal(req)
		if err != nil {
			return fmt.Errorf("client: encoding %s: %w", path, err)
		}
		body = bytes.NewReader(data)
	}
	if _, ok := ctx.Deadline(); !ok && c.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.opts.Timeout)
		defer cancel()
	}
	hreq, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return fmt.Errorf("client: %s: %w", path, err)
	}
	if req != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	hreq.Header.Set("Accept", "application/json")
	if c.opts.Token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		// Unreachable, refused, reset or timed out: the service could not answer.
		return &Error{Path: path, Message: err.Error(), Err: err}
	}
	defer func() {
		// Reading to EOF lets the transport reuse the connection.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
		resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return errorFrom(path, resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(out); err != nil {
		return fmt.Errorf("client: decoding the answer of %s: %w", path, err)
	}
	return nil
}

// Stream opens a long-lived GET of path under the base URL, such as
// "/v1/streams/api/decisions/watch?after=7", for an answer that streams (Server-Sent Events),
// with the token and the given header. Unlike the other calls it sets no deadline on the body
// (the Client's http.Client is used without its Timeout): ctx bounds the request for as long as
// its body is read, and start bounds only the wait for the answer, or Options.Timeout does when
// start has no deadline.
//
// An answer of status 200 is returned for the caller to read; closing its body ends the request.
// Any other answer, or none, is the error the other calls return for it: an *Error matching
// sluice.ErrUnavailable for a transport failure (and its cause, such as context.DeadlineExceeded
// when start ended) or a 5xx, ErrUnauthorized for a 401, Code "not_found" for a 404. Error.Path
// is path without its query.
func (c *Client) Stream(ctx, start context.Context, path string, header http.Header) (*http.Response, error) {
	route, _, _ := strings.Cut(path, "?")
	if _, ok := start.Deadline(); !ok && c.opts.Timeout > 0 {
		var cancel context.CancelFunc
		start, cancel = context.WithTimeout(start, c.opts.Timeout)
		defer cancel()
	}
	// The request lives with ctx; start may cut it only until the answer comes.
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(start, func() { cancel(context.Cause(start)) })
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		stop()
		cancel(nil)
		return nil, fmt.Errorf("client: %s: %w", route, err)
	}
	for name, values := range header {
		req.Header[name] = values
	}
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	hc := *c.hc
	hc.Timeout = 0 // it would cut the body
	resp, err := hc.Do(req)
	if !stop() {
		// start ended before the answer came (or as it came): it is too late either way.
		if err == nil {
			resp.Body.Close()
		}
		cause := context.Cause(start)
		cancel(cause)
		return nil, &Error{Path: route, Message: cause.Error(), Err: cause}
	}
	if err != nil {
		cancel(nil)
		return nil, &Error{Path: route, Message: err.Error(), Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		err := errorFrom(route, resp)
		resp.Body.Close()
		cancel(nil)
		return nil, err
	}
	resp.Body = cancelingBody{resp.Body, cancel}
	return resp, nil
}

// cancelingBody is a streamed answer's body: closing it also releases its request's context.
type cancelingBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b cancelingBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

// Error is a call that failed at the server or on the way to it. It matches sluice.ErrUnavailable
// (transport failures and 5xx answers), sluice.ErrUnknownPolicy (404) or ErrUnauthorized (401)
// with errors.Is; a transport failure also matches its cause, such as context.DeadlineExceeded.
// Bad input (400) is returned as a *sluice.InvalidError instead.
type Error struct {
	// Path is the route called, such as "/v1/check".
	Path string
	// Status is the HTTP status, or 0 when no answer came.
	Status int
	// Code is the error code of the answer ("not_found", "unavailable", …), or "" when none.
	Code string
	// Message is the server's message, or the transport's.
	Message string
	// FailMode is "closed" when the server refused a check because its store could not answer and
	// the policy fails closed (a 503 whose body says "failMode":"closed"); "" otherwise.
	FailMode string
	// Err is what the error matches besides what Status 0 implies: the cause of a transport
	// failure (such as context.DeadlineExceeded), or the sentinel of the answer's code
	// (sluice.ErrUnknownPolicy, ErrUnauthorized, sluice.ErrUnavailable, ...); nil when none. It is
	// exported so that a reader of the server's streams (client/enforce) reports their failures
	// as this same type.
	Err error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return "client: " + e.Path + ": " + e.Message
	}
	return fmt.Sprintf("client: %s: %d %s: %s", e.Path, e.Status, e.Code, e.Message)
}

// Unwrap returns the sentinels e matches: a transport failure (Status 0) is
// sluice.ErrUnavailable and its cause.
func (e *Error) Unwrap() []error {
	switch {
	case e.Status == 0 && e.Err != nil:
		return []error{sluice.ErrUnavailable, e.Err}
	case e.Status == 0:
		return []error{sluice.ErrUnavailable}
	case e.Err != nil:
		return []error{e.Err}
	}
	return nil
}

// errorFrom maps a non-2xx answer to the root errors, by its code, falling back to its status.
func errorFrom(path string, resp *http.Response) error {
	var body struct {
		Error    string `json:"error"`
		Code     string `json:"code"`
		FailMode string `json:"failMode"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(raw, &body) != nil || body.Error == "" {
		// Not the API's error body (a proxy's page, say): the status says all we can trust.
		body.Error = http.StatusText(resp.StatusCode)
	}
	code := body.Code
	if code == "" {
		code = codeOf(resp.StatusCode)
	}
	e := &Error{Path: path, Status: resp.StatusCode, Code: code, Message: body.Error, FailMode: body.FailMode}
	switch {
	case code == "invalid_argument", resp.StatusCode == http.StatusBadRequest:
		// Every 400 is bad input, too_large included: nothing changed, and retrying is useless.
		return invalidFrom(body.Error)
	case code == "not_found":
		e.Err = sluice.ErrUnknownPolicy
	case code == "not_held":
		e.Err = concurrency.ErrNotHeld
	case code == "unauthorized":
		e.Err = ErrUnauthorized
	case code == "unimplemented":
		// A definite answer (the strategy cannot do this), not an outage.
		e.Err = sluice.ErrUnsupported
	case code == "unavailable", resp.StatusCode >= 500:
		e.Err = sluice.ErrUnavailable
	}
	return e
}

// codeOf names the code of a status, for answers that carry none (a proxy's, say).
func codeOf(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_argument"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusNotImplemented:
		return "unimplemented"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	if status >= 500 {
		return "internal"
	}
	return ""
}

// invalidFrom rebuilds the *sluice.InvalidError a server reported as the limiter's
// "sluice: invalid <field>: <reason>" or the API's "httpapi: <field>: <reason>", or one of Field
// "request" when the message has another form.
func invalidFrom(msg string) *sluice.InvalidError {
	for _, prefix := range []string{"sluice: invalid ", "httpapi: "} {
		if rest, ok := strings.CutPrefix(msg, prefix); ok {
			if field, reason, ok := strings.Cut(rest, ": "); ok && simpleField(field) {
				return &sluice.InvalidError{Field: field, Reason: reason}
			}
		}
	}
	return &sluice.InvalidError{Field: "request", Reason: msg}
}

// simpleField reports whether s reads as a wire field name, such as "cost" or "items[1].key".
func simpleField(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '[' || c == ']' || c == '_':
		default:
			return false
		}
	}
	return true
}

// checkCost refuses a cost below 1 before sending it, as sluice.Limiter does: the service reads a
// cost of 0 as 1 (a proto3 field cannot tell 0 from absent), which a Go caller would not expect.
// The ceiling is the policy's, which only the service knows.
func checkCost(field string, cost int64) error {
	if cost < 1 {
		return &sluice.InvalidError{Field: field, Reason: fmt.Sprintf("must be at least 1, got %d", cost)}
	}
	return nil
}
