package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// demoDefaultMax is what the demo's requests without max_tokens reserve.
const demoDefaultMax = 256

// runDemo starts the fake model and the proxy on loopback in this process, with the default
// limits over the store storeURL names, and drives them through a script that checks each way a
// budget moves: the requests limit, the tokens limit, a refund, a debt, a failed call, tenants
// apart, and the counts of GET /stats. It prints "ok: ..." per check and "PASS: N checks"; the
// first failed check is its error.
//
// The proxy decides at the instants of a clock the script moves, so waiting out a minute takes no
// time. The clock starts at the wall clock's now, and the client keys are new on every run, so
// that runs over a shared store neither inherit nor leave anything another run sees.
func runDemo(ctx context.Context, out io.Writer, storeURL string, logf func(string, ...any)) error {
	store, closer, err := openStore(storeURL)
	if err != nil {
		return err
	}
	defer closer.Close()

	fakeURL, stopFake, err := listenLocal((&fakeModel{}).Handler())
	if err != nil {
		return err
	}
	defer stopFake()
	p, err := newProxy(store, proxyConfig{
		Limits: defaultLimits, Burst: 1, Upstream: fakeURL, DefaultMax: demoDefaultMax,
		Client: &http.Client{Timeout: 30 * time.Second}, Logf: logf,
	})
	if err != nil {
		return err
	}
	var clock atomic.Int64
	clock.Store(time.Now().UnixMilli())
	p.now = clock.Load
	proxyURL, stopProxy, err := listenLocal(p.Handler())
	if err != nil {
		return err
	}
	defer stopProxy()

	fmt.Fprintf(out, "fake model on %s, proxy on %s, store %s\n", fakeURL, proxyURL, storeName(storeURL))
	small, large := p.models["small"], p.models["large"]
	for _, m := range []*model{small, large} {
		fmt.Fprintf(out, "  %s: %d requests and %d tokens a minute per key, bursts of %d tokens\n", m.Name, m.RPM, m.TPM, m.policy.MaxCost())
	}
	fmt.Fprintln(out)

	c := &demoClient{ctx: ctx, base: proxyURL, run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	checks := 0
	ok := func(format string, args ...any) {
		checks++
		fmt.Fprintf(out, "  ok: "+format+"\n", args...)
	}
	prompt := countTokens(ask(0)) // every ask(n) has as many words

	// The requests limit: RPM calls pass in one instant, the next is denied for a minute.
	for i := range small.RPM {
		if _, err := c.pass("alice", "small", ask(1), 5); err != nil {
			return fmt.Errorf("request %d of %d: %w", i+1, small.RPM, err)
		}
	}
	ok("small, alice: %d requests in one instant pass, her %d requests a minute", small.RPM, small.RPM)
	r, err := c.denied("alice", "small", ask(1), 5, "requests")
	if err != nil {
		return err
	}
	wantPolicy := fmt.Sprintf(`"small#requests";q=%d;w=60, "small#tokens";q=%d;w=60`, small.RPM, small.policy.MaxCost())
	switch {
	case r.problem.RetryAfterMs != 60_000 || r.header.Get("Retry-After") != "60":
		return fmt.Errorf("alice's denial: retry after %d ms (Retry-After %q), want the minute her first request leaves the window",
			r.problem.RetryAfterMs, r.header.Get("Retry-After"))
	case r.header.Get("RateLimit-Policy") != wantPolicy:
		return fmt.Errorf("alice's denial: RateLimit-Policy %q, want %q", r.header.Get("RateLimit-Policy"), wantPolicy)
	case !strings.HasPrefix(r.header.Get("RateLimit"), `"small#requests";r=0;t=60, "small#tokens";`):
		return fmt.Errorf("alice's denial: RateLimit %q, want no requests left for 60 s", r.header.Get("RateLimit"))
	}
	ok("small, alice: request %d is denied by the requests limit: 429, Retry-After 60, RateLimit %s", small.RPM+1, r.header.Get("RateLimit"))

	// Tenants apart: bob's budget is untouched by alice's.
	r, err = c.pass("bob", "small", ask(1), 5)
	if err != nil {
		return err
	}
	if want := fmt.Sprintf(`"small#requests";r=%d;`, small.RPM-1); !strings.HasPrefix(r.header.Get("RateLimit"), want) {
		return fmt.Errorf("bob: RateLimit %q, want it to start %s", r.header.Get("RateLimit"), want)
	}
	ok("small, bob: allowed at the same instant, from a budget of his own (RateLimit %s)", r.header.Get("RateLimit"))

	clock.Add(60_000)
	if _, err := c.pass("alice", "small", ask(1), 5); err != nil {
		return fmt.Errorf("alice, after Retry-After: %w", err)
	}
	ok("small, alice: allowed again once the 60 s of Retry-After have passed")

	// The tokens limit: a call that takes most of the bucket leaves too little for the next.
	big := large.policy.MaxCost() - prompt - 490 // leaves 490 tokens: a second such call cannot fit
	est := prompt + big
	if r, err = c.pass("carol", "large", ask(big), big); err != nil {
		return err
	}
	if err := r.charged(est, est); err != nil {
		return fmt.Errorf("carol: %w", err)
	}
	if r, err = c.denied("carol", "large", ask(big), big, "tokens"); err != nil {
		return err
	}
	missing := est - (large.policy.MaxCost() - est)
	if err := r.retryFor(missing, large.TPM); err != nil {
		return fmt.Errorf("carol: %w", err)
	}
	ok("large, carol: a %d-token call leaves %d tokens; her next %d-token request is denied by the tokens limit, Retry-After %s (%d ms to refill %d tokens at %d a minute)",
		est, large.policy.MaxCost()-est, est, r.header.Get("Retry-After"), r.problem.RetryAfterMs, missing, large.TPM)

	// A refund: an answer shorter than its reservation gives the rest back.
	if r, err = c.pass("dave", "large", ask(100), big); err != nil {
		return err
	}
	if err := r.charged(est, prompt+100); err != nil {
		return fmt.Errorf("dave: %w", err)
	}
	if _, err = c.pass("dave", "large", ask(big), big); err != nil {
		return fmt.Errorf("dave, after his refund: %w", err)
	}
	ok("large, dave: an answer of %d tokens against %d reserved gives %d back, so his next %d-token request passes where carol's was denied",
		prompt+100, est, est-prompt-100, est)

	// A debit: an answer longer than its reservation puts the key in debt, and its next request
	// waits for the rate to pay the debt back.
	const long = 3000
	if r, err = c.pass("erin", "large", ask(long), 0); err != nil {
		return err
	}
	if err := r.charged(prompt+demoDefaultMax, prompt+long); err != nil {
		return fmt.Errorf("erin: %w", err)
	}
	debt := prompt + long - large.policy.MaxCost()
	if r, err = c.denied("erin", "large", ask(10), 10, "tokens"); err != nil {
		return err
	}
	if err := r.retryFor(debt+prompt+10, large.TPM); err != nil {
		return fmt.Errorf("erin: %w", err)
	}
	ok("large, erin: an answer of %d tokens against %d reserved (no max_tokens) leaves her %d tokens in debt; her next %d-token request is denied, Retry-After %s (%d ms to earn %d tokens at %d a minute)",
		prompt+long, prompt+demoDefaultMax, debt, prompt+10, r.header.Get("Retry-After"), r.problem.RetryAfterMs, debt+prompt+10, large.TPM)
	clock.Add(r.problem.RetryAfterMs)
	if _, err = c.pass("erin", "large", ask(10), 10); err != nil {
		return fmt.Errorf("erin, after Retry-After: %w", err)
	}
	ok("large, erin: allowed once the %d ms of retryAfterMs have paid her debt back", r.problem.RetryAfterMs)

	// A failed call costs nothing: its whole reservation goes back.
	most := large.policy.MaxCost() - prompt
	r, err = c.chat("grace", "large", "please fail with status 500", most)
	switch {
	case err != nil:
		return err
	case r.status != http.StatusInternalServerError:
		return fmt.Errorf("grace: the failing call answered %d, want the model's 500", r.status)
	}
	if err := r.charged(prompt+most, 0); err != nil {
		return fmt.Errorf("grace: %w", err)
	}
	if _, err = c.pass("grace", "large", ask(most), most); err != nil {
		return fmt.Errorf("grace, after a failed call: %w", err)
	}
	ok("large, grace: a call the model failed (500) is charged 0 tokens, so a %d-token request right after passes", prompt+most)

	// The counts: every 429 above, by model and limit, and what settling moved.
	st, err := c.stats()
	if err != nil {
		return err
	}
	refunded := (est - prompt - 100) + (prompt + most)
	switch s, l := st["small"], st["large"]; {
	case s.Throttled != 1 || s.ThrottledBy["requests"] != 1:
		return fmt.Errorf("stats: small throttled %d (%v), want 1 by requests", s.Throttled, s.ThrottledBy)
	case l.Throttled != 2 || l.ThrottledBy["tokens"] != 2:
		return fmt.Errorf("stats: large throttled %d (%v), want 2 by tokens", l.Throttled, l.ThrottledBy)
	case l.TokensRefunded != refunded || l.TokensDebited != prompt+long-(prompt+demoDefaultMax):
		return fmt.Errorf("stats: large refunded %d and debited %d tokens, want %d and %d",
			l.TokensRefunded, l.TokensDebited, refunded, prompt+long-(prompt+demoDefaultMax))
	case s.SettleErrors+l.SettleErrors != 0:
		return fmt.Errorf("stats: %d settlements failed (see the log)", s.SettleErrors+l.SettleErrors)
	}
	ok("GET /stats: small throttled 1 (requests), large throttled 2 (tokens); large refunded %d and debited %d tokens",
		st["large"].TokensRefunded, st["large"].TokensDebited)

	fmt.Fprintf(out, "\nPASS: %d checks\n", checks)
	return nil
}

// ask is a prompt the fake model answers with n tokens.
func ask(n int64) string { return fmt.Sprintf("please answer with %d tokens", n) }

// listenLocal serves h on a loopback port; stop shuts it down.
func listenLocal(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("llm-proxy: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// demoClient calls the proxy as the demo's tenants.
type demoClient struct {
	ctx  context.Context
	base string
	run  string // makes the API keys this run's own
}

// reply is the proxy's answer to one call.
type reply struct {
	status  int
	header  http.Header
	body    []byte
	problem problem // when the answer is a problem
}

// chat sends one user message to model as tenant; maxTokens 0 leaves max_tokens out.
func (c *demoClient) chat(tenant, model, text string, maxTokens int64) (reply, error) {
	msg := map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": text}}}
	if maxTokens > 0 {
		msg["max_tokens"] = maxTokens
	}
	body, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tenant+"-"+c.run)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode, header: resp.Header}
	if r.body, err = io.ReadAll(resp.Body); err != nil {
		return reply{}, err
	}
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(r.body, &r.problem); err != nil {
			return reply{}, fmt.Errorf("%s: a problem that is not JSON: %s", tenant, r.body)
		}
	}
	return r, nil
}

// pass is chat that must be answered 200.
func (c *demoClient) pass(tenant, model, text string, maxTokens int64) (reply, error) {
	r, err := c.chat(tenant, model, text, maxTokens)
	if err == nil && r.status != http.StatusOK {
		err = fmt.Errorf("%s on %s: got %d %s, want 200", tenant, model, r.status, bytes.TrimSpace(r.body))
	}
	return r, err
}

// denied is chat that must be answered 429 by limit.
func (c *demoClient) denied(tenant, model, text string, maxTokens int64, limit string) (reply, error) {
	r, err := c.chat(tenant, model, text, maxTokens)
	switch {
	case err != nil:
		return r, err
	case r.status != http.StatusTooManyRequests:
		return r, fmt.Errorf("%s on %s: got %d %s, want 429 by %s", tenant, model, r.status, bytes.TrimSpace(r.body), limit)
	case r.problem.Limit != limit || r.problem.Model != model:
		return r, fmt.Errorf("%s on %s: denied by %q of %q, want %q of %q", tenant, model, r.problem.Limit, r.problem.Model, limit, model)
	case r.header.Get("Retry-After") != strconv.FormatInt((r.problem.RetryAfterMs+999)/1000, 10):
		return r, fmt.Errorf("%s on %s: Retry-After %q for %d ms", tenant, model, r.header.Get("Retry-After"), r.problem.RetryAfterMs)
	}
	return r, nil
}

// charged checks the tokens the proxy reserved for a call and charged for it.
func (r reply) charged(reserved, charged int64) error {
	gotR, gotC := r.header.Get("X-Tokens-Reserved"), r.header.Get("X-Tokens-Charged")
	if gotR != strconv.FormatInt(reserved, 10) || gotC != strconv.FormatInt(charged, 10) {
		return fmt.Errorf("reserved %s and charged %s tokens, want %d and %d", gotR, gotC, reserved, charged)
	}
	return nil
}

// retryFor checks that a tokens denial waits as long as refilling missing tokens at tpm takes
// (to the millisecond: the store computes in float64).
func (r reply) retryFor(missing, tpm int64) error {
	want := int64(math.Ceil(float64(missing) * 60_000 / float64(tpm)))
	if d := r.problem.RetryAfterMs - want; d < -1 || d > 1 {
		return fmt.Errorf("retry after %d ms, want %d: the time %d tokens take at %d a minute", r.problem.RetryAfterMs, want, missing, tpm)
	}
	return nil
}

// stats reads GET /stats.
func (c *demoClient) stats() (map[string]modelStats, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.base+"/stats", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st struct{ Models map[string]modelStats }
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("GET /stats: %w", err)
	}
	return st.Models, nil
}
