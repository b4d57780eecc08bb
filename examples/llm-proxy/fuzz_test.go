package main

import (
	"encoding/json"
	"fmt"
	"testing"
)

// FuzzParseChatRequest reads any body as a client's request: it must not panic; what it accepts
// must have a model, messages and an estimate from 1 up, and the body it forwards must read back
// as the same request, so that the upstream serves what the budget was checked for.
func FuzzParseChatRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"small","messages":[{"role":"user","content":"please answer with 3 tokens"}],"max_tokens":10}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url"}]}]}`,
		`{"model":"a","model":"b","Model":"c","messages":[{"content":null}],"max_tokens":1,"max_completion_tokens":2}`,
		`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":16777217,"stream":true}`,
		`{"model":"m","messages":[{"content":"\u00a0\u2028 x\ud800"}],"max_tokens":null}`,
		`null`, `[]`, `{"model":"m","messages":[]}`, "{\"model\":\"\xff\",\"messages\":[{}]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, fwd, err := parseChatRequest(body)
		if err != nil {
			return
		}
		if req.Model == "" || len(req.Messages) == 0 || req.MaxTokens < 0 || req.MaxTokens > maxMaxTokens {
			t.Fatalf("accepted %q as %+v", body, req)
		}
		if e := req.estimate(1); e < 1 || e < req.promptTokens() {
			t.Fatalf("estimate %d for %+v", e, req)
		}
		if !json.Valid(fwd) {
			t.Fatalf("forwards invalid JSON %q", fwd)
		}
		again, fwd2, err := parseChatRequest(fwd)
		if err != nil {
			t.Fatalf("the forwarded %q does not parse: %v", fwd, err)
		}
		if fmt.Sprint(again) != fmt.Sprint(req) || string(fwd2) != string(fwd) {
			t.Fatalf("the forwarded %q reads as %+v, want %+v", fwd, again, req)
		}
	})
}

// FuzzParseUsage reads any body as an answer: it must not panic, a usage it accepts is within
// bounds, and a usage written out is read back exactly.
func FuzzParseUsage(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`), int64(3), int64(4))
	f.Add([]byte(`{"usage":{"prompt_tokens":3}}`), int64(0), int64(0))
	f.Add([]byte(`{"usage":{"total_tokens":-1},"usage":{"total_tokens":1e3}}`), int64(-1), int64(1<<41))
	f.Fuzz(func(t *testing.T, body []byte, prompt, completion int64) {
		if total, ok := parseUsage(body); ok && (total < 0 || total > 2*maxUsage) {
			t.Fatalf("parseUsage(%q) = %d", body, total)
		}
		b, _ := json.Marshal(map[string]any{"usage": map[string]int64{"prompt_tokens": prompt, "completion_tokens": completion}})
		total, ok := parseUsage(b)
		valid := prompt >= 0 && completion >= 0 && prompt <= maxUsage && completion <= maxUsage
		if ok != valid || ok && total != prompt+completion {
			t.Fatalf("parseUsage(%s) = %d, %v", b, total, ok)
		}
	})
}

// FuzzParseLimits reads any --model value: it must not panic, and what it accepts builds a policy
// and reads back the same once written out.
func FuzzParseLimits(f *testing.F) {
	for _, seed := range []string{"small=60/10000", "a=1/1", "x=0/5", "=1/2", "m=1/2/3", "bad name=1/1", "m=+5/0x10"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := parseLimits(s)
		if err != nil {
			return
		}
		if _, err := l.policy(1); err != nil {
			t.Fatalf("accepted %q, whose policy is invalid: %v", s, err)
		}
		written := (&limitsFlag{l}).String()
		again, err := parseLimits(written)
		if err != nil || again != l {
			t.Fatalf("%q reads back as %+v, %v; want %+v", written, again, err, l)
		}
	})
}
