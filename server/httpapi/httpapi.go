// Package httpapi is sluice's HTTP front end: the JSON API mirroring the native gRPC API, the
// forward-auth gate for nginx auth_request, Traefik ForwardAuth and Caddy forward_auth, and the
// operational endpoints.
//
//	POST /v1/check        {"policy","key","cost"?,"now"?}     → a decision
//	POST /v1/check-many   {"policy","keys","cost"?,"now"?}    → {"decisions":[…]}
//	POST /v1/check-all    {"items":[{"policy","key","cost"?}],"now"?} → {"allowed","deniedBy","decisions":[…]}
//	POST /v1/peek         {"policy","key","now"?}             → a decision
//	POST /v1/forecast     {"policy","key","cost"?,"now"?}     → {"spendableNow","nextReplenishAt","fullAt"}
//	POST /v1/refund       {"policy","key","cost"?,"now"?}     → {}
//	POST /v1/settle       {"policy","key","reserved","actual","now"?} → {}
//	POST /v1/admit        {"name","key","holder","limit","ttlMs","now"?} → {"allowed","inFlight","limit","retryAfterMs"}
//	POST /v1/heartbeat    {"name","key","holder","ttlMs","now"?}  → {}, or 409 not_held
//	POST /v1/release      {"name","key","holder"}              → {}
//	POST /v1/reset        {"policy","key"}                    → {}
//	PUT  /v1/overrides/{policy}/{key...} {"plan"|"limits","ttlMs"?|"expiresAt"?,"reason"?} → the override stored
//	GET  /v1/overrides/{policy}/{key...}                        → the override, or 404 not_found
//	DELETE /v1/overrides/{policy}/{key...}                      → {"deleted":true}, or 404 not_found
//	GET  /v1/overrides?policy=P&prefix=K&pageToken=T&limit=N     → {"overrides":[…],"nextPageToken"?}
//	GET  /v1/gate/{policy}?key=…&cost=…&denyStatus=…            → 200, or 429 (403 with denyStatus=403, for nginx), with RateLimit fields
//	POST /v1/usage        {"events":[{"stream","key","cost"?,"at"?,"id"?}]} → {"appended"}
//	GET  /v1/streams/{stream}/windows?after=N&limit=M             → {"windows":[…]}
//	GET  /v1/streams/{stream}/decisions?after=N&limit=M           → {"decisions":[…]}
//	GET  /v1/streams/{stream}/decisions/watch?after=N             → Server-Sent Events, one per decision
//	GET  /v1/streams/{stream}/windows/watch?after=N               → Server-Sent Events, one per window
//	POST /v1/streams/{stream}/{kind}/pull {"group","consumer","limit"?,"leaseMs"?} → {"partition","lease","expiresAt",kind:[…]}
//	POST /v1/streams/{stream}/{kind}/ack  {"group","lease","offset"}  → {}
//	GET  /metrics, /healthz, /readyz
//
// The stream routes (stream.go) answer 404 unless Options.Streams is set. {kind} is windows or
// decisions; pull and ack are a consumer group's at-least-once reading (see package stream).
//
// The overrides routes (overrides.go) set, read, delete and list per-key overrides (package
// overrides), all with an admin token. The key is the rest of the path, escaped (%2F for a "/" of
// its own); a body carries neither policy nor key.
//
// A decision is {"allowed","limit","remaining","resetAt","retryAfterMs"}; a decision of a
// composite policy adds "deniedBy" (-1 when allowed) and "parts" (one decision per limit), and
// the decisions of a single limit carry neither. "plan" names the plan the key was checked under,
// and "override":true says its override applied (each omitted when empty). A denial is a decision (200), never an error;
// only the gate answers one with 429. cost defaults to 1, and a cost of 0 (in a body or the gate's
// query) means 1, as on gRPC, where proto3 cannot tell 0 from absent; a negative cost is 400 naming
// the field. now (epoch ms) is refused unless the server allows client time. Reset takes no now:
// forgetting a key does not depend on time.
//
// When the store cannot answer in time, a check is decided by its policy's fail mode. Fail open,
// the decision adds "failOpen":true (its numbers are zero: no limit was consulted), the answer
// carries the header Sluice-Fail-Mode: open, and the gate sends no RateLimit fields. Fail closed,
// the answer is 503 unavailable with "failMode":"closed" in its body and Sluice-Fail-Mode: closed.
//
// Bodies are read strictly: unknown, repeated, null or differently cased members, trailing data,
// bodies over Options.MaxBodyBytes and more than MaxBatch keys or items are 400, and so are
// strings holding invalid UTF-8 or unpaired surrogate escapes (encoding/json would make them
// U+FFFD, so that distinct keys would share a bucket). A body must come as application/json
// (415 otherwise), and with Options.AllowedHosts, a request for another Host is 403. Errors are
// {"error","code"}: invalid_argument and too_large 400, unauthorized 401, host_not_allowed and
// scope_required 403, not_found 404, method_not_allowed 405, lease_lost 409,
// unsupported_media_type 415, internal 500, unimplemented 501, unavailable 503.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/header"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/server/bearer"
	"github.com/sluicehq/sluice/stream"
)

// DefaultMaxBodyBytes is the largest request body read when Options.MaxBodyBytes is 0.
const DefaultMaxBodyBytes = 1 << 20

// Options configure the handler.
type Options struct {
	// BearerTokens are the tokens /v1/* accepts in "Authorization: Bearer …", each with every
	// right; empty means no authentication. Empty tokens never match. /metrics, /healthz and
	// /readyz are always open.
	BearerTokens []string
	// Tokens, when set, are the scoped tokens in force instead of BearerTokens, read on each
	// request so that a reload takes effect at once. A token without the scope a route needs gets
	// 403; reset, refund, settle and the overrides routes need bearer.Admin, the rest bearer.Check
	// (the console's routes included).
	Tokens *bearer.Live
	// GateKeyHeader names the request header the gate takes its key from when the query has no
	// key, such as "X-Api-Key"; empty means the gate falls back to the client address directly.
	GateKeyHeader string
	// TrustedProxies are the peers whose Forwarded or X-Forwarded-For the gate believes (see
	// header.ClientAddr).
	TrustedProxies []netip.Prefix
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// AllowedHosts are the Host header values the handler answers, such as "sluice.internal" (any
	// port) or "127.0.0.1:8080" (that port only), compared without case; others get 403, so that a
	// DNS-rebound web page cannot reach the API. Empty means any host. /healthz and /readyz answer
	// any host, for probes that send an address.
	AllowedHosts []string
	// Streams is stream mode's backend; nil means the stream routes answer 404.
	Streams stream.Backend
	// Console is the operator console, served at /ui/ with its routes under /v1/console/ (each
	// needs a check-scope token); nil means they answer 404.
	Console Console
}

// Console is the operator console the handler serves (package console's *Console).
type Console interface {
	// API answers the routes under /v1/console/. The handler puts them behind a check-scope
	// token and tells them the token's scope (bearer.SessionOf).
	API() http.Handler
	// Assets serves the pages under /ui/, to anyone: they hold no data.
	Assets() http.Handler
}

// Error codes of the {"error","code"} body.
const (
	CodeInvalid          = "invalid_argument"
	CodeNotFound         = "not_found"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
	CodeUnimplemented    = "unimplemented"
	CodeUnauthorized     = "unauthorized"
	CodeTooLarge         = "too_large"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeLeaseLost        = "lease_lost"
	CodeNotHeld          = "not_held"
	CodeForbiddenHost    = "host_not_allowed"
	CodeMediaType        = "unsupported_media_type"
	CodeForbiddenScope   = "scope_required"
)

// ErrorBody is the body of every error answer.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// FailMode is "closed" on a 503 of a check that its policy's fail mode refused because the
	// store could not answer (server.FailedClosed); empty otherwise.
	FailMode string `json:"failMode,omitempty"`
}

// FailModeHeader names the response header that marks a check decided by its policy's fail mode,
// because the store could not answer: "open" on an allowed decision that consulted no limit,
// "closed" on the 503 of a refused one.
const FailModeHeader = "Sluice-Fail-Mode"

type api struct {
	srv    *server.Server
	opts   Options
	tokens *bearer.Live
}

// New returns the HTTP handler of srv.
func New(srv *server.Server, opts Options) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	a := &api{srv: srv, opts: opts, tokens: opts.Tokens}
	if a.tokens == nil && len(opts.BearerTokens) > 0 {
		a.tokens = bearer.NewLive(bearer.Of(opts.BearerTokens...))
	}
	const open, check, admin = bearer.None, bearer.Check, bearer.Admin
	mux := http.NewServeMux()
	methods := map[string][]string{} // the methods of each path, for its 405
	route := func(method, path string, h http.HandlerFunc, need bearer.Scope) {
		var right http.Handler = h
		if need != open {
			right = a.auth(right, need)
		}
		mux.Handle(method+" "+path, right)
		// The method-less pattern catches the other methods, so that they get a JSON 405 too; a
		// path of several methods registers it once.
		if methods[path] == nil {
			var wrong http.Handler = methodNotAllowed(func() []string { return methods[path] })
			if need != open {
				wrong = a.auth(wrong, need)
			}
			mux.Handle(path, wrong)
		}
		methods[path] = append(methods[path], method)
	}
	route("POST", "/v1/check", a.check, check)
	route("POST", "/v1/check-many", a.checkMany, check)
	route("POST", "/v1/check-all", a.checkAll, check)
	route("POST", "/v1/peek", a.peek, check)
	route("POST", "/v1/forecast", a.forecast, check)
	route("POST", "/v1/refund", a.refund, admin)
	route("POST", "/v1/settle", a.settle, admin)
	route("POST", "/v1/admit", a.admit, check)
	route("POST", "/v1/heartbeat", a.heartbeat, check)
	route("POST", "/v1/release", a.release, check)
	route("POST", "/v1/reset", a.reset, admin)
	route("PUT", "/v1/overrides/{policy}/{key...}", a.putOverride, admin)
	route("GET", "/v1/overrides/{policy}/{key...}", a.getOverride, admin)
	route("DELETE", "/v1/overrides/{policy}/{key...}", a.deleteOverride, admin)
	route("GET", "/v1/overrides", a.listOverrides, admin)
	route("GET", "/v1/gate/{policy...}", a.gate, check)
	route("POST", "/v1/usage", a.usage, check)
	route("GET", "/v1/streams/{stream}/windows", a.windows, check)
	route("GET", "/v1/streams/{stream}/decisions", a.decisions, check)
	route("GET", "/v1/streams/{stream}/decisions/watch", a.watchDecisions, check)
	route("GET", "/v1/streams/{stream}/windows/watch", a.watchWindows, check)
	route("POST", "/v1/streams/{stream}/{kind}/pull", a.groupPull, check)
	route("POST", "/v1/streams/{stream}/{kind}/ack", a.groupAck, check)
	if c := opts.Console; c != nil {
		mux.Handle("/v1/console/", a.auth(a.withSession(c.API()), check))
		route("GET", "/ui/", c.Assets().ServeHTTP, open)
		route("GET", "/ui", c.Assets().ServeHTTP, open)
	}
	route("GET", "/metrics", srv.MetricsHandler().ServeHTTP, open)
	route("GET", "/healthz", healthz, open)
	route("GET", "/readyz", a.readyz, open)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &httpError{http.StatusNotFound, CodeNotFound, "httpapi: no route " + r.URL.Path})
	})
	if len(opts.AllowedHosts) == 0 {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" && !hostAllowed(r.Host, opts.AllowedHosts) {
			writeError(w, &httpError{http.StatusForbidden, CodeForbiddenHost,
				fmt.Sprintf("httpapi: Host %q is not one of the allowed hosts", r.Host)})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether host (a Host header: name or address, with or without a port) is
// one of allowed: an entry with a port matches that port only, one without matches any port.
func hostAllowed(host string, allowed []string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1] // an IPv6 address without a port
	}
	name = strings.TrimSuffix(name, ".") // a fully qualified name is the same host
	for _, a := range allowed {
		a = strings.TrimPrefix(strings.TrimSuffix(a, "]"), "[")
		if strings.EqualFold(a, host) || strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// checkContentType accepts a JSON body's media type: application/json or application/*+json,
// with no charset but UTF-8. A browser may send a cross-site form or text/plain without asking
// the server first; it may not send JSON so, so this is what keeps web pages from posting.
func checkContentType(values []string) error {
	if len(values) != 1 {
		return &httpError{http.StatusUnsupportedMediaType, CodeMediaType,
			fmt.Sprintf("httpapi: Content-Type: want one, application/json, got %d", len(values))}
	}
	mt, params, err := mime.ParseMediaType(values[0])
	json := err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
	if cs, ok := params["charset"]; json && ok && !strings.EqualFold(cs, "utf-8") {
		json = false
	}
	if !json {
		return &httpError{http.StatusUnsupportedMediaType, CodeMediaType,
			fmt.Sprintf("httpapi: Content-Type: must be application/json (UTF-8), got %q", values[0])}
	}
	return nil
}

// httpError is an error the handler answers with its own status and code.
type httpError struct {
	status int
	code   string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func invalidf(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, CodeInvalid, "httpapi: " + fmt.Sprintf(format, args...)}
}

// statusOf maps an error to its status and code.
func statusOf(err error) (int, string, string) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, he.code, he.msg
	}
	if errors.Is(err, stream.ErrLeaseLost) { // a conflict with the consumer that took the batch over
		return http.StatusConflict, CodeLeaseLost, err.Error()
	}
	switch server.CodeOf(err) {
	case server.CodeInvalid:
		return http.StatusBadRequest, CodeInvalid, err.Error()
	case server.CodeNotFound:
		return http.StatusNotFound, CodeNotFound, err.Error()
	case server.CodeUnavailable:
		// The store's error names its address and the socket's: a stable message on the wire,
		// the details in the server's (sampled) log.
		return http.StatusServiceUnavailable, CodeUnavailable, "httpapi: " + unavailable(err)
	case server.CodeUnimplemented:
		return http.StatusNotImplemented, CodeUnimplemented, err.Error()
	case server.CodeNotHeld:
		return http.StatusConflict, CodeNotHeld, err.Error()
	}
	// The text of an unexpected error may describe the store's internals: keep it off the wire.
	return http.StatusInternalServerError, CodeInternal, "httpapi: internal error"
}

// unavailable is the stable message of an error of CodeUnavailable.
func unavailable(err error) string {
	if errors.Is(err, sluice.ErrClosed) {
		return "store closed"
	}
	return "store unavailable"
}

func writeError(w http.ResponseWriter, err error) {
	status, code, msg := statusOf(err)
	body := ErrorBody{Error: msg, Code: code}
	if server.FailedClosed(err) {
		body.FailMode = "closed"
		w.Header().Set(FailModeHeader, "closed")
	}
	writeJSON(w, status, body)
}

// markFailOpen sets FailModeHeader when any of ds was decided by the fail mode.
func markFailOpen(w http.ResponseWriter, ds ...sluice.Decision) {
	for _, d := range ds {
		if d.FailOpen {
			w.Header().Set(FailModeHeader, "open")
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may have gone; nothing to do about it
}

// methodNotAllowed answers a method its path has no route for; methods are the path's, read at
// request time so that every route registered for the path counts.
func methodNotAllowed(methods func() []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range methods() {
			allow = append(allow, m)
			if m == "GET" {
				allow = append(allow, "HEAD")
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, &httpError{http.StatusMethodNotAllowed, CodeMethodNotAllowed,
			fmt.Sprintf("httpapi: %s %s: use %s", r.Method, r.URL.Path, strings.Join(methods(), " or "))})
	})
}

func (a *api) auth(next http.Handler, need bearer.Scope) http.Handler {
	if a.tokens == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch a.tokens.Authorize(bearerToken(r.Header.Get("Authorization")), need) {
		case bearer.Unauthenticated:
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			writeError(w, &httpError{http.StatusUnauthorized, CodeUnauthorized, "httpapi: a valid bearer token is required"})
		case bearer.Forbidden:
			writeError(w, &httpError{http.StatusForbidden, CodeForbiddenScope,
				fmt.Sprintf("httpapi: %s %s needs a token of scope %s", r.Method, r.URL.Path, need)})
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// withSession tells h whether tokens are asked and the scope of the request's (bearer.SessionOf).
func (a *api) withSession(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := bearer.Session{Scope: bearer.Admin}
		if set := a.tokens.Load(); set != nil {
			s = bearer.Session{Auth: true, Scope: set.Lookup(bearerToken(r.Header.Get("Authorization")))}
		}
		h.ServeHTTP(w, r.WithContext(bearer.WithSession(r.Context(), s)))
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header, "" if none.
func bearerToken(header string) string {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// body reads the request body, at most MaxBodyBytes of it.
func (a *api) body(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if err := checkContentType(r.Header.Values("Content-Type")); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opts.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, &httpError{http.StatusBadRequest, CodeTooLarge,
			fmt.Sprintf("httpapi: body: larger than %d bytes", a.opts.MaxBodyBytes)}
	}
	if err != nil {
		return nil, invalidf("body: %v", err)
	}
	return data, nil
}

// decision is a sluice.Decision on the wire: deniedBy and parts only for a decision with parts,
// so that a single limit answers just the five numbers, and failOpen, plan and override only when
// set.
type decision struct {
	Allowed      bool       `json:"allowed"`
	Limit        int64      `json:"limit"`
	Remaining    int64      `json:"remaining"`
	ResetAt      int64      `json:"resetAt"`
	RetryAfterMs int64      `json:"retryAfterMs"`
	DeniedBy     *int       `json:"deniedBy,omitempty"`
	Parts        []decision `json:"parts,omitempty"`
	FailOpen     bool       `json:"failOpen,omitempty"`
	Plan         string     `json:"plan,omitempty"`
	Override     bool       `json:"override,omitempty"`
}

func wire(d sluice.Decision) decision {
	out := decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, ResetAt: d.ResetAt, RetryAfterMs: d.RetryAfterMs,
		FailOpen: d.FailOpen, Plan: d.Plan, Override: d.Override}
	if len(d.Parts) > 0 {
		by := d.DeniedBy
		out.DeniedBy = &by
		out.Parts = wireAll(d.Parts)
	}
	return out
}

func wireAll(ds []sluice.Decision) []decision {
	out := make([]decision, len(ds))
	for i, d := range ds {
		out[i] = wire(d)
	}
	return out
}

func (a *api) check(w http.ResponseWriter, r *http.Request) {
	req, err := a.decodeCheck(w, r, true, true)
	if err != nil {
		writeError(w, err)
		return
	}
	d, err := a.srv.Check(r.Context(), req.Now, req.Policy, req.Key, req.Cost)
	if err != nil {
		writeError(w, err)
		return
	}
	markFailOpen(w, d)
	writeJSON(w, http.StatusOK, wire(d))
}

func (a *api) decodeCheck(w http.ResponseWriter, r *http.Request, withCost, withNow bool) (checkRequest, error) {
	data, err := a.body(w, r)
	if err != nil {
		return checkRequest{}, err
	}
	return decodeCheck(data, withCost, withNow)
}

func (a *api) checkMany(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := decodeCheckMany(data)
	if err != nil {
		writeError(w, err)
		return
	}
	ds, err := a.srv.CheckMany(r.Context(), req.Now, req.Policy, req.Keys, req.Cost)
	if err != nil {
		writeError(w, err)
		return
	}
	markFailOpen(w, ds...)
	writeJSON(w, http.StatusOK, struct {
		Decisions []decision `json:"decisions"`
	}{wireAll(ds)})
}

func (a *api) checkAll(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := decodeCheckAll(data)
	if err != nil {
		writeError(w, err)
		return
	}
	d, err := a.srv.CheckAll(r.Context(), req.Now, req.Items)
	if err != nil {
		writeError(w, err)
		return
	}
	markFailOpen(w, d)
	writeJSON(w, http.StatusOK, struct {
		Allowed   bool       `json:"allowed"`
		DeniedBy  int        `json:"deniedBy"`
		Decisions []decision `json:"decisions"`
		FailOpen  bool       `json:"failOpen,omitempty"`
	}{d.Allowed, d.DeniedBy, wireAll(d.Parts), d.FailOpen})
}

func (a *api) peek(w http.ResponseWriter, r *http.Request) {
	req, err := a.decodeCheck(w, r, false, true)
	if err != nil {
		writeError(w, err)
		return
	}
	d, err := a.srv.Peek(r.Context(), req.Now, req.Policy, req.Key)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, wire(d))
}

func (a *api) forecast(w http.ResponseWriter, r *http.Request) {
	req, err := a.decodeCheck(w, r, true, true)
	if err != nil {
		writeError(w, err)
		return
	}
	f, err := a.srv.Forecast(r.Context(), req.Now, req.Policy, req.Key, req.Cost)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}

// admit, heartbeat and release are concurrency limits (package concurrency).
func (a *api) admit(w http.ResponseWriter, r *http.Request) {
	req, err := a.decodeSlot(w, r, slotAdmit)
	var ad concurrency.Admission
	if err == nil {
		ad, err = a.srv.Admit(r.Context(), req.Now, req.Name, req.Key, req.Holder, req.Limit, req.TTLMs)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ad)
}

func (a *api) heartbeat(w http.ResponseWriter, r *http.Request) {
	req, err := a.decodeSlot(w, r, slotHeartbeat)
	if err == nil {
		err = a.srv.Heartbeat(r.Context(), req.Now, req.Name, req.Key, req.Holder, req.TTLMs)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (a *api) release(w http.ResponseWriter, r *http.Request) {
	req, err := a.decodeSlot(w, r, slotRelease)
	if err == nil {
		err = a.srv.Release(r.Context(), req.Name, req.Key, req.Holder)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (a *api) decodeSlot(w http.ResponseWriter, r *http.Request, op slotOp) (slotRequest, error) {
	data, err := a.body(w, r)
	if err != nil {
		return slotRequest{}, err
	}
	return decodeSlot(data, op)
}

// settle ends a reservation: it refunds what the work did not use, or debits what it used past it.
func (a *api) settle(w http.ResponseWriter, r *http.Request) {
	data, err := a.body(w, r)
	var req settleRequest
	if err == nil {
		req, err = decodeSettle(data)
	}
	if err == nil {
		err = a.srv.Settle(r.Context(), req.Now, req.Policy, req.Key, req.Reserved, req.Actual)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (a *api) refund(w http.ResponseWriter, r *http.Request) {
	req, err := a.decodeAction(w, r, true)
	if err == nil {
		err = a.srv.Refund(r.Context(), req.Now, req.Policy, req.Key, req.Cost)
	}
	if err == nil {
		a.srv.LogAction("refund", req.Policy, req.Key, req.Reason, "cost", req.Cost)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// decodeAction reads the body of a reset (withCost false) or refund.
func (a *api) decodeAction(w http.ResponseWriter, r *http.Request, withCost bool) (actionRequest, error) {
	data, err := a.body(w, r)
	if err != nil {
		return actionRequest{}, err
	}
	return decodeAction(data, withCost)
}

func (a *api) reset(w http.ResponseWriter, r *http.Request) {
	req, err := a.decodeAction(w, r, false)
	if err == nil {
		err = a.srv.Reset(r.Context(), req.Policy, req.Key)
	}
	if err == nil {
		a.srv.LogAction("reset", req.Policy, req.Key, req.Reason)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// gate answers a forward-auth subrequest: 200 lets the request through, 429 turns it away, and
// both carry the RateLimit fields for the proxy to copy to the client. A fail-open 200 carries
// Sluice-Fail-Mode: open instead: no limit was consulted, so there is nothing to report of one.
func (a *api) gate(w http.ResponseWriter, r *http.Request) {
	policy := r.PathValue("policy")
	p, err := parseGate(r.URL.RawQuery, r.Header, a.opts.GateKeyHeader)
	if err != nil {
		writeError(w, err)
		return
	}
	key := p.key
	if key == "" {
		addr, ok := header.ClientAddr(r, a.opts.TrustedProxies)
		if !ok {
			writeError(w, invalidf("key: none given, and the client address %q is not an address", r.RemoteAddr))
			return
		}
		key = addr.String()
	}
	var d sluice.Decision
	if r.Method == http.MethodHead {
		// A HEAD is a look (a health check, curl -I), never a request to let through: it spends
		// nothing, and answers as a peek, what a check of cost 1 would now.
		d, err = a.srv.Peek(r.Context(), p.now, policy, key)
	} else {
		d, err = a.srv.Check(r.Context(), p.now, policy, key, p.cost)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	at := time.Now()
	if p.now != 0 {
		at = time.UnixMilli(p.now)
	}
	if d.FailOpen {
		markFailOpen(w, d)
	} else if pol, over, err := a.srv.Limiter().Applied(policy, key, p.now); err == nil && over == d.Override && pol.Plan() == d.Plan {
		// The fields describe the limit the key was checked under: its override's, if it has one.
		header.Set(w.Header(), pol, d, at)
	} else if !d.Allowed { // reloaded or overridden anew since the check: its verdict stands
		w.Header().Set("Retry-After", header.RetryAfter(d))
	}
	status := http.StatusOK
	if !d.Allowed {
		status = int(p.deny)
	}
	writeJSON(w, status, wire(d))
}

// gateParams are the gate's parameters: its query's, and the key header's.
type gateParams struct {
	key             string // "" when none was given: the client address is the key
	cost, now, deny int64
}

// parseGate reads the gate's query and key header strictly: a query that does not decode (a bad
// escape, a ";"), a parameter given twice or empty, a key header given twice or empty, a key that
// is not UTF-8, are errors naming the parameter. Anything looser would key a caller who meant to
// name a key on its address instead, sharing one bucket with everyone behind its proxy.
func parseGate(rawQuery string, h http.Header, keyHeader string) (gateParams, error) {
	p := gateParams{cost: 1, deny: http.StatusTooManyRequests}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return p, invalidf("query: %v", err)
	}
	one := func(name string, vs []string, given bool) (string, bool, error) {
		switch {
		case !given:
			return "", false, nil
		case len(vs) > 1:
			return "", false, invalidf("%s: given %d times, at most once", name, len(vs))
		case vs[0] == "":
			return "", false, invalidf("%s: given empty", name)
		}
		return vs[0], true, nil
	}
	for _, n := range []struct {
		name string
		dst  *int64
	}{{"cost", &p.cost}, {"now", &p.now}, {"denyStatus", &p.deny}} {
		vs, given := q[n.name]
		s, ok, err := one(n.name, vs, given)
		if err == nil && ok {
			if *n.dst, err = strconv.ParseInt(s, 10, 64); err != nil {
				err = invalidf("%s: must be an integer, got %q", n.name, s)
			}
		}
		if err != nil {
			return p, err
		}
	}
	p.cost = wireCost(p.cost)
	// nginx's auth_request knows only 2xx, 401 and 403: a gate behind it denies with 403, which
	// nginx's error_page turns back into 429.
	if p.deny != http.StatusTooManyRequests && p.deny != http.StatusForbidden {
		return p, invalidf("denyStatus: must be 429 or 403, got %d", p.deny)
	}
	name := "key"
	vs, given := q["key"]
	if !given && keyHeader != "" {
		name = "header " + keyHeader
		vs = h.Values(keyHeader)
		given = len(vs) > 0
	}
	key, _, err := one(name, vs, given)
	if err != nil {
		return p, err
	}
	if !utf8.ValidString(key) {
		return p, invalidf("%s: is not valid UTF-8", name)
	}
	p.key = key
	return p, nil
}

func queryInt(s, name string, def int64) (int64, error) {
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, invalidf("%s: must be an integer, got %q", name, s)
	}
	return v, nil
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok")
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := a.srv.Ready(ctx); err != nil {
		// The reason may name the store's address; this endpoint is unauthenticated.
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "not ready")
		return
	}
	_, _ = io.WriteString(w, "ok")
}
