package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
)

// The fake model stands in for a model server: it answers POST /v1/chat/completions with token
// counts that anyone can work out beforehand, so that the proxy's budgets can be tested exactly.
//
// Tokens are words (countTokens). The prompt costs the words of every message. The answer has
// fakeDefaultAnswer words unless the last message says "answer with N tokens", capped by max_tokens
// or, without one, by fakeContextMax (finish_reason is then "length"). The last message can also
// say "fail with status N" (400 to 599) to get that error, and "answer without usage" to get an
// answer whose usage is left out.
const (
	fakeDefaultAnswer = 20
	fakeContextMax    = 4096
)

var (
	answerWith = regexp.MustCompile(`(?i)\banswer with (\d{1,9}) tokens?\b`)
	failWith   = regexp.MustCompile(`(?i)\bfail with status ([45]\d\d)\b`)
	noUsage    = regexp.MustCompile(`(?i)\banswer without usage\b`)
)

// fakeWords are the words answers are made of.
var fakeWords = strings.Fields("the quick brown fox jumps over a lazy dog while sluice counts every word")

type fakeModel struct {
	seq atomic.Int64 // numbers the answers' ids
}

func (f *fakeModel) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", f.complete)
	return mux
}

func (f *fakeModel) complete(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		fakeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", err.Error())
		return
	}
	req, _, err := parseChatRequest(body)
	switch {
	case err != nil:
		fakeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	case req.Stream:
		fakeError(w, http.StatusBadRequest, "invalid_request_error", "the fake model does not stream")
		return
	}
	last := req.Messages[len(req.Messages)-1].Text
	if m := failWith.FindStringSubmatch(last); m != nil {
		status, _ := strconv.Atoi(m[1])
		fakeError(w, status, "fake_failure", "failing as asked")
		return
	}
	prompt, completion, finish := fakeCounts(req)
	words := make([]string, completion)
	for i := range words {
		words[i] = fakeWords[i%len(fakeWords)]
	}
	answer := map[string]any{
		"id":     fmt.Sprintf("chatcmpl-fake-%d", f.seq.Add(1)),
		"object": "chat.completion",
		"model":  req.Model,
		"choices": []map[string]any{{
			"index":         0,
			"message":       map[string]string{"role": "assistant", "content": strings.Join(words, " ")},
			"finish_reason": finish,
		}},
	}
	if !noUsage.MatchString(last) {
		answer["usage"] = map[string]int64{
			"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(answer)
}

// fakeCounts is the fake model's rule: what a request's prompt and answer cost, and why the
// answer ends.
func fakeCounts(req chatRequest) (prompt, completion int64, finish string) {
	completion = fakeDefaultAnswer
	if m := answerWith.FindStringSubmatch(req.Messages[len(req.Messages)-1].Text); m != nil {
		completion, _ = strconv.ParseInt(m[1], 10, 64)
	}
	ceiling := req.MaxTokens
	if ceiling == 0 {
		ceiling = fakeContextMax
	}
	finish = "stop"
	if completion > ceiling {
		completion, finish = ceiling, "length"
	}
	return req.promptTokens(), completion, finish
}

// fakeError answers as OpenAI's API does: {"error":{"message","type"}}.
func fakeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": msg, "type": typ}})
}
