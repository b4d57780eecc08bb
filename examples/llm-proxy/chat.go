package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode"
)

// The chat API spoken here is the smallest part of OpenAI's chat completions that a budget needs:
// the model, the messages' text and the most completion tokens the client asks for on the way in,
// and the usage on the way out.

// maxMaxTokens bounds max_tokens, so that an estimate cannot overflow whatever the client sends.
const maxMaxTokens = 1 << 24

// maxUsage bounds the token counts read from an answer: past it the upstream is not to be believed.
const maxUsage = 1 << 40

// chatRequest is what the proxy and the fake model read of a chat completion request.
type chatRequest struct {
	Model    string
	Messages []chatMessage
	// MaxTokens is max_completion_tokens, or else max_tokens; 0 when the client set neither.
	MaxTokens int64
	Stream    bool
}

type chatMessage struct {
	Role string
	// Text is the content's text: the string, or the text parts of an array joined by spaces.
	Text string
}

// parseChatRequest reads a request body. It also returns the body to forward: the same top-level
// members, each once, so that the upstream cannot read a different model or max_tokens than the one
// the budget was checked for (encoding/json keeps the last of duplicate members and matches struct
// fields regardless of case, where another parser may not).
func parseChatRequest(body []byte) (chatRequest, []byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return chatRequest{}, nil, fmt.Errorf("the body is not a JSON object: %w", err)
	}
	if top == nil {
		return chatRequest{}, nil, errors.New("the body is not a JSON object")
	}
	var req chatRequest
	if err := member(top, "model", &req.Model); err != nil {
		return chatRequest{}, nil, err
	}
	if req.Model == "" {
		return chatRequest{}, nil, errors.New("model is missing")
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := member(top, "messages", &msgs); err != nil {
		return chatRequest{}, nil, err
	}
	if len(msgs) == 0 {
		return chatRequest{}, nil, errors.New("messages are missing")
	}
	req.Messages = make([]chatMessage, len(msgs))
	for i, m := range msgs {
		text, err := contentText(m.Content)
		if err != nil {
			return chatRequest{}, nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		req.Messages[i] = chatMessage{Role: m.Role, Text: text}
	}
	for _, name := range []string{"max_tokens", "max_completion_tokens"} { // the newer name wins
		var n *int64
		if err := member(top, name, &n); err != nil {
			return chatRequest{}, nil, err
		}
		if n == nil {
			continue
		}
		if *n < 1 || *n > maxMaxTokens {
			return chatRequest{}, nil, fmt.Errorf("%s must be from 1 to %d, got %d", name, maxMaxTokens, *n)
		}
		req.MaxTokens = *n
	}
	if err := member(top, "stream", &req.Stream); err != nil {
		return chatRequest{}, nil, err
	}
	var fwd bytes.Buffer
	enc := json.NewEncoder(&fwd)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(top); err != nil {
		return chatRequest{}, nil, err // unreachable: every member was valid JSON
	}
	return req, bytes.TrimSuffix(fwd.Bytes(), []byte("\n")), nil
}

// member decodes the top-level member name into v, leaving v alone when it is absent or null.
func member(top map[string]json.RawMessage, name string, v any) error {
	raw, ok := top[name]
	if !ok || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// contentText is the text of a message's content: a string, null, or an array of parts of which
// those of type "text" count (an image costs tokens too, but the estimate cannot tell how many:
// settling corrects it).
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if raw[0] == '"' {
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of parts")
	}
	var b []byte
	for _, p := range parts {
		if p.Type == "text" {
			b = append(append(b, ' '), p.Text...)
		}
	}
	return string(b), nil
}

// countTokens is this example's tokenizer: one token per word (a run of non-space characters).
// The fake model counts the same way, so that tests know every cost in advance; in front of a real
// model, estimate with its tokenizer, or as a quarter of the bytes, and let settling correct it.
func countTokens(s string) int64 {
	var n int64
	in := false
	for _, r := range s {
		space := unicode.IsSpace(r)
		if !space && !in {
			n++
		}
		in = !space
	}
	return n
}

// promptTokens is the tokens of every message's text.
func (r chatRequest) promptTokens() int64 {
	var n int64
	for _, m := range r.Messages {
		n += countTokens(m.Text)
	}
	return n
}

// estimate is the most tokens the request can cost: its prompt, plus its max_tokens or, without
// one, defaultMax. It is what the proxy reserves before the call.
func (r chatRequest) estimate(defaultMax int64) int64 {
	maxOut := r.MaxTokens
	if maxOut == 0 {
		maxOut = defaultMax
	}
	return r.promptTokens() + maxOut
}

// usage is the usage member of a chat completion.
type usage struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	TotalTokens      *int64 `json:"total_tokens"`
}

// parseUsage reads the tokens an answer cost: usage.total_tokens, or else prompt_tokens plus
// completion_tokens. ok is false when the body has no usable usage: not JSON, no usage, a count
// missing, negative or past maxUsage.
func parseUsage(body []byte) (total int64, ok bool) {
	var resp struct {
		Usage *usage `json:"usage"`
	}
	if json.Unmarshal(body, &resp) != nil || resp.Usage == nil {
		return 0, false
	}
	u := resp.Usage
	valid := func(n *int64) bool { return n != nil && *n >= 0 && *n <= maxUsage }
	switch {
	case u.TotalTokens != nil:
		if !valid(u.TotalTokens) {
			return 0, false
		}
		return *u.TotalTokens, true
	case valid(u.PromptTokens) && valid(u.CompletionTokens):
		return *u.PromptTokens + *u.CompletionTokens, true
	}
	return 0, false
}
