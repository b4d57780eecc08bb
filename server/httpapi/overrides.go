package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/overrides"
)

// The overrides routes (package overrides): an admin's per-key plans and limits, set, read, listed
// and deleted at runtime. The policy and key come from the path, never from a body.

// decodeOverride reads the body of PUT /v1/overrides/{policy}/{key...} for policy and key:
// {"plan"} or {"limits":[…]}, and "ttlMs" (from now, epoch ms) or "expiresAt", and "reason", each
// optional but one of plan and limits (the Table checks that, and the values).
func decodeOverride(data []byte, policy, key string, now int64) (overrides.Override, error) {
	o := overrides.Override{Policy: policy, Key: key}
	var raw []json.RawMessage
	var ttl, expires *int64 // nil: not given
	err := decodeObject(data, "", []field{
		{"plan", false, "a string", &o.Plan},
		{"limits", false, "an array of objects", &raw},
		{"ttlMs", false, "an integer (ms)", &ttl},
		{"expiresAt", false, "an integer (epoch ms)", &expires},
		{"reason", false, "a string", &o.Reason},
	})
	if err != nil {
		return overrides.Override{}, err
	}
	if len(raw) > overrides.MaxLimits {
		return overrides.Override{}, invalidf("limits: %d limits, at most %d", len(raw), overrides.MaxLimits)
	}
	if raw != nil {
		o.Limits = make([]overrides.Limit, len(raw))
	}
	for i, r := range raw {
		l := &o.Limits[i]
		err := decodeObject(r, fmt.Sprintf("limits[%d].", i), []field{
			{"strategy", true, "a string", &l.Strategy},
			{"limit", false, "a number", &l.Limit},
			{"periodMs", false, "a number", &l.PeriodMs},
			{"burst", false, "a number", &l.Burst},
			{"capacity", false, "a number", &l.Capacity},
			{"refillPerSec", false, "a number", &l.RefillPerSec},
			{"windowMs", false, "a number", &l.WindowMs},
			{"buckets", false, "an integer", &l.Buckets},
			{"calendar", false, "a string", &l.Calendar},
			{"timezone", false, "a string", &l.TimeZone},
			{"name", false, "a string", &l.Name},
			{"unit", false, "a string", &l.Unit},
		})
		if err != nil {
			return overrides.Override{}, err
		}
	}
	switch {
	case ttl != nil && expires != nil:
		return overrides.Override{}, invalidf("expiresAt: set ttlMs or expiresAt, not both")
	case ttl != nil:
		if o.ExpiresAt, err = overrides.ExpiresIn(now, *ttl); err != nil {
			return overrides.Override{}, err
		}
	case expires != nil:
		o.ExpiresAt = *expires
	}
	return o, nil
}

// overrideRef is the policy and key of an override's path, checked as the Table checks them, so
// that a read answers a bad key with 400 rather than 404.
func overrideRef(r *http.Request) (policy, key string, err error) {
	policy, key = r.PathValue("policy"), r.PathValue("key")
	switch {
	case key == "" || len(key) > sluice.MaxKeyLen:
		err = invalidf("key: must be 1 to %d bytes, got %d", sluice.MaxKeyLen, len(key))
	case !utf8.ValidString(key):
		err = invalidf("key: must be UTF-8")
	}
	return policy, key, err
}

func (a *api) putOverride(w http.ResponseWriter, r *http.Request) {
	policy, key, err := overrideRef(r)
	var data []byte
	if err == nil {
		data, err = a.body(w, r)
	}
	var o overrides.Override
	if err == nil {
		o, err = decodeOverride(data, policy, key, time.Now().UnixMilli())
	}
	table := a.srv.Overrides()
	if err == nil {
		err = table.Set(r.Context(), o)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if got, ok := table.Get(policy, key); ok {
		o = got // with its UpdatedAt
	}
	writeJSON(w, http.StatusOK, o)
}

func (a *api) getOverride(w http.ResponseWriter, r *http.Request) {
	policy, key, err := overrideRef(r)
	if err != nil {
		writeError(w, err)
		return
	}
	o, ok := a.srv.Overrides().Get(policy, key)
	if !ok {
		writeError(w, &httpError{http.StatusNotFound, CodeNotFound,
			fmt.Sprintf("httpapi: no override of key %q under policy %q", key, policy)})
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// deleteOverride answers DELETE /v1/overrides/{policy}/{key}[?reason=WHY]: the reason, which a
// body-less DELETE carries in its query, is logged with the deletion.
func (a *api) deleteOverride(w http.ResponseWriter, r *http.Request) {
	policy, key, err := overrideRef(r)
	reason := ""
	if err == nil {
		reason, err = deleteReason(r.URL.RawQuery)
	}
	var existed bool
	if err == nil {
		existed, err = a.srv.Overrides().Delete(r.Context(), policy, key)
	}
	if err == nil && !existed {
		err = &httpError{http.StatusNotFound, CodeNotFound,
			fmt.Sprintf("httpapi: no override of key %q under policy %q", key, policy)}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	a.srv.LogAction("override deleted", policy, key, reason)
	writeJSON(w, http.StatusOK, struct {
		Deleted bool `json:"deleted"`
	}{true})
}

// deleteReason reads a deletion's query: nothing, or reason once, at most MaxReasonLen bytes.
func deleteReason(raw string) (string, error) {
	q, err := strictQuery(raw, "reason")
	if err != nil {
		return "", err
	}
	reason := q.Get("reason")
	switch {
	case len(reason) > overrides.MaxReasonLen:
		return "", invalidf("reason: at most %d bytes, got %d", overrides.MaxReasonLen, len(reason))
	case !utf8.ValidString(reason):
		return "", invalidf("reason: must be UTF-8")
	}
	return reason, nil
}

// strictQuery parses a query string whose parameters are among allowed, each at most once:
// anything else is a 400 naming it.
func strictQuery(raw string, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, invalidf("query: %v", err)
	}
	for name, vs := range q {
		switch {
		case !slices.Contains(allowed, name):
			return nil, invalidf("%q: unknown parameter (%s)", name, strings.Join(allowed, ", "))
		case len(vs) > 1:
			return nil, invalidf("%s: given %d times, at most once", name, len(vs))
		}
	}
	return q, nil
}

// listOverrides answers GET /v1/overrides?policy=P&prefix=K&pageToken=T&limit=N, reading the query
// as strictly as the gate does: unknown or repeated parameters are 400.
func (a *api) listOverrides(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r.URL.RawQuery, "policy", "prefix", "pageToken", "limit")
	if err == nil && q.Has("limit") && q.Get("limit") == "" {
		err = invalidf("limit: given empty")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	policy := q.Get("policy")
	limit, err := queryInt(q.Get("limit"), "limit", DefaultPageLimit)
	switch {
	case policy == "":
		err = invalidf("policy: is missing")
	case err == nil && (limit < 1 || limit > MaxPageLimit):
		err = invalidf("limit: must be 1 to %d, got %d", MaxPageLimit, limit)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	page, next := a.srv.Overrides().List(policy, q.Get("prefix"), q.Get("pageToken"), int(limit))
	if page == nil {
		page = []overrides.Override{}
	}
	writeJSON(w, http.StatusOK, struct {
		Overrides     []overrides.Override `json:"overrides"`
		NextPageToken string               `json:"nextPageToken,omitempty"`
	}{page, next})
}
