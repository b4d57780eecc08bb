// Package config reads sluice serve's configuration: a YAML file naming the store, the listen
// addresses, the fail mode and the policies, with the conformance vectors' parameter names.
//
//	store: memory                  # a store URL; memory is the default
//	http: 127.0.0.1:8080           # the HTTP JSON API, the forward-auth gate, /metrics
//	grpc: 127.0.0.1:8081           # the native gRPC API and Envoy's rate-limit API
//	failMode: open                 # when the store fails: open (allow) or closed (deny)
//	storeTimeout: 250ms            # the longest a store call may take; by default the store's own
//	requireStore: true             # exit at start when the store cannot answer (default: serve, not ready)
//	policies:
//	  api:
//	    strategy: gcra
//	    limit: 100
//	    period: 1m                 # or periodMs: 60000
//	    burst: 20
//	    nearCache: true            # answer this policy's denials locally until they end (shared stores)
//	    lease: true                # spend leased slices of a hot key's limit locally (package lease)
//	  gpt-4o:
//	    failMode: closed
//	    limits:
//	      - {name: requests, unit: request, strategy: slidingWindow, limit: 2, window: 1m, buckets: 60}
//	      - {name: tokens, strategy: tokenBucket, capacity: 1000, refillPerSec: 16.666666666666668}
//	  tiers:
//	    plans:                     # each plan one limit's fields or limits, as a policy's
//	      free: {strategy: gcra, limit: 100, period: 1m, burst: 10}
//	      pro:
//	        limits:
//	          - {name: requests, unit: request, strategy: gcra, limit: 1000, period: 1m, burst: 100}
//	          - {name: tokens, strategy: tokenBucket, capacity: 1000000, refillPerSec: 1000}
//	    plan: free                 # the default plan; the policy's other fields apply to every plan
//	envoy: [/etc/ratelimit/config/*.yaml]
//	streams:                       # stream mode (docs/stream.md); read at start, not on reload
//	  store: memory                # memory (the default) or a postgres:// URL, apart from store
//	  queries:
//	    rate-limiter: {stream: api-requests, window: 2s, grace: 0s, idleFlush: 500ms, quota: 5}
//
// Every error names the offending path, such as policies.gpt-4o.limits[1].refillPerSec or
// policies.tiers.plans.pro.limits[0].limit; an unknown field names the nearest known one. Options
// valid but idle on the store in use are Warnings, not errors.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/concurrency"
	"github.com/sluicehq/sluice/stream"
)

// Defaults of the fields a file may leave out.
const (
	DefaultStore = "memory"
	DefaultHTTP  = "127.0.0.1:8080"
	DefaultGRPC  = "127.0.0.1:8081"
	// DefaultMaxKeys bounds the embedded store: about 100 MB of keys at the sizes measured in
	// docs/benchmarks.md, with room for the process.
	DefaultMaxKeys = 1_000_000
	// DefaultMaxSlotTTL, DefaultMaxSlotLimit and DefaultMaxSettle bound what one call may ask.
	DefaultMaxSlotTTL   = time.Hour
	DefaultMaxSlotLimit = 100_000
	DefaultMaxSettle    = 1_000_000_000
)

// FailMode says what a check answers when the store cannot: FailOpen allows, FailClosed denies.
type FailMode string

const (
	FailOpen   FailMode = "open"
	FailClosed FailMode = "closed"
)

// Config is a parsed, validated configuration.
type Config struct {
	Store    string
	HTTP     string
	GRPC     string
	FailMode FailMode
	// StoreTimeout bounds every store call; 0 means the store's own default (package server).
	StoreTimeout time.Duration
	// Policies in name order, each built and validated.
	Policies []Policy
	// Envoy lists paths (globs allowed) of envoyproxy/ratelimit config files.
	Envoy []string
	// Streams is the streams section; nil when the file has none.
	Streams *Streams
	// MaxKeys caps the keys the embedded (memory) store holds, concurrency keys included; default
	// DefaultMaxKeys. At the cap a new key takes an idle key's place or, with none idle, is refused
	// and decided by the fail mode. Read at start only.
	MaxKeys int
	// MaxSlotTTL is the longest ttlMs an admit or heartbeat may ask; default DefaultMaxSlotTTL.
	MaxSlotTTL time.Duration
	// MaxSlotLimit is the largest concurrency limit an admit may ask; default DefaultMaxSlotLimit.
	MaxSlotLimit int64
	// MaxSettle is the largest reserved or actual a settle may carry, so one call cannot put a key
	// deeper in debt than this; default DefaultMaxSettle.
	MaxSettle int64
	// RequireStore makes sluice serve exit when the store cannot answer at start, instead of
	// serving (not ready) until it does. Read at start only.
	RequireStore bool
	// Overrides says where the per-key overrides (package overrides) are kept on the embedded
	// store, and how often a shared store's are reloaded whole. Read at start only.
	Overrides Overrides
	// Console configures the operator console at /ui/ (docs/console.md). Read at start only.
	Console Console
	// Network holds the listeners' timeouts, connection caps, allowed hosts and trusted proxies.
	Network

	maxKeysSet bool // the file set maxKeys, which only the embedded store reads
}

// Overrides configures the per-key overrides. On Redis and PostgreSQL they live in the store and
// every change is pushed to every process; on the embedded store they live in the process.
type Overrides struct {
	// File keeps the embedded store's overrides across restarts, rewritten on every change; ""
	// keeps them in memory only. A shared store keeps its own (a warning).
	File string
	// Refresh is how often a process reloads every override from a shared store, the safety net
	// under the pushed changes; 0 means 30 seconds.
	Refresh time.Duration
}

// Console configures the operator console. Its zero value serves it with top keys on.
type Console struct {
	// Off turns the console off: /ui/ and /v1/console/ answer 404 (YAML: enabled: false).
	Off bool
	// NoTopKeys turns the top-keys sketch off, so that a check does no work for the console
	// (YAML: topKeys: false); Top keys then answers 501.
	NoTopKeys bool
}

// Streams configures stream mode: the store of its log and outputs, and its queries.
type Streams struct {
	// Store is "memory" or a postgres:// (postgresql://) URL; it need not be the limiter's store.
	Store string
	// Queries in name order, each validated.
	Queries []stream.Query
}

// Policy is a configured policy, its fail mode (the file's, unless the policy sets its own) and
// whether a shared store's denials of it are cached near the server (package store/nearcache).
//
// A policy may name plans, each a full set of limits (one limit, or a composite), and a default
// plan: then the embedded *sluice.Policy is the default plan's, Plans[Plan]. The policy's other
// fields (FailMode, NearCache, Lease) apply to every plan.
type Policy struct {
	*sluice.Policy
	FailMode  FailMode
	NearCache bool
	// Lease spends leased slices of a key's limit in the server (package lease): a hot key costs
	// the store one call per lease instead of one per check.
	Lease bool
	// Plans are the policy's plans by plan name; nil for a policy without plans. Each is built by
	// sluice.NewPolicy under the policy's name, not the plan's: the store keys a key's state by
	// policy name, key and limit index, so a key's state is the same whatever plan applies to it
	// (limit i of one plan reads the state limit i of another left, as limit i of a policy changed
	// by a reload does).
	Plans map[string]*sluice.Policy
	// Plan names the default plan, the one whose limits the embedded *sluice.Policy holds; "" for
	// a policy without plans. Plan names follow the rules of policy names.
	Plan string
}

// ErrConfig is what every error of this package matches with errors.Is.
var ErrConfig = errors.New("config: invalid")

// Error is an invalid configuration: Path names the offending field, as in
// "policies.api.limits[0].capacity".
type Error struct {
	Path   string
	Reason string
}

func (e *Error) Error() string        { return "config: " + e.Path + ": " + e.Reason }
func (e *Error) Is(target error) bool { return target == ErrConfig }

func fail(path, format string, args ...any) *Error {
	return &Error{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// Load reads and parses the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// file is the YAML document as written.
type file struct {
	Store        string               `yaml:"store"`
	HTTP         string               `yaml:"http"`
	GRPC         string               `yaml:"grpc"`
	FailMode     string               `yaml:"failMode"`
	StoreTimeout string               `yaml:"storeTimeout"`
	Policies     map[string]rawPolicy `yaml:"policies"`
	Envoy        []string             `yaml:"envoy"`
	Streams      *rawStreams          `yaml:"streams"`
	MaxKeys      *int                 `yaml:"maxKeys"`
	MaxSlotTTL   string               `yaml:"maxSlotTtl"`
	MaxSlotLimit *int64               `yaml:"maxSlotLimit"`
	MaxSettle    *int64               `yaml:"maxSettle"`
	RequireStore yaml.Node            `yaml:"requireStore"`
	Overrides    *rawOverrides        `yaml:"overrides"`
	Console      *rawConsole          `yaml:"console"`
	rawNetwork   `yaml:",inline"`
}

type rawConsole struct {
	Enabled yaml.Node `yaml:"enabled"`
	TopKeys yaml.Node `yaml:"topKeys"`
}

type rawOverrides struct {
	File    string `yaml:"file"`
	Refresh string `yaml:"refresh"`
}

type rawStreams struct {
	Store   string              `yaml:"store"`
	Queries map[string]rawQuery `yaml:"queries"`
}

type rawQuery struct {
	Stream      string   `yaml:"stream"`
	Window      string   `yaml:"window"`
	WindowMs    *float64 `yaml:"windowMs"`
	Grace       string   `yaml:"grace"`
	GraceMs     *float64 `yaml:"graceMs"`
	IdleFlush   string   `yaml:"idleFlush"`
	IdleFlushMs *float64 `yaml:"idleFlushMs"`
	Quota       *float64 `yaml:"quota"`
}

// rawPolicy is a policy as written: its limits (rawPlan), or plans and the default plan's name,
// and the fields that apply to all its limits.
type rawPolicy struct {
	rawPlan   `yaml:",inline"`
	FailMode  string             `yaml:"failMode"`
	NearCache yaml.Node          `yaml:"nearCache"` // checked by buildPolicy, to name its path
	Lease     yaml.Node          `yaml:"lease"`
	Plans     map[string]rawPlan `yaml:"plans"`
	Plan      string             `yaml:"plan"`
}

// rawPlan is a set of limits as written, a policy's or a plan's: either one limit's fields
// inline, or limits.
type rawPlan struct {
	rawLimit `yaml:",inline"`
	Limits   []rawLimit `yaml:"limits"`
}

type rawLimit struct {
	Name     string   `yaml:"name"`
	Unit     string   `yaml:"unit"`
	Strategy string   `yaml:"strategy"`
	Limit    *float64 `yaml:"limit"`
	Burst    *float64 `yaml:"burst"`
	Capacity *float64 `yaml:"capacity"`
	Refill   *float64 `yaml:"refillPerSec"`
	Buckets  *int     `yaml:"buckets"`
	PeriodMs *float64 `yaml:"periodMs"`
	Period   string   `yaml:"period"`
	WindowMs *float64 `yaml:"windowMs"`
	Window   string   `yaml:"window"`
	TimeZone string   `yaml:"timezone"`
}

// Parse reads a YAML configuration, applies the defaults and validates it. Unknown fields are errors.
func Parse(data []byte) (*Config, error) {
	var f file
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		return nil, fail("(file)", "%v", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if err := dec.Decode(new(yaml.Node)); err != io.EOF {
		return nil, fail("(file)", "holds more than one YAML document")
	}
	if err := checkKeys(&doc); err != nil {
		return nil, err
	}
	if err := doc.Decode(&f); err != nil && doc.Kind != 0 {
		return nil, fail("(file)", "%v", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	c := &Config{
		Store:    or(f.Store, DefaultStore),
		HTTP:     or(f.HTTP, DefaultHTTP),
		GRPC:     or(f.GRPC, DefaultGRPC),
		FailMode: FailMode(or(f.FailMode, string(FailOpen))),
		Envoy:    f.Envoy,
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	if f.StoreTimeout != "" {
		d, err := time.ParseDuration(f.StoreTimeout)
		if err != nil || d <= 0 {
			return nil, fail("storeTimeout", "must be a positive duration such as 50ms, got %q", f.StoreTimeout)
		}
		c.StoreTimeout = d
	}
	if err := c.bounds(f); err != nil {
		return nil, err
	}
	required, err := boolean("requireStore", &f.RequireStore)
	if err != nil {
		return nil, err
	}
	c.RequireStore = required
	if ro := f.Overrides; ro != nil {
		c.Overrides.File = ro.File
		if ro.Refresh != "" {
			d, err := time.ParseDuration(ro.Refresh)
			if err != nil || d < time.Second {
				return nil, fail("overrides.refresh", "must be a duration of at least 1s such as 30s, got %q", ro.Refresh)
			}
			c.Overrides.Refresh = d
		}
	}
	if rc := f.Console; rc != nil {
		off, err := unset("console.enabled", &rc.Enabled)
		if err != nil {
			return nil, err
		}
		noTop, err := unset("console.topKeys", &rc.TopKeys)
		if err != nil {
			return nil, err
		}
		c.Console = Console{Off: off, NoTopKeys: noTop}
	}
	if err := c.network(f.rawNetwork); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(f.Policies))
	for name := range f.Policies {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p, err := buildPolicy(name, f.Policies[name], c.FailMode)
		if err != nil {
			return nil, err
		}
		c.Policies = append(c.Policies, p)
	}
	for i, pattern := range c.Envoy {
		if _, err := globCheck(pattern); err != nil {
			return nil, fail(fmt.Sprintf("envoy[%d]", i), "%v", err)
		}
	}
	if len(doc.Content) > 0 && valueOf(doc.Content[0], "streams") != nil {
		var rs rawStreams
		if f.Streams != nil {
			rs = *f.Streams
		}
		s, err := buildStreams(rs)
		if err != nil {
			return nil, err
		}
		c.Streams = s
	}
	return c, nil
}

// bounds applies the file's ceilings, or their defaults.
func (c *Config) bounds(f file) *Error {
	c.MaxKeys, c.MaxSlotTTL, c.MaxSlotLimit, c.MaxSettle = DefaultMaxKeys, DefaultMaxSlotTTL, DefaultMaxSlotLimit, DefaultMaxSettle
	if f.MaxKeys != nil {
		if *f.MaxKeys < 1 {
			return fail("maxKeys", "must be at least 1, got %d", *f.MaxKeys)
		}
		c.MaxKeys, c.maxKeysSet = *f.MaxKeys, true
	}
	if f.MaxSlotTTL != "" {
		d, err := time.ParseDuration(f.MaxSlotTTL)
		if err != nil || d < time.Millisecond || d.Milliseconds() > concurrency.MaxTTLMs {
			return fail("maxSlotTtl", "must be a duration from 1ms to about 35 years, such as 1h, got %q", f.MaxSlotTTL)
		}
		c.MaxSlotTTL = d
	}
	if f.MaxSlotLimit != nil {
		if *f.MaxSlotLimit < 1 {
			return fail("maxSlotLimit", "must be at least 1, got %d", *f.MaxSlotLimit)
		}
		c.MaxSlotLimit = *f.MaxSlotLimit
	}
	if f.MaxSettle != nil {
		if *f.MaxSettle < 1 || *f.MaxSettle > 1<<53 {
			return fail("maxSettle", "must be from 1 to 2^53, got %d", *f.MaxSettle)
		}
		c.MaxSettle = *f.MaxSettle
	}
	return nil
}

// Check validates the fields that flags may override: call it after changing them.
func (c *Config) Check() error {
	if err := c.check(); err != nil {
		return err
	}
	if c.StoreTimeout < 0 {
		return fail("storeTimeout", "must be positive, got %v", c.StoreTimeout)
	}
	if c.MaxKeys < 0 {
		return fail("maxKeys", "must be at least 1, got %d", c.MaxKeys)
	}
	return nil
}

func (c *Config) check() *Error {
	for _, a := range []struct{ path, addr string }{{"http", c.HTTP}, {"grpc", c.GRPC}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fail(a.path, "must be host:port, got %q", a.addr)
		}
	}
	if c.FailMode != FailOpen && c.FailMode != FailClosed {
		return fail("failMode", "must be open or closed, got %q", c.FailMode)
	}
	return nil
}

// SluicePolicies returns the policies for a sluice.Limiter.
func (c *Config) SluicePolicies() []*sluice.Policy {
	out := make([]*sluice.Policy, len(c.Policies))
	for i, p := range c.Policies {
		out[i] = p.Policy
	}
	return out
}

// NearCache reports whether the named policy caches its denials near the server; false for an
// unknown policy. It relies on Policies being in name order, as Parse leaves them.
func (c *Config) NearCache(policy string) bool {
	i, found := slices.BinarySearchFunc(c.Policies, policy, func(p Policy, name string) int {
		return strings.Compare(p.Name(), name)
	})
	return found && c.Policies[i].NearCache
}

// Lease reports whether the named policy's checks are answered from leases (package lease); false
// for an unknown policy.
func (c *Config) Lease(policy string) bool {
	i, found := slices.BinarySearchFunc(c.Policies, policy, func(p Policy, name string) int {
		return strings.Compare(p.Name(), name)
	})
	return found && c.Policies[i].Lease
}

// Embedded reports whether url names the embedded (memory) store.
func Embedded(url string) bool { return url == DefaultStore || url == "memory://" }

// Warnings lists the options that do nothing where the config sets them, each naming its path:
// lease and nearCache on the embedded store, maxKeys on a shared one. They are warnings, not
// errors, because the same file may be meant for the other kind of store (--store overrides).
// Call it after the flags are applied.
func (c *Config) Warnings() []string {
	var out []string
	if Embedded(c.Store) {
		for _, p := range c.Policies {
			if p.NearCache {
				out = append(out, fmt.Sprintf("policies.%s.nearCache: does nothing on the embedded store (memory), which answers as fast as the cache would; it applies over redis or postgres", p.Name()))
			}
			if p.Lease {
				out = append(out, fmt.Sprintf("policies.%s.lease: does nothing on the embedded store (memory), where every check is already local; it applies over redis or postgres", p.Name()))
			}
		}
	} else {
		if c.maxKeysSet {
			out = append(out, fmt.Sprintf("maxKeys: does nothing on store %s; it caps the embedded store (memory) only", RedactURL(c.Store)))
		}
		if c.Overrides.File != "" {
			out = append(out, fmt.Sprintf("overrides.file: does nothing on store %s, which keeps the overrides itself; it applies to the embedded store (memory)", RedactURL(c.Store)))
		}
	}
	return out
}

// FailModeOf returns the fail mode of the named policy, or the file's for an unknown one.
func (c *Config) FailModeOf(policy string) FailMode {
	for _, p := range c.Policies {
		if p.Name() == policy {
			return p.FailMode
		}
	}
	return c.FailMode
}

func buildPolicy(name string, rp rawPolicy, mode FailMode) (Policy, error) {
	path := "policies." + name
	if rp.FailMode != "" {
		mode = FailMode(rp.FailMode)
		if mode != FailOpen && mode != FailClosed {
			return Policy{}, fail(path+".failMode", "must be open or closed, got %q", rp.FailMode)
		}
	}
	near, err := boolean(path+".nearCache", &rp.NearCache)
	if err != nil {
		return Policy{}, err
	}
	leased, err := boolean(path+".lease", &rp.Lease)
	if err != nil {
		return Policy{}, err
	}
	if rp.Plans == nil {
		if rp.Plan != "" {
			return Policy{}, fail(path+".plan", "names a default plan, but the policy has no plans")
		}
		p, err := buildLimits(path, name, rp.rawPlan)
		if err != nil {
			return Policy{}, err
		}
		return Policy{Policy: p, FailMode: mode, NearCache: near, Lease: leased}, nil
	}
	plans, err := buildPlans(path, name, rp)
	if err != nil {
		return Policy{}, err
	}
	return Policy{Policy: plans[rp.Plan], FailMode: mode, NearCache: near, Lease: leased, Plans: plans, Plan: rp.Plan}, nil
}

// buildPlans builds the plans of the policy name written at path, each under the policy's name,
// and checks that rp.Plan names one of them.
func buildPlans(path, name string, rp rawPolicy) (map[string]*sluice.Policy, error) {
	if field := setField(rp.rawLimit); field != "" {
		return nil, fail(path+"."+field, "is set beside plans: a policy with plans sets its limits in each plan")
	}
	if len(rp.Limits) > 0 {
		return nil, fail(path+".limits", "is set beside plans: a policy with plans sets its limits in each plan")
	}
	// A bad policy name is the policy's error, not its first plan's.
	if err := checkName(path, name); err != nil {
		return nil, err
	}
	if len(rp.Plans) == 0 {
		return nil, fail(path+".plans", "is empty: name at least one plan, each with one limit's fields or limits")
	}
	names := make([]string, 0, len(rp.Plans))
	for plan := range rp.Plans {
		names = append(names, plan)
	}
	slices.Sort(names)
	for _, plan := range names {
		if err := checkName(path+".plans."+plan, plan); err != nil {
			return nil, err
		}
	}
	quoted := make([]string, len(names))
	for i, plan := range names {
		quoted[i] = strconv.Quote(plan)
	}
	switch _, ok := rp.Plans[rp.Plan]; {
	case rp.Plan == "":
		return nil, fail(path+".plan", "is missing: a policy with plans names its default plan, one of %s", strings.Join(quoted, ", "))
	case !ok:
		hint := ""
		if near := nearest(rp.Plan, names); near != "" {
			hint = fmt.Sprintf("; did you mean %q?", near)
		}
		return nil, fail(path+".plan", "names no plan of this policy, got %q (the plans: %s)%s", rp.Plan, strings.Join(quoted, ", "), hint)
	}
	plans := make(map[string]*sluice.Policy, len(names))
	for _, plan := range names {
		p, err := buildLimits(path+".plans."+plan, name, rp.Plans[plan])
		if err != nil {
			return nil, err
		}
		plans[plan] = p.WithPlan(plan)
	}
	return plans, nil
}

// buildLimits builds the limits written at path (a policy's or a plan's) into a sluice.Policy
// named name, the policy's name.
func buildLimits(path, name string, rp rawPlan) (*sluice.Policy, error) {
	inline := rp.rawLimit != (rawLimit{})
	var limits []sluice.Limit
	var prefixes []string // the config path of each limit
	switch {
	case inline && len(rp.Limits) > 0:
		return nil, fail(path, "set either one limit's fields or limits, not both")
	case inline:
		l, err := buildLimit(path, rp.rawLimit)
		if err != nil {
			return nil, err
		}
		limits, prefixes = []sluice.Limit{l}, []string{path}
	case len(rp.Limits) == 0:
		return nil, fail(path, "needs a strategy or limits")
	default:
		for i, rl := range rp.Limits {
			lp := fmt.Sprintf("%s.limits[%d]", path, i)
			l, err := buildLimit(lp, rl)
			if err != nil {
				return nil, err
			}
			limits, prefixes = append(limits, l), append(prefixes, lp)
		}
	}
	p, err := sluice.NewPolicy(name, limits...)
	if err != nil {
		var ie *sluice.InvalidError
		if !errors.As(err, &ie) {
			return nil, fail(path, "%v", err)
		}
		written := rp.Limits
		if inline {
			written = []rawLimit{rp.rawLimit}
		}
		return nil, fail(sluicePath(path, prefixes, written, ie.Field), "%s", ie.Reason)
	}
	return p, nil
}

// nameProbe is a valid limit, for checkName to ask sluice.NewPolicy about a name alone.
var nameProbe = sluice.Limit{Strategy: sluice.FixedWindow{Limit: 1, WindowMs: 1000}}

// checkName holds name, written at path, to the rules of a policy's name: sluice.NewPolicy's.
func checkName(path, name string) error {
	_, err := sluice.NewPolicy(name, nameProbe)
	if err == nil {
		return nil
	}
	var ie *sluice.InvalidError
	if errors.As(err, &ie) && ie.Field == "policy" {
		return fail(path+" (the name)", "%s", ie.Reason)
	}
	return fail(path+" (the name)", "%v", err)
}

// setField returns the key of the first field set in rl, in the order rawLimit declares them;
// "" when none is.
func setField(rl rawLimit) string {
	v := reflect.ValueOf(rl)
	for i := range v.NumField() {
		if !v.Field(i).IsZero() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			return name
		}
	}
	return ""
}

// boolean reads a true or false that a file may leave out (or set to null) for false.
// unset reads a boolean that defaults to true: it reports whether the file sets it to false.
func unset(path string, n *yaml.Node) (bool, error) {
	v, err := boolean(path, n)
	absent := n.Kind == 0 || n.ShortTag() == "!!null"
	return err == nil && !absent && !v, err
}

func boolean(path string, n *yaml.Node) (bool, error) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind == 0 || n.ShortTag() == "!!null" {
		return false, nil
	}
	var v bool
	if n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		got := strconv.Quote(n.Value)
		if n.Kind != yaml.ScalarNode {
			got = "a " + strings.TrimPrefix(n.ShortTag(), "!!")
		}
		return false, fail(path, "must be true or false, got %s", got)
	}
	return v, nil
}

// sluicePath turns a field named by sluice.NewPolicy ("limits[1].capacity", "policy") into its
// config path.
func sluicePath(path string, prefixes []string, written []rawLimit, field string) string {
	var i int
	var rest string
	if n, _ := fmt.Sscanf(field, "limits[%d].%s", &i, &rest); n == 2 && i < len(prefixes) {
		// Name a duration the way the file wrote it.
		if rest == "periodMs" && written[i].Period != "" {
			rest = "period"
		}
		if rest == "windowMs" && written[i].Window != "" {
			rest = "window"
		}
		return prefixes[i] + "." + rest
	}
	if field == "policy" {
		return path + " (the name)"
	}
	return path + "." + field
}

func buildLimit(path string, rl rawLimit) (sluice.Limit, error) {
	l := sluice.Limit{Name: rl.Name}
	switch rl.Unit {
	case "", "cost":
	case "request":
		l.Unit = sluice.UnitRequest
	default:
		return l, fail(path+".unit", "must be cost or request, got %q", rl.Unit)
	}
	num := func(field string, v *float64) (float64, error) {
		if v == nil {
			return 0, fail(path+"."+field, "is missing")
		}
		return *v, nil
	}
	period, err := millis(path, "period", rl.Period, rl.PeriodMs)
	if err != nil {
		return l, err
	}
	// A fixed window may be a calendar day or month: window: day, timezone: Europe/Rome.
	var calendar sluice.Calendar
	if rl.Strategy == "fixedWindow" && (rl.Window == string(sluice.Day) || rl.Window == string(sluice.Month)) {
		calendar, rl.Window = sluice.Calendar(rl.Window), ""
	}
	window, err := millis(path, "window", rl.Window, rl.WindowMs)
	if err != nil {
		return l, err
	}
	if calendar != "" {
		if rl.WindowMs != nil {
			return l, fail(path+".window", "set window or windowMs, not both")
		}
		zero := 0.0
		window = &zero
	}
	allowed := map[string][]string{
		"gcra":             {"limit", "period", "burst"},
		"tokenBucket":      {"capacity", "refillPerSec"},
		"fixedWindow":      {"limit", "window", "timezone"},
		"slidingWindow":    {"limit", "window", "buckets"},
		"slidingWindowLog": {"limit", "window"},
	}
	fields, ok := allowed[rl.Strategy]
	if !ok {
		return l, fail(path+".strategy", "must be gcra, tokenBucket, fixedWindow, slidingWindow or slidingWindowLog, got %q", rl.Strategy)
	}
	for _, p := range []struct {
		field string
		set   bool
	}{{"limit", rl.Limit != nil}, {"period", period != nil}, {"burst", rl.Burst != nil}, {"capacity", rl.Capacity != nil},
		{"refillPerSec", rl.Refill != nil}, {"window", window != nil}, {"buckets", rl.Buckets != nil},
		{"timezone", rl.TimeZone != ""}} {
		if p.set && !slices.Contains(fields, p.field) {
			return l, fail(path+"."+p.field, "is not a parameter of %s", rl.Strategy)
		}
	}
	var missing error
	get := func(field string, v *float64) float64 {
		x, err := num(field, v)
		if missing == nil {
			missing = err
		}
		return x
	}
	switch rl.Strategy {
	case "gcra":
		l.Strategy = sluice.GCRA{Limit: get("limit", rl.Limit), PeriodMs: get("period", period), Burst: get("burst", rl.Burst)}
	case "tokenBucket":
		l.Strategy = sluice.TokenBucket{Capacity: get("capacity", rl.Capacity), RefillPerSec: get("refillPerSec", rl.Refill)}
	case "fixedWindow":
		l.Strategy = sluice.FixedWindow{Limit: get("limit", rl.Limit), WindowMs: get("window", window), Calendar: calendar, TimeZone: rl.TimeZone}
	case "slidingWindow":
		if rl.Buckets == nil {
			return l, fail(path+".buckets", "is missing")
		}
		l.Strategy = sluice.SlidingWindow{Limit: get("limit", rl.Limit), WindowMs: get("window", window), Buckets: *rl.Buckets}
	case "slidingWindowLog":
		l.Strategy = sluice.SlidingWindowLog{Limit: get("limit", rl.Limit), WindowMs: get("window", window)}
	}
	return l, missing
}

// millis reads a duration given as a string (name: "1m") or in milliseconds (nameMs: 60000); nil if
// neither is set.
func millis(path, name, text string, ms *float64) (*float64, error) {
	switch {
	case text != "" && ms != nil:
		return nil, fail(path+"."+name, "set %s or %sMs, not both", name, name)
	case text != "":
		d, err := time.ParseDuration(text)
		if err != nil || d <= 0 {
			return nil, fail(path+"."+name, "must be a positive duration such as 1m or 15m, got %q", text)
		}
		v := float64(d) / float64(time.Millisecond)
		return &v, nil
	}
	return ms, nil
}

func buildStreams(rs rawStreams) (*Streams, error) {
	s := &Streams{Store: or(rs.Store, DefaultStore)}
	if s.Store == "memory://" {
		s.Store = DefaultStore
	}
	if s.Store != DefaultStore && !strings.HasPrefix(s.Store, "postgres://") && !strings.HasPrefix(s.Store, "postgresql://") {
		return nil, fail("streams.store", "must be memory or a postgres:// URL, got %q", RedactURL(s.Store))
	}
	names := make([]string, 0, len(rs.Queries))
	for name := range rs.Queries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		q, err := buildQuery(name, rs.Queries[name])
		if err != nil {
			return nil, err
		}
		s.Queries = append(s.Queries, q)
	}
	return s, nil
}

func buildQuery(name string, rq rawQuery) (stream.Query, error) {
	path := "streams.queries." + name
	q := stream.Query{Name: name, Stream: rq.Stream}
	ms := []struct {
		name, text string
		ms         *float64
		min        int64
		dst        *int64
	}{
		{"window", rq.Window, rq.WindowMs, 1, &q.WindowMs},
		{"grace", rq.Grace, rq.GraceMs, 0, &q.GraceMs},
		{"idleFlush", rq.IdleFlush, rq.IdleFlushMs, 0, &q.IdleFlushMs},
	}
	for _, d := range ms {
		v, err := wholeMillis(path, d.name, d.text, d.ms, d.min)
		if err != nil {
			return q, err
		}
		*d.dst = v
	}
	if rq.Quota != nil {
		if *rq.Quota < 0 || *rq.Quota != float64(int64(*rq.Quota)) {
			return q, fail(path+".quota", "must be a whole number, 0 or more, got %v", *rq.Quota)
		}
		q.Quota = int64(*rq.Quota)
	}
	if err := q.Validate(); err != nil {
		var ie *sluice.InvalidError
		if !errors.As(err, &ie) {
			return q, fail(path, "%v", err)
		}
		field := ie.Field
		switch {
		case field == "name":
			return q, fail(path+" (the name)", "%s", ie.Reason)
		case field == "windowMs" && rq.Window != "":
			field = "window"
		}
		return q, fail(path+"."+field, "%s", ie.Reason)
	}
	return q, nil
}

// wholeMillis reads a stream query's duration, written as name (a duration such as 2s) or as
// nameMs (milliseconds), in whole milliseconds of at least min; 0 when neither is set.
func wholeMillis(path, name, text string, ms *float64, min int64) (int64, error) {
	p := path + "." + name
	var v float64
	switch {
	case text != "" && ms != nil:
		return 0, fail(p, "set %s or %sMs, not both", name, name)
	case text != "":
		d, err := time.ParseDuration(text)
		if err != nil {
			return 0, fail(p, "must be a duration such as 2s or 500ms, got %q", text)
		}
		v = float64(d) / float64(time.Millisecond)
	case ms != nil:
		v, p = *ms, p+"Ms"
	case min > 0:
		return 0, fail(p, "is missing")
	}
	if v < float64(min) || v != float64(int64(v)) || v > math.MaxInt64/4 {
		return 0, fail(p, "must be whole milliseconds, at least %dms, got %vms", min, v)
	}
	return int64(v), nil
}

// globCheck rejects a malformed glob pattern; the files it names are read by the Envoy front end.
func globCheck(pattern string) (string, error) {
	if pattern == "" {
		return "", errors.New("is empty")
	}
	_, err := filepath.Match(pattern, "")
	return pattern, err
}

// Keys a file may hold, by level: checkKeys names an unknown one by its path.
var (
	fileKeys    = []string{"store", "http", "grpc", "failMode", "storeTimeout", "policies", "envoy", "streams", "maxKeys", "maxSlotTtl", "maxSlotLimit", "maxSettle", "requireStore", "overrides", "console"}
	streamsKeys = []string{"store", "queries"}
	queryKeys   = []string{"stream", "window", "windowMs", "grace", "graceMs", "idleFlush", "idleFlushMs", "quota"}
	limitKeys   = []string{"name", "unit", "strategy", "limit", "burst", "capacity", "refillPerSec", "buckets",
		"periodMs", "period", "windowMs", "window", "timezone"}
	planKeys   = append([]string{"limits"}, limitKeys...)
	policyKeys = append([]string{"failMode", "nearCache", "lease", "plans", "plan"}, planKeys...)
)

// checkKeys rejects a mapping key the file format does not have, naming its path.
func checkKeys(doc *yaml.Node) error {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if err := keysIn(root, "", fileKeys); err != nil {
		return err
	}
	if err := checkStreamsKeys(valueOf(root, "streams")); err != nil {
		return err
	}
	if o := valueOf(root, "overrides"); o != nil {
		if err := keysIn(o, "overrides.", []string{"file", "refresh"}); err != nil {
			return err
		}
	}
	if o := valueOf(root, "console"); o != nil {
		if err := keysIn(o, "console.", []string{"enabled", "topKeys"}); err != nil {
			return err
		}
	}
	policies := valueOf(root, "policies")
	if policies == nil || policies.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(policies.Content); i += 2 {
		path := "policies." + policies.Content[i].Value
		p := policies.Content[i+1]
		if err := keysIn(p, path+".", policyKeys); err != nil {
			return err
		}
		if err := checkLimitsKeys(p, path); err != nil {
			return err
		}
		plans := valueOf(p, "plans")
		if plans == nil || plans.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(plans.Content); j += 2 {
			plan, node := path+".plans."+plans.Content[j].Value, plans.Content[j+1]
			if err := policyKeysIn(node, plan+"."); err != nil {
				return err
			}
			if err := keysIn(node, plan+".", planKeys); err != nil {
				return err
			}
			if err := checkLimitsKeys(node, plan); err != nil {
				return err
			}
		}
	}
	return nil
}

// policyKeysIn rejects, in the plan m, a field of the policy's that a plan does not have, saying
// where it goes.
func policyKeysIn(m *yaml.Node, prefix string) error {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i].Value; !slices.Contains(planKeys, k) && slices.Contains(policyKeys, k) {
			return fail(prefix+strconv.Quote(k), "unknown field (line %d); %s is the policy's: set it beside plans, where it applies to every plan", m.Content[i].Line, k)
		}
	}
	return nil
}

// checkLimitsKeys is checkKeys for the limits of the policy or plan m, written at path.
func checkLimitsKeys(m *yaml.Node, path string) error {
	limits := valueOf(m, "limits")
	if limits == nil || limits.Kind != yaml.SequenceNode {
		return nil
	}
	for j, l := range limits.Content {
		if err := keysIn(l, fmt.Sprintf("%s.limits[%d].", path, j), limitKeys); err != nil {
			return err
		}
	}
	return nil
}

// checkStreamsKeys is checkKeys for the streams section (nil when absent).
func checkStreamsKeys(streams *yaml.Node) error {
	if streams == nil {
		return nil
	}
	if err := keysIn(streams, "streams.", streamsKeys); err != nil {
		return err
	}
	queries := valueOf(streams, "queries")
	if queries == nil || queries.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(queries.Content); i += 2 {
		if err := keysIn(queries.Content[i+1], "streams.queries."+queries.Content[i].Value+".", queryKeys); err != nil {
			return err
		}
	}
	return nil
}

func keysIn(m *yaml.Node, prefix string, allowed []string) error {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i].Value
		if !slices.Contains(allowed, k) {
			hint := ""
			if near := nearest(k, allowed); near != "" {
				hint = fmt.Sprintf("; did you mean %q?", near)
			}
			return fail(prefix+strconv.Quote(k), "unknown field (line %d)%s", m.Content[i].Line, hint)
		}
		if seen[k] {
			return fail(prefix+k, "set twice (line %d)", m.Content[i].Line)
		}
		seen[k] = true
	}
	return nil
}

// nearest returns the known key closest to k by edit distance, ignoring case, or "" when none is
// close enough to be what was meant (at most 2 edits, and fewer than a third of k's length).
func nearest(k string, known []string) string {
	best, bestD := "", 3
	for _, c := range known {
		if d := editDistance(strings.ToLower(k), strings.ToLower(c)); d < bestD && d*3 < max(len(k), 3) {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func valueOf(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
