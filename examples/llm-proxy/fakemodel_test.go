package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestFakeCounts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		last                  string
		maxTokens             int64
		prompt, completion    int64
		finish                string
		earlier               string // an earlier message, whose words count but whose asks do not
		earlierPromptIncluded int64
	}{
		{name: "default answer", last: "hello there", prompt: 2, completion: fakeDefaultAnswer, finish: "stop"},
		{name: "asked length", last: "please answer with 7 tokens", prompt: 5, completion: 7, finish: "stop"},
		{name: "one token", last: "Answer with 1 token", prompt: 4, completion: 1, finish: "stop"},
		{name: "capped by max_tokens", last: "answer with 70 tokens", maxTokens: 50, prompt: 4, completion: 50, finish: "length"},
		{name: "capped by the context", last: "answer with 999999 tokens", prompt: 4, completion: fakeContextMax, finish: "length"},
		{name: "only the last message asks", last: "go on", earlier: "answer with 3 tokens", prompt: 6, completion: fakeDefaultAnswer, finish: "stop"},
		{name: "zero tokens", last: "answer with 0 tokens", prompt: 4, completion: 0, finish: "stop"},
	}
	for _, tt := range tests {
		req := chatRequest{Model: "m", MaxTokens: tt.maxTokens, Messages: []chatMessage{{Role: "user", Text: tt.last}}}
		if tt.earlier != "" {
			req.Messages = append([]chatMessage{{Role: "user", Text: tt.earlier}}, req.Messages...)
		}
		prompt, completion, finish := fakeCounts(req)
		if prompt != tt.prompt || completion != tt.completion || finish != tt.finish {
			t.Errorf("%s: fakeCounts = %d, %d, %q; want %d, %d, %q", tt.name, prompt, completion, finish, tt.prompt, tt.completion, tt.finish)
		}
	}
}

func TestFakeModel(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer((&fakeModel{}).Handler())
	t.Cleanup(srv.Close)
	post := func(body string) (*http.Response, map[string]any) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var got map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		return resp, got
	}

	resp, got := post(chatBody("small", "please answer with 12 tokens", 100))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, got)
	}
	var answer struct {
		ID      string
		Model   string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			TotalTokens      int64 `json:"total_tokens"`
		}
	}
	b, _ := json.Marshal(got)
	if err := json.Unmarshal(b, &answer); err != nil {
		t.Fatal(err)
	}
	if answer.ID == "" || answer.Model != "small" || len(answer.Choices) != 1 || answer.Choices[0].Message.Role != "assistant" ||
		countTokens(answer.Choices[0].Message.Content) != 12 || answer.Choices[0].FinishReason != "stop" ||
		answer.Usage != (struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			TotalTokens      int64 `json:"total_tokens"`
		}{5, 12, 17}) {
		t.Errorf("answer %s", b)
	}
	if total, ok := parseUsage(b); !ok || total != 17 {
		t.Errorf("parseUsage of the fake's answer = %d, %v", total, ok)
	}

	if resp, got := post(chatBody("small", "please answer without usage", 0)); resp.StatusCode != 200 || got["usage"] != nil {
		t.Errorf("without usage: %d %v", resp.StatusCode, got)
	}
	if resp, got := post(chatBody("small", "now fail with status 429 please", 0)); resp.StatusCode != 429 || got["error"] == nil {
		t.Errorf("asked to fail: %d %v", resp.StatusCode, got)
	}
	if resp, got := post(`{"model":"small","stream":true,"messages":[{"role":"user","content":"x"}]}`); resp.StatusCode != 400 || got["error"] == nil {
		t.Errorf("stream: %d %v", resp.StatusCode, got)
	}
	if resp, got := post(`{"model":"small"}`); resp.StatusCode != 400 || got["error"] == nil {
		t.Errorf("no messages: %d %v", resp.StatusCode, got)
	}
}
