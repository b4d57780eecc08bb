// Package overrides holds per-key limits changed at runtime, fleet-wide: "acme moved to plan pro",
// "double acme's limit until Friday", "cap that scraper to 1/s".
//
// # The model
//
// A policy (a sluice.Policy, named) applies to every key checked under its name. An Override, for
// one (policy, key), replaces it for that key: with one of the policy's named plans (Plan), or with
// limits of its own (Limits), until ExpiresAt (epoch ms; 0 never) or until deleted. Reason is free
// text for the people reading it. Whatever applies, the policy's name stays the same, so a key's
// state in the store is shared by the policy, its plans and its overrides: moving a key to another
// plan keeps what it has spent.
//
// A Table is a process's copy of every override, and the one door to them: Set, Delete, Get and
// List change and read them through a Backend (Redis, PostgreSQL, or none: in memory, optionally
// persisted to a file), and Policy answers the hot path from the local copy, with no lock, no
// allocation and no I/O. Every Table on one backend sees every change: the backend pushes each
// change to every Table (Redis pub/sub, PostgreSQL LISTEN/NOTIFY), within milliseconds, and each
// Table reloads everything every Config.Refresh as a safety net, and at once when its backend
// tells it that changes may have been missed (a lost subscription, Change{Op: OpReload}).
//
// An override past its ExpiresAt is ignored from that millisecond on, by every Table, with no
// message; the next refresh drops it, and deletes it from the backend.
//
// # Wire form
//
// An Override and a Change are JSON in the service's wire style (Override's tags); Limit is one
// limit of a policy, with the strategy names and parameter names of the conformance vectors and the
// config file. DecodeChange and DecodeOverride read them from outside input.
package overrides

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/sluicehq/sluice"
)

// Bounds on what an override may hold.
const (
	// MaxReasonLen is the longest Reason, in bytes.
	MaxReasonLen = 1024
	// MaxLimits is the most limits an override may hold.
	MaxLimits = 16
	// MaxJSONLen is the longest an Override may be as JSON: a change must fit a PostgreSQL
	// notification (8000 bytes) with room for the Change around it.
	MaxJSONLen = 7600
	// MaxTTLMs is the longest ttlMs ExpiresIn accepts: about 100 years.
	MaxTTLMs = 100 * 366 * 24 * 3600 * 1000
)

// Override is what applies to one key of one policy instead of the policy. Exactly one of Plan
// and Limits is set. The zero value is no override.
type Override struct {
	// Policy names the policy the override is for.
	Policy string `json:"policy"`
	// Key is the key checked under Policy: 1 to sluice.MaxKeyLen bytes of UTF-8.
	Key string `json:"key"`
	// Plan names one of the policy's plans.
	Plan string `json:"plan,omitempty"`
	// Limits are limits of the override's own, checked under the policy's name.
	Limits []Limit `json:"limits,omitempty"`
	// ExpiresAt is the epoch ms from which the override no longer applies; 0 never.
	ExpiresAt int64 `json:"expiresAt,omitempty"`
	// Reason says why, for people: at most MaxReasonLen bytes of UTF-8.
	Reason string `json:"reason,omitempty"`
	// UpdatedAt is the epoch ms the override was last set, by the Table that set it.
	UpdatedAt int64 `json:"updatedAt,omitempty"`
}

// Live reports whether o applies at now (epoch ms): it has not expired.
func (o *Override) Live(now int64) bool { return o.ExpiresAt == 0 || now < o.ExpiresAt }

// ExpiresIn is the ExpiresAt of an override that lasts ttlMs from now, the form the API takes:
// ttlMs must be from 1 to MaxTTLMs (an *sluice.InvalidError naming "ttlMs" otherwise).
func ExpiresIn(now, ttlMs int64) (int64, error) {
	if ttlMs <= 0 || ttlMs > MaxTTLMs {
		return 0, invalid("ttlMs", "must be from 1 to %d ms, got %d", int64(MaxTTLMs), ttlMs)
	}
	return now + ttlMs, nil
}

// clone is o with its own Limits.
func (o Override) clone() Override {
	if o.Limits != nil {
		o.Limits = append([]Limit(nil), o.Limits...)
	}
	return o
}

// Limit is one limit in its JSON wire form: a strategy by name and that strategy's parameters
// (the conformance vectors' names; the others must be zero).
type Limit struct {
	// Name labels the limit in reports. Optional.
	Name string `json:"name,omitempty"`
	// Unit is "request" (each check counts 1) or "cost" (each check counts its cost); "" is cost.
	Unit string `json:"unit,omitempty"`
	// Strategy is "gcra", "tokenBucket", "fixedWindow", "slidingWindow" or "slidingWindowLog".
	Strategy     string  `json:"strategy"`
	Limit        float64 `json:"limit,omitempty"`        // gcra, fixedWindow, slidingWindow, slidingWindowLog
	PeriodMs     float64 `json:"periodMs,omitempty"`     // gcra
	Burst        float64 `json:"burst,omitempty"`        // gcra
	Capacity     float64 `json:"capacity,omitempty"`     // tokenBucket
	RefillPerSec float64 `json:"refillPerSec,omitempty"` // tokenBucket
	WindowMs     float64 `json:"windowMs,omitempty"`     // fixedWindow (0 with a calendar), slidingWindow, slidingWindowLog
	Buckets      int     `json:"buckets,omitempty"`      // slidingWindow
	Calendar     string  `json:"calendar,omitempty"`     // fixedWindow: "day" or "month"
	TimeZone     string  `json:"timezone,omitempty"`     // fixedWindow with a calendar: IANA name, "" is UTC
}

// params lists which parameters each strategy takes.
var params = map[string][]string{
	"gcra":             {"limit", "periodMs", "burst"},
	"tokenBucket":      {"capacity", "refillPerSec"},
	"fixedWindow":      {"limit", "windowMs", "calendar", "timezone"},
	"slidingWindow":    {"limit", "windowMs", "buckets"},
	"slidingWindowLog": {"limit", "windowMs"},
}

// sluiceLimit is l as a sluice.Limit, unvalidated beyond the strategy's name and parameters; field
// prefixes error fields ("limits[0]").
func (l Limit) sluiceLimit(field string) (sluice.Limit, error) {
	out := sluice.Limit{Name: l.Name}
	switch l.Unit {
	case "", "cost":
	case "request":
		out.Unit = sluice.UnitRequest
	default:
		return out, invalid(field+".unit", "must be request or cost, got %q", l.Unit)
	}
	allowed, ok := params[l.Strategy]
	if !ok {
		return out, invalid(field+".strategy", "must be gcra, tokenBucket, fixedWindow, slidingWindow or slidingWindowLog, got %q", l.Strategy)
	}
	for _, p := range []struct {
		name string
		set  bool
	}{{"limit", l.Limit != 0}, {"periodMs", l.PeriodMs != 0}, {"burst", l.Burst != 0}, {"capacity", l.Capacity != 0},
		{"refillPerSec", l.RefillPerSec != 0}, {"windowMs", l.WindowMs != 0}, {"buckets", l.Buckets != 0},
		{"calendar", l.Calendar != ""}, {"timezone", l.TimeZone != ""}} {
		if p.set && !contains(allowed, p.name) {
			return out, invalid(field+"."+p.name, "is not a parameter of %s", l.Strategy)
		}
	}
	switch l.Strategy {
	case "gcra":
		out.Strategy = sluice.GCRA{Limit: l.Limit, PeriodMs: l.PeriodMs, Burst: l.Burst}
	case "tokenBucket":
		out.Strategy = sluice.TokenBucket{Capacity: l.Capacity, RefillPerSec: l.RefillPerSec}
	case "fixedWindow":
		out.Strategy = sluice.FixedWindow{Limit: l.Limit, WindowMs: l.WindowMs, Calendar: sluice.Calendar(l.Calendar), TimeZone: l.TimeZone}
	case "slidingWindow":
		out.Strategy = sluice.SlidingWindow{Limit: l.Limit, WindowMs: l.WindowMs, Buckets: l.Buckets}
	case "slidingWindowLog":
		out.Strategy = sluice.SlidingWindowLog{Limit: l.Limit, WindowMs: l.WindowMs}
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// NewPolicy builds the policy named name from limits in their wire form, with sluice.NewPolicy. An
// error is a *sluice.InvalidError naming the field as the wire does ("limits[0].periodMs").
func NewPolicy(name string, limits []Limit) (*sluice.Policy, error) {
	if len(limits) == 0 {
		return nil, invalid("limits", "a policy needs at least one limit")
	}
	if len(limits) > MaxLimits {
		return nil, invalid("limits", "at most %d limits, got %d", MaxLimits, len(limits))
	}
	ls := make([]sluice.Limit, len(limits))
	for i, l := range limits {
		field := fmt.Sprintf("limits[%d]", i)
		if len(l.Name) > 128 || !utf8.ValidString(l.Name) {
			return nil, invalid(field+".name", "must be at most 128 bytes of UTF-8")
		}
		sl, err := l.sluiceLimit(field)
		if err != nil {
			return nil, err
		}
		ls[i] = sl
	}
	return sluice.NewPolicy(name, ls...)
}

// LimitsOf is p's limits in their wire form: NewPolicy(p.Name(), LimitsOf(p)) is a policy Equal to
// p.
func LimitsOf(p *sluice.Policy) []Limit {
	var out []Limit
	for _, l := range p.Limits() {
		w := Limit{Name: l.Name, Unit: l.Unit.String(), Strategy: l.Strategy.Kind()}
		switch s := l.Strategy.(type) {
		case sluice.GCRA:
			w.Limit, w.PeriodMs, w.Burst = s.Limit, s.PeriodMs, s.Burst
		case sluice.TokenBucket:
			w.Capacity, w.RefillPerSec = s.Capacity, s.RefillPerSec
		case sluice.FixedWindow:
			w.Limit, w.WindowMs, w.Calendar, w.TimeZone = s.Limit, s.WindowMs, string(s.Calendar), s.TimeZone
		case sluice.SlidingWindow:
			w.Limit, w.WindowMs, w.Buckets = s.Limit, s.WindowMs, s.Buckets
		case sluice.SlidingWindowLog:
			w.Limit, w.WindowMs = s.Limit, s.WindowMs
		}
		out = append(out, w)
	}
	return out
}

// Op is what a Change does.
type Op string

const (
	// OpPut sets Change.Override, replacing any override of its policy and key.
	OpPut Op = "put"
	// OpDelete deletes the override of Change.Override's Policy and Key.
	OpDelete Op = "delete"
	// OpExpire deletes the override of Change.Override's Policy and Key if it has expired by
	// Change.Override.ExpiresAt: the sweep of expired overrides, which never deletes one set
	// again since.
	OpExpire Op = "expire"
	// OpReload is delivered by a Backend's Watch when changes may have been missed (a
	// subscription lost and made again): the Table reloads everything.
	OpReload Op = "reload"
)

// Change is one change to a backend's overrides, as Backend.Apply takes it and Backend.Watch
// delivers it.
type Change struct {
	Op Op `json:"op"`
	// Override is the override put, or, for a delete or an expire, its Policy and Key (and, for an
	// expire, the instant as ExpiresAt).
	Override Override `json:"override"`
	// Origin identifies the change's writer (a Table, and a sequence number), so that a Table
	// knows its own changes when the backend delivers them back. Opaque.
	Origin string `json:"origin,omitempty"`
}

// Backend keeps every override of a fleet and tells every process of every change. A Backend is
// safe for concurrent use.
type Backend interface {
	// Apply applies c (OpPut, OpDelete or OpExpire) and tells every Watch of it, in the order the
	// backend applied the changes. existed reports whether there was an override of its policy
	// and key (for OpExpire, whether it deleted one). A delete or expire that deleted nothing
	// may tell no one.
	Apply(ctx context.Context, c Change) (existed bool, err error)
	// Load returns every override the backend holds, expired ones included, in no order.
	Load(ctx context.Context) ([]Override, error)
	// Watch subscribes to changes, and returns once subscribed (or on error, having subscribed to
	// nothing). Until ctx ends it then calls fn, from one goroutine at a time, with every change
	// any process applies, in the backend's order; when the subscription is lost it subscribes
	// again, and then calls fn with Change{Op: OpReload}, since changes may have been missed.
	Watch(ctx context.Context, fn func(Change)) error
}

// EncodeChange is c as JSON, the form backends store and send.
func EncodeChange(c Change) ([]byte, error) { return marshal(c) }

// EncodeOverride is o as JSON.
func EncodeOverride(o Override) ([]byte, error) { return marshal(o) }

// marshal is v as compact JSON without HTML escaping (<, > and & stay one byte).
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// DecodeOverride reads an Override's JSON, as EncodeOverride writes it, and checks its shape: a
// policy name, a key, exactly one of a plan and limits, a reason in bounds. Unknown fields are
// ignored (a newer build may add some); trailing data is an error. It does not resolve the plan nor
// validate the limits' parameters: Table does.
func DecodeOverride(data []byte) (Override, error) {
	var o Override
	if err := decode(data, &o); err != nil {
		return Override{}, err
	}
	if err := checkShape(&o); err != nil {
		return Override{}, err
	}
	return o, nil
}

// DecodeChange reads a Change's JSON, as EncodeChange writes it, and checks its shape as
// DecodeOverride does (a delete or expire needs only a policy and a key; a reload nothing).
func DecodeChange(data []byte) (Change, error) {
	var c Change
	if err := decode(data, &c); err != nil {
		return Change{}, err
	}
	switch c.Op {
	case OpPut:
		if err := checkShape(&c.Override); err != nil {
			return Change{}, err
		}
	case OpDelete, OpExpire:
		if err := checkRef(c.Override.Policy, c.Override.Key); err != nil {
			return Change{}, err
		}
	case OpReload:
	default:
		return Change{}, invalid("op", "must be put, delete, expire or reload, got %q", c.Op)
	}
	return c, nil
}

func decode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("overrides: decoding JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("overrides: decoding JSON: trailing data after the value")
	}
	return nil
}

// checkRef checks a policy name and a key.
func checkRef(policy, key string) error {
	if policy == "" || len(policy) > 128 {
		return invalid("policy", "must be 1 to 128 bytes, got %d", len(policy))
	}
	if key == "" || len(key) > sluice.MaxKeyLen {
		return invalid("key", "must be 1 to %d bytes, got %d", sluice.MaxKeyLen, len(key))
	}
	if !utf8.ValidString(key) {
		return invalid("key", "must be UTF-8")
	}
	return nil
}

// checkShape checks what can be checked of o without its policy: names, bounds, and one of a plan
// and limits.
func checkShape(o *Override) error {
	if err := checkRef(o.Policy, o.Key); err != nil {
		return err
	}
	switch {
	case o.Plan != "" && len(o.Limits) > 0:
		return invalid("plan", "set a plan or limits, not both")
	case o.Plan == "" && len(o.Limits) == 0:
		return invalid("plan", "an override needs a plan or limits")
	case len(o.Plan) > 128 || !utf8.ValidString(o.Plan):
		return invalid("plan", "must be at most 128 bytes of UTF-8")
	case len(o.Limits) > MaxLimits:
		return invalid("limits", "at most %d limits, got %d", MaxLimits, len(o.Limits))
	case o.ExpiresAt < 0:
		return invalid("expiresAt", "must be an epoch ms, or 0 for never, got %d", o.ExpiresAt)
	case len(o.Reason) > MaxReasonLen:
		return invalid("reason", "must be at most %d bytes, got %d", MaxReasonLen, len(o.Reason))
	case !utf8.ValidString(o.Reason):
		return invalid("reason", "must be UTF-8")
	}
	return nil
}

// checkSize checks that o's JSON fits MaxJSONLen, naming the largest of its parts when not.
func checkSize(o *Override) error {
	b, err := marshal(o)
	if err != nil {
		return invalid("limits", "cannot be written as JSON: %v", err)
	}
	if len(b) <= MaxJSONLen {
		return nil
	}
	size := func(v any) int { b, _ := marshal(v); return len(b) }
	field, most := "key", size(o.Key)
	if n := size(o.Reason); n > most {
		field, most = "reason", n
	}
	if n := size(o.Limits); n > most {
		field = "limits"
	}
	return invalid(field, "the override is %d bytes of JSON, more than %d", len(b), MaxJSONLen)
}

func invalid(field, format string, args ...any) *sluice.InvalidError {
	return &sluice.InvalidError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Plans is a fixed set of policies and their plans, for Config.Resolve: Plans[policy][""] is the
// policy as configured, Plans[policy][plan] its plans.
type Plans map[string]map[string]*sluice.Policy

// Resolve is Config.Resolve over p.
func (p Plans) Resolve(policy, plan string) (*sluice.Policy, bool) {
	if p[policy][""] == nil {
		return nil, false
	}
	pol, ok := p[policy][plan]
	return pol, ok && pol != nil
}
