package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/header"
)

const (
	// maxRequestBody bounds a chat request: the proxy reads it whole to estimate its cost.
	maxRequestBody = 1 << 20
	// maxAnswerBody bounds an answer: the proxy reads it whole to find its usage.
	maxAnswerBody = 16 << 20
)

// modelLimits is one row of the limits table: a model's budgets per client key.
type modelLimits struct {
	Name string
	// RPM is requests per minute, over a sliding minute.
	RPM int64
	// TPM is tokens per minute, the refill rate of a token bucket.
	TPM int64
}

// defaultLimits is the table used when no --model is given.
var defaultLimits = []modelLimits{
	{Name: "small", RPM: 60, TPM: 10_000},
	{Name: "large", RPM: 10, TPM: 2_000},
}

// policy is the model's sluice policy: both limits in one, so that one check takes a request and
// the estimated tokens together, or neither.
//
// Requests are counted by a sliding window log, whose Retry-After is exact (a client that waits it
// out passes) at the price of one entry per distinct instant in the minute, at most RPM of them.
// Tokens go through a token bucket holding burst × TPM, refilled at TPM a minute: a key can spend
// a burst at once and then its rate, and a debt is paid back at that rate.
func (m modelLimits) policy(burst float64) (*sluice.Policy, error) {
	return sluice.NewPolicy(m.Name,
		sluice.Limit{Name: "requests", Unit: sluice.UnitRequest,
			Strategy: sluice.SlidingWindowLog{Limit: float64(m.RPM), WindowMs: 60_000}},
		sluice.Limit{Name: "tokens",
			Strategy: sluice.TokenBucket{Capacity: math.Floor(burst * float64(m.TPM)), RefillPerSec: float64(m.TPM) / 60}},
	)
}

// model is a served model: its limits and what the proxy counted for it.
type model struct {
	modelLimits
	policy *sluice.Policy
	// deniedBy counts 429s by the limit that denied: requests, then tokens.
	deniedBy                 [2]atomic.Uint64
	refunded, debited        atomic.Int64
	settleErrs, upstreamErrs atomic.Uint64
}

// Proxy enforces each model's budgets per client key in front of a chat completions API.
type Proxy struct {
	lim    *sluice.Limiter
	models map[string]*model
	// upstream is the chat completions URL of the model server.
	upstream string
	// upstreamKey, when set, is sent upstream as the bearer token; the client's key never is.
	upstreamKey string
	client      *http.Client
	// defaultMax is what a request without max_tokens reserves for its answer.
	defaultMax int64
	logf       func(format string, args ...any)
	// now gives the instant of every decision (epoch ms). Nil means the store's clock; only the
	// demo and the tests set it, so that no request can choose its own instant.
	now func() int64
}

// proxyConfig is what newProxy needs beside the limiter.
type proxyConfig struct {
	Limits      []modelLimits
	Burst       float64
	Upstream    string // the model server's base URL, without /v1
	UpstreamKey string
	Client      *http.Client
	DefaultMax  int64
	Logf        func(format string, args ...any)
}

// newProxy builds the proxy and a limiter over store holding one policy per model.
func newProxy(store sluice.Store, cfg proxyConfig) (*Proxy, error) {
	if cfg.DefaultMax < 1 || cfg.DefaultMax > maxMaxTokens {
		return nil, fmt.Errorf("llm-proxy: the default max tokens must be from 1 to %d, got %d", maxMaxTokens, cfg.DefaultMax)
	}
	if !(cfg.Burst > 0) || math.IsInf(cfg.Burst, 0) {
		return nil, fmt.Errorf("llm-proxy: the burst multiplier must be above 0, got %v", cfg.Burst)
	}
	p := &Proxy{
		models:      make(map[string]*model, len(cfg.Limits)),
		upstream:    strings.TrimSuffix(cfg.Upstream, "/") + "/v1/chat/completions",
		upstreamKey: cfg.UpstreamKey,
		client:      cfg.Client,
		defaultMax:  cfg.DefaultMax,
		logf:        cfg.Logf,
	}
	if p.client == nil {
		p.client = &http.Client{Timeout: 2 * time.Minute}
	}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	var policies []*sluice.Policy
	for _, l := range cfg.Limits {
		pol, err := l.policy(cfg.Burst)
		if err != nil {
			return nil, fmt.Errorf("llm-proxy: model %q: %w", l.Name, err)
		}
		if _, dup := p.models[l.Name]; dup {
			return nil, fmt.Errorf("llm-proxy: model %q is listed twice", l.Name)
		}
		p.models[l.Name] = &model{modelLimits: l, policy: pol}
		policies = append(policies, pol)
	}
	if len(policies) == 0 {
		return nil, errors.New("llm-proxy: no model to serve")
	}
	lim, err := sluice.New(store, policies...)
	if err != nil {
		return nil, fmt.Errorf("llm-proxy: %w", err)
	}
	p.lim = lim
	return p, nil
}

// Handler serves the chat API and GET /stats.
func (p *Proxy) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", p.chat)
	mux.HandleFunc("GET /stats", p.stats)
	return mux
}

// instant is the instant to decide at: p.now's, or 0 for the store's clock.
func (p *Proxy) instant() int64 {
	if p.now == nil {
		return 0
	}
	return p.now()
}

// at pins ctx to the instant now, unless it is 0.
func at(ctx context.Context, now int64) context.Context {
	if now == 0 {
		return ctx
	}
	return sluice.WithNow(ctx, now)
}

// chat checks a request against its model's budgets, forwards it and settles what it cost.
func (p *Proxy) chat(w http.ResponseWriter, r *http.Request) {
	apiKey, ok := clientKey(r)
	if !ok {
		writeProblem(w, problem{Status: http.StatusUnauthorized,
			Detail: "send your API key as Authorization: Bearer <key> or X-Api-Key: <key>"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		status := http.StatusBadRequest
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			status = http.StatusRequestEntityTooLarge
		}
		writeProblem(w, problem{Status: status, Detail: "the request body could not be read"})
		return
	}
	req, fwd, err := parseChatRequest(body)
	if err != nil {
		writeProblem(w, problem{Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}
	m, ok := p.models[req.Model]
	switch {
	case !ok:
		writeProblem(w, problem{Status: http.StatusNotFound, Detail: fmt.Sprintf("model %q is not served here", req.Model)})
		return
	case req.Stream:
		// The proxy settles from the usage of a whole answer, which a stream gives only at its end.
		writeProblem(w, problem{Status: http.StatusBadRequest, Model: m.Name, Detail: "stream is not supported by this proxy"})
		return
	}
	estimate := req.estimate(p.defaultMax)
	if estimate > m.policy.MaxCost() {
		writeProblem(w, problem{Status: http.StatusRequestEntityTooLarge, Model: m.Name, Limit: "tokens",
			Detail: fmt.Sprintf("the request may cost %d tokens, more than the %d that model %q allows a key at once; lower max_tokens",
				estimate, m.policy.MaxCost(), m.Name)})
		return
	}

	// Reserve: one check takes a request and the estimated tokens, or nothing.
	key := tenantKey(apiKey)
	now := p.instant()
	d, err := p.lim.Check(at(r.Context(), now), m.Name, key, estimate)
	if err != nil {
		p.logf("check %s: %v", m.Name, err)
		p.storeFailed(w, err)
		return
	}
	header.Set(w.Header(), m.policy, d, headerTime(now))
	if !d.Allowed {
		limit := m.policy.Limits()[d.DeniedBy].Name
		m.deniedBy[d.DeniedBy].Add(1)
		writeProblem(w, problem{
			Status: http.StatusTooManyRequests, Model: m.Name, Limit: limit, RetryAfterMs: d.RetryAfterMs,
			Detail: fmt.Sprintf("model %q: %s per minute exceeded for this key; retry in %s s", m.Name, limit, header.RetryAfter(d)),
		})
		return
	}

	ans := p.forward(r.Context(), fwd)
	actual := charge(ans, estimate)
	// Settle even when the client has gone: the upstream may have done the work.
	sctx := at(context.WithoutCancel(r.Context()), p.instant())
	if err := p.lim.Settle(sctx, m.Name, key, estimate, actual); err != nil {
		// A store that cannot answer leaves the key charged the reservation only.
		m.settleErrs.Add(1)
		p.logf("settle %s: reserved %d, used %d: %v", m.Name, estimate, actual, err)
	} else if actual < estimate {
		m.refunded.Add(estimate - actual)
	} else {
		m.debited.Add(actual - estimate)
	}

	h := w.Header()
	h.Set("X-Tokens-Reserved", strconv.FormatInt(estimate, 10))
	h.Set("X-Tokens-Charged", strconv.FormatInt(actual, 10))
	if ans.err != nil {
		m.upstreamErrs.Add(1)
		p.logf("upstream %s: %v", m.Name, ans.err)
		writeProblem(w, problem{Status: http.StatusBadGateway, Model: m.Name, Detail: "the model server did not answer"})
		return
	}
	if ans.contentType != "" {
		h.Set("Content-Type", ans.contentType)
	}
	w.WriteHeader(ans.status)
	_, _ = w.Write(ans.body)
}

// answer is what the upstream made of a forwarded request.
type answer struct {
	status      int // 0 when it never answered
	contentType string
	body        []byte
	// err is why the call failed: no answer, or an answer that could not be read whole.
	err error
}

// forward sends body to the upstream and reads its answer.
func (p *Proxy) forward(ctx context.Context, body []byte) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.upstream, bytes.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if p.upstreamKey != "" {
		req.Header.Set("Authorization", "Bearer "+p.upstreamKey)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	a.body, a.err = io.ReadAll(io.LimitReader(resp.Body, maxAnswerBody+1))
	if a.err == nil && len(a.body) > maxAnswerBody {
		a.err = fmt.Errorf("the answer is longer than %d bytes", maxAnswerBody)
	}
	return a
}

// charge is what a call reserved at reserved tokens really cost, Settle's actual:
//
//   - nothing when the upstream did not answer or answered an error: a failed call is not billed,
//     so its reservation goes back whole (the request still counts against RPM: it was made);
//   - the answer's usage when it has one;
//   - the reservation when a successful answer carries no usage, or could not be read whole: the
//     work was done and its cost is unknown, so the estimate stands.
func charge(a answer, reserved int64) int64 {
	switch {
	case a.status < 200 || a.status > 299:
		return 0
	case a.err != nil:
		return reserved
	}
	if total, ok := parseUsage(a.body); ok {
		return total
	}
	return reserved
}

// storeFailed answers a check the store could not decide. The proxy fails closed: an unavailable
// store could be any key's budget exhausted.
func (p *Proxy) storeFailed(w http.ResponseWriter, err error) {
	if errors.Is(err, sluice.ErrUnavailable) {
		w.Header().Set("Retry-After", "1")
		writeProblem(w, problem{Status: http.StatusServiceUnavailable, Detail: "the rate limiter is unavailable"})
		return
	}
	writeProblem(w, problem{Status: http.StatusInternalServerError, Detail: "the rate limit could not be checked"})
}

// clientKey is the client's API key: the bearer token, or else X-Api-Key.
func clientKey(r *http.Request) (string, bool) {
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		if token = strings.TrimSpace(token); token != "" {
			return token, true
		}
	}
	if k := strings.TrimSpace(r.Header.Get("X-Api-Key")); k != "" {
		return k, true
	}
	return "", false
}

// tenantKey is the budget's key for an API key: a hash, so that a shared store never holds a
// secret, and 16 bytes, which the memory store keeps in the key's slot. 64 bits make a collision
// between two keys unlikely and finding one on purpose infeasible.
func tenantKey(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:8])
}

// headerTime is the instant the RateLimit fields are computed for: the decision's.
func headerTime(now int64) time.Time {
	if now == 0 {
		return time.Now()
	}
	return time.UnixMilli(now)
}

// problem is an RFC 9457 application/problem+json body, as package middleware writes them, with
// the model and the limit that denied.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Model  string `json:"model,omitempty"`
	// Limit is the limit that denied: "requests" or "tokens".
	Limit string `json:"limit,omitempty"`
	// RetryAfterMs is the decision's, finer than the Retry-After field.
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

func writeProblem(w http.ResponseWriter, p problem) {
	p.Type, p.Title = "about:blank", http.StatusText(p.Status)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// modelStats is one model in GET /stats.
type modelStats struct {
	RequestsPerMinute int64 `json:"requestsPerMinute"`
	TokensPerMinute   int64 `json:"tokensPerMinute"`
	TokenBurst        int64 `json:"tokenBurst"`
	// Allowed and Throttled are the limiter's counts of the model's checks (Limiter.Stats).
	Allowed   uint64 `json:"allowed"`
	Throttled uint64 `json:"throttled"`
	// ThrottledBy splits Throttled by the limit that denied.
	ThrottledBy    map[string]uint64 `json:"throttledBy"`
	TokensRefunded int64             `json:"tokensRefunded"`
	TokensDebited  int64             `json:"tokensDebited"`
	SettleErrors   uint64            `json:"settleErrors"`
	UpstreamErrors uint64            `json:"upstreamErrors"`
}

// stats answers GET /stats: per model, since this process started.
func (p *Proxy) stats(w http.ResponseWriter, _ *http.Request) {
	out := map[string]modelStats{}
	for name, m := range p.models {
		st, _ := p.lim.Stats(name)
		limits := m.policy.Limits()
		out[name] = modelStats{
			RequestsPerMinute: m.RPM, TokensPerMinute: m.TPM, TokenBurst: m.policy.MaxCost(),
			Allowed: st.Allowed, Throttled: st.Denied,
			ThrottledBy: map[string]uint64{
				limits[0].Name: m.deniedBy[0].Load(),
				limits[1].Name: m.deniedBy[1].Load(),
			},
			TokensRefunded: m.refunded.Load(), TokensDebited: m.debited.Load(),
			SettleErrors: m.settleErrs.Load(), UpstreamErrors: m.upstreamErrs.Load(),
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"models": out})
}
