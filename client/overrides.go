package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
)

// ErrNotFound means the server holds no override of the policy and key asked for (a 404 of an
// overrides route): GetOverride's error matches it with errors.Is, where the other calls' 404
// matches sluice.ErrUnknownPolicy.
var ErrNotFound = errors.New("client: not found")

// overrideRequest is the body of PUT /v1/overrides/{policy}/{key}: the path carries the policy
// and the key.
type overrideRequest struct {
	Plan      string            `json:"plan,omitempty"`
	Limits    []overrides.Limit `json:"limits,omitempty"`
	TTLMs     int64             `json:"ttlMs,omitempty"`
	ExpiresAt int64             `json:"expiresAt,omitempty"`
	Reason    string            `json:"reason,omitempty"`
}

// SetOverride stores o (its Plan or its Limits) for o.Key under o.Policy, replacing any override
// of that key, and returns it as the server stored it (UpdatedAt set). A ttl above 0 has it last
// that long from the server's clock (whole milliseconds, rounded up); 0 sends o.ExpiresAt as
// given (0: never); a negative ttl is bad input. Bad input (an unknown policy or plan, an invalid limit, a ttl and an
// ExpiresAt both) is a *sluice.InvalidError naming the field, and stores nothing. It needs an
// admin token.
func (c *Client) SetOverride(ctx context.Context, o overrides.Override, ttl time.Duration) (overrides.Override, error) {
	path, err := overridePath(o.Policy, o.Key)
	if err != nil {
		return overrides.Override{}, err
	}
	if ttl < 0 {
		return overrides.Override{}, &sluice.InvalidError{Field: "ttlMs", Reason: "must be positive, got " + ttl.String()}
	}
	req := overrideRequest{Plan: o.Plan, Limits: o.Limits, ExpiresAt: o.ExpiresAt, Reason: o.Reason}
	if ttl > 0 {
		req.TTLMs = int64(ttl / time.Millisecond)
		if ttl%time.Millisecond > 0 {
			req.TTLMs++ // a positive ttl never rounds to "no ttl"
		}
	}
	var out overrides.Override
	if err := c.send(ctx, http.MethodPut, path, req, &out); err != nil {
		return overrides.Override{}, err
	}
	return out, nil
}

// GetOverride returns the live override of key under policy; an error matching ErrNotFound when
// there is none.
func (c *Client) GetOverride(ctx context.Context, policy, key string) (overrides.Override, error) {
	path, err := overridePath(policy, key)
	if err != nil {
		return overrides.Override{}, err
	}
	var out overrides.Override
	if err := c.send(ctx, http.MethodGet, path, nil, &out); err != nil {
		return overrides.Override{}, notFound(err)
	}
	return out, nil
}

// DeleteOverride deletes the override of key under policy, and reports whether there was one.
func (c *Client) DeleteOverride(ctx context.Context, policy, key string) (bool, error) {
	path, err := overridePath(policy, key)
	if err != nil {
		return false, err
	}
	err = notFound(c.send(ctx, http.MethodDelete, path, nil, nil))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ListOverrides returns a page of the live overrides of policy whose keys start with prefix, in
// key order, after pageToken ("" for the first page), at most limit (0: the server's default,
// 100; at most 1000), and the token of the next page, "" after the last.
func (c *Client) ListOverrides(ctx context.Context, policy, prefix, pageToken string, limit int) ([]overrides.Override, string, error) {
	q := url.Values{"policy": {policy}}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	if pageToken != "" {
		q.Set("pageToken", pageToken)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var resp struct {
		Overrides     []overrides.Override `json:"overrides"`
		NextPageToken string               `json:"nextPageToken"`
	}
	if err := c.send(ctx, http.MethodGet, "/v1/overrides?"+q.Encode(), nil, &resp); err != nil {
		return nil, "", err
	}
	return resp.Overrides, resp.NextPageToken, nil
}

// overridePath is the route of one override, the policy and the key each one escaped segment.
// The key's "/" is escaped, and so are the dots of a key "." or "..", which the server's router
// would otherwise clean out of the path.
func overridePath(policy, key string) (string, error) {
	if policy == "" {
		// An empty segment would be cleaned out of the path too, and the key taken for the policy.
		return "", &sluice.InvalidError{Field: "policy", Reason: "is empty"}
	}
	segment := func(s string) string {
		if s == "." || s == ".." {
			return strings.ReplaceAll(s, ".", "%2E")
		}
		return url.PathEscape(s)
	}
	return "/v1/overrides/" + segment(policy) + "/" + segment(key), nil
}

// notFound makes a 404 of an overrides route match ErrNotFound.
func notFound(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Status == http.StatusNotFound {
		e.Err = ErrNotFound
	}
	return err
}
