package envoy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/config"
)

// GeneratedPrefix starts the name of every policy Load generates for a rate_limit block; config
// policies must not use it.
const GeneratedPrefix = "envoy:"

// Bounds that keep a hostile or runaway file (aliases can multiply nodes) from costing unbounded
// time and memory.
const (
	maxDepth       = 32
	maxDescriptors = 100_000
)

// Error is an invalid rate-limit config file: File names it, Path the offending field (as in
// "descriptors[0].rate_limit.unit") and Line its line, 0 when unknown. It matches config.ErrConfig
// with errors.Is, so the CLI reports it like any other config error.
type Error struct {
	File   string
	Path   string
	Line   int
	Reason string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("envoy: ")
	b.WriteString(e.File)
	if e.Path != "" {
		b.WriteString(": ")
		b.WriteString(e.Path)
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Is makes errors.Is(err, config.ErrConfig) true.
func (e *Error) Is(target error) bool { return target == config.ErrConfig }

// Rules are loaded rate-limit config files: one descriptor tree per domain. Rules are immutable and
// safe for concurrent use.
type Rules struct {
	domains  map[string]*node
	files    map[string]string // domain → the file that defined it
	policies []*sluice.Policy  // generated for rate_limit blocks, one per shape, by name
	named    map[string]string // sluice policy named by a rule → where, for Validate
}

// node is one descriptor of the tree (the root of a domain has no key). Its children are looked up
// most specific first: an exact key and value, then a wildcard value, then the key alone.
type node struct {
	key, value string
	glob       []string // value split at '*' when it holds one
	share      bool     // share_threshold: every value matching glob shares one state
	rule       *rule    // nil when the descriptor sets no rate_limit

	exact map[string]*node // by key + "\x00" + value
	wild  []*node          // most literal characters first, then file order
	// wildSeen holds the key and value of each wildcard child, to refuse duplicates.
	wildSeen map[string]bool
	any      map[string]*node // by key
}

// rule is the limit of one descriptor.
type rule struct {
	id        string // envoyproxy/ratelimit's full key: domain.key_value.key
	name      string // rate_limit.name, what replaces refers to
	replaces  []string
	unlimited bool
	shadow    bool
	// policy is the sluice policy deciding the rule: a generated fixed window, or one named by the
	// rule. Empty for unlimited rules.
	policy string
	// denyAll is requests_per_unit 0: envoyproxy/ratelimit then denies everything, and no sluice
	// strategy holds a limit of 0.
	denyAll bool
	unitMs  int64
	// limit is the current_limit reported for a rate_limit block; nil for a named policy, whose
	// binding limit is described per decision.
	limit *rlsv3.RateLimitResponse_RateLimit
}

// label names the rule in the RateLimit header fields.
func (r *rule) label() string {
	if r.name != "" {
		return r.name
	}
	return r.id
}

var units = map[string]struct {
	ms   int64
	enum rlsv3.RateLimitResponse_RateLimit_Unit
}{
	"second": {1000, rlsv3.RateLimitResponse_RateLimit_SECOND},
	"minute": {60_000, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	"hour":   {3_600_000, rlsv3.RateLimitResponse_RateLimit_HOUR},
	"day":    {86_400_000, rlsv3.RateLimitResponse_RateLimit_DAY},
	"week":   {7 * 86_400_000, rlsv3.RateLimitResponse_RateLimit_WEEK},
	// Like envoyproxy/ratelimit: a month is 30 days and a year 365.
	"month": {30 * 86_400_000, rlsv3.RateLimitResponse_RateLimit_MONTH},
	"year":  {365 * 86_400_000, rlsv3.RateLimitResponse_RateLimit_YEAR},
}

// Load reads the envoyproxy/ratelimit config files that patterns name (globs allowed), one domain
// per file. A pattern without glob characters must name an existing file; a glob may match none.
// Two files defining one domain are an error, as in envoyproxy/ratelimit by default.
func Load(patterns []string) (*Rules, error) {
	var files []string
	for i, pattern := range patterns {
		matches, err := filepath.Glob(pattern)
		if err != nil {
			return nil, &Error{File: pattern, Path: fmt.Sprintf("envoy[%d]", i), Reason: err.Error()}
		}
		if len(matches) == 0 && !strings.ContainsAny(pattern, `*?[\`) {
			return nil, &Error{File: pattern, Reason: "no such file"}
		}
		slices.Sort(matches)
		for _, m := range matches {
			if !slices.Contains(files, m) {
				files = append(files, m)
			}
		}
	}
	all := &Rules{domains: map[string]*node{}, files: map[string]string{}, named: map[string]string{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, &Error{File: f, Reason: err.Error()}
		}
		r, err := Parse(f, data)
		if err != nil {
			return nil, err
		}
		for d, root := range r.domains {
			if prev, dup := all.files[d]; dup {
				return nil, &Error{File: f, Path: "domain", Reason: fmt.Sprintf("domain %q is already defined in %s", d, prev)}
			}
			all.domains[d], all.files[d] = root, f
		}
		for name, where := range r.named {
			if _, ok := all.named[name]; !ok {
				all.named[name] = where
			}
		}
		all.policies = append(all.policies, r.policies...)
	}
	all.policies = dedupe(all.policies)
	return all, nil
}

// Parse reads one config file's contents; name is how errors refer to it.
func Parse(name string, data []byte) (*Rules, error) {
	p := &parser{file: name, shapes: map[string]*sluice.Policy{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Error{File: name, Reason: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: name, Path: "domain", Reason: "config file cannot have empty domain"}
	}
	root := &node{}
	domain, err := p.root(deref(doc.Content[0]), root)
	if err != nil {
		return nil, err
	}
	r := &Rules{
		domains: map[string]*node{domain: root},
		files:   map[string]string{domain: name},
		named:   p.named,
	}
	for _, pol := range p.shapes {
		r.policies = append(r.policies, pol)
	}
	r.policies = dedupe(r.policies)
	return r, nil
}

func dedupe(ps []*sluice.Policy) []*sluice.Policy {
	slices.SortFunc(ps, func(a, b *sluice.Policy) int { return strings.Compare(a.Name(), b.Name()) })
	return slices.CompactFunc(ps, func(a, b *sluice.Policy) bool { return a.Name() == b.Name() })
}

// Domains returns the domains held, sorted.
func (r *Rules) Domains() []string {
	out := make([]string, 0, len(r.domains))
	for d := range r.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// Policies returns the fixed-window policies generated for the rate_limit blocks, one per distinct
// (unit, requests_per_unit), named GeneratedPrefix + unit + ":" + requests_per_unit. The Service
// installs them in the Server's limiter beside the config's policies.
func (r *Rules) Policies() []*sluice.Policy { return slices.Clone(r.policies) }

// Validate checks the rules against a sluice config: every policy a rule names must exist, and no
// config policy may take a generated name. Run it wherever the config or the rules are (re)loaded.
func (r *Rules) Validate(cfg *config.Config) error {
	have := map[string]bool{}
	for _, p := range cfg.Policies {
		have[p.Name()] = true
		if strings.HasPrefix(p.Name(), GeneratedPrefix) {
			return &config.Error{Path: "policies." + p.Name(), Reason: "names starting with " + GeneratedPrefix + " are reserved for Envoy rate_limit rules"}
		}
	}
	names := make([]string, 0, len(r.named))
	for n := range r.named {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if !have[n] {
			file, path, _ := strings.Cut(r.named[n], "\x00")
			return &Error{File: file, Path: path, Reason: fmt.Sprintf("no policy %q in the sluice config", n)}
		}
	}
	return nil
}

type parser struct {
	file   string
	domain string
	count  int
	shapes map[string]*sluice.Policy
	named  map[string]string
}

func (p *parser) fail(path string, n *yaml.Node, format string, args ...any) error {
	e := &Error{File: p.file, Path: path, Reason: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	return e
}

// deref follows an alias to the node it names.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < maxDepth; i++ {
		n = n.Alias
	}
	return n
}

// fields walks a mapping node, calling f for each key; keys must be strings and appear once.
func (p *parser) fields(path string, n *yaml.Node, f func(key string, v *yaml.Node) error) error {
	if n == nil || n.Kind != yaml.MappingNode {
		return p.fail(path, n, "must be a mapping")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			return p.fail(path, n.Content[i], "keys must be strings")
		}
		if seen[k.Value] {
			return p.fail(join(path, k.Value), k, "is set twice")
		}
		seen[k.Value] = true
		if err := f(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (p *parser) str(path string, n *yaml.Node) (string, error) {
	if n == nil || n.Kind != yaml.ScalarNode {
		return "", p.fail(path, n, "must be a string")
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

func (p *parser) boolean(path string, n *yaml.Node) (bool, error) {
	var b bool
	if n == nil || n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return false, p.fail(path, n, "must be true or false")
	}
	return b, nil
}

func (p *parser) root(n *yaml.Node, root *node) (string, error) {
	var domain string
	var descs *yaml.Node
	err := p.fields("", n, func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "domain":
			domain, err = p.str("domain", v)
		case "descriptors":
			descs = v
		default:
			err = p.fail(key, v, "unknown key (want domain or descriptors)")
		}
		return err
	})
	if err != nil {
		return "", err
	}
	if domain == "" {
		return "", p.fail("domain", n, "config file cannot have empty domain")
	}
	p.domain = domain
	return domain, p.descriptors("descriptors", descs, root, domain, 1)
}

func (p *parser) descriptors(path string, n *yaml.Node, parent *node, id string, depth int) error {
	if n == nil || n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.fail(path, n, "must be a list of descriptors")
	}
	if depth > maxDepth {
		return p.fail(path, n, "descriptors nest deeper than %d levels", maxDepth)
	}
	for i, c := range n.Content {
		if p.count++; p.count > maxDescriptors {
			return p.fail(path, c, "more than %d descriptors", maxDescriptors)
		}
		if err := p.descriptor(fmt.Sprintf("%s[%d]", path, i), deref(c), parent, id, depth); err != nil {
			return err
		}
	}
	// Most literal characters first; the stable sort keeps file order among equals.
	slices.SortStableFunc(parent.wild, func(a, b *node) int {
		return (len(b.value) - strings.Count(b.value, "*")) - (len(a.value) - strings.Count(a.value, "*"))
	})
	return nil
}

func (p *parser) descriptor(path string, n *yaml.Node, parent *node, parentID string, depth int) error {
	d := &node{}
	var rl, kids *yaml.Node
	var shadow bool
	err := p.fields(path, n, func(key string, v *yaml.Node) error {
		var err error
		fp := join(path, key)
		switch key {
		case "key":
			d.key, err = p.str(fp, v)
		case "value":
			d.value, err = p.str(fp, v)
		case "rate_limit":
			rl = v
		case "descriptors":
			kids = v
		case "shadow_mode":
			shadow, err = p.boolean(fp, v)
		case "share_threshold":
			d.share, err = p.boolean(fp, v)
		case "quota_mode":
			var on bool
			if on, err = p.boolean(fp, v); err == nil && on {
				err = p.fail(fp, v, "quota_mode is not supported by sluice")
			}
		case "detailed_metric", "value_to_metric":
			// Metric naming options of envoyproxy/ratelimit; sluice's metrics are per policy.
			_, err = p.boolean(fp, v)
		case "metadata":
			// Free-form annotations; nothing to check.
		default:
			err = p.fail(fp, v, "unknown key")
		}
		return err
	})
	if err != nil {
		return err
	}
	if d.key == "" {
		return p.fail(join(path, "key"), n, "descriptor has empty key")
	}
	finalKey := d.key
	if d.value != "" {
		finalKey += "_" + d.value
	}
	id := parentID + "." + finalKey
	if strings.Contains(d.value, "*") {
		d.glob = strings.Split(d.value, "*")
	} else if d.share {
		return p.fail(join(path, "share_threshold"), n, "applies only to a value with a * wildcard")
	}
	if err := parent.add(d); err != nil {
		return p.fail(path, n, "duplicate descriptor composite key '%s'", id)
	}
	if rl != nil && rl.Tag != "!!null" {
		if d.rule, err = p.rateLimit(join(path, "rate_limit"), rl, id); err != nil {
			return err
		}
		d.rule.shadow = shadow
	}
	return p.descriptors(join(path, "descriptors"), kids, d, id, depth+1)
}

// add files child d under n.
func (n *node) add(d *node) error {
	switch {
	case d.glob != nil:
		if n.wildSeen == nil {
			n.wildSeen = map[string]bool{}
		}
		k := d.key + "\x00" + d.value
		if n.wildSeen[k] {
			return errors.New("duplicate")
		}
		n.wildSeen[k] = true
		n.wild = append(n.wild, d) // sorted once the list is read
	case d.value == "":
		if n.any == nil {
			n.any = map[string]*node{}
		}
		if _, dup := n.any[d.key]; dup {
			return errors.New("duplicate")
		}
		n.any[d.key] = d
	default:
		if n.exact == nil {
			n.exact = map[string]*node{}
		}
		k := d.key + "\x00" + d.value
		if _, dup := n.exact[k]; dup {
			return errors.New("duplicate")
		}
		n.exact[k] = d
	}
	return nil
}

func (p *parser) rateLimit(path string, n *yaml.Node, id string) (*rule, error) {
	r := &rule{id: id}
	var unit string
	var rpu uint32
	var hasUnit, hasRPU bool
	err := p.fields(path, n, func(key string, v *yaml.Node) error {
		var err error
		fp := join(path, key)
		switch key {
		case "unit":
			unit, err = p.str(fp, v)
			hasUnit = unit != ""
		case "requests_per_unit":
			hasRPU = true
			if v.Kind != yaml.ScalarNode || v.Decode(&rpu) != nil {
				err = p.fail(fp, v, "must be a whole number from 0 to 4294967295, got %q", v.Value)
			}
		case "unlimited":
			r.unlimited, err = p.boolean(fp, v)
		case "name":
			r.name, err = p.str(fp, v)
		case "replaces":
			err = p.replaces(fp, v, r)
		case "policy":
			r.policy, err = p.str(fp, v)
			if err == nil && r.policy == "" {
				err = p.fail(fp, v, "must name a sluice policy")
			}
		default:
			err = p.fail(fp, v, "unknown key")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, name := range r.replaces {
		if name == r.name {
			return nil, p.fail(join(path, "replaces"), n, "replaces should not contain name of same descriptor")
		}
	}
	switch {
	case r.policy != "" && (r.unlimited || hasUnit || hasRPU):
		return nil, p.fail(join(path, "policy"), n, "a rate_limit names a policy or sets unit and requests_per_unit or unlimited, not several")
	case r.policy != "":
		if strings.HasPrefix(r.policy, GeneratedPrefix) {
			return nil, p.fail(join(path, "policy"), n, "names starting with %s are reserved", GeneratedPrefix)
		}
		if _, ok := p.named[r.policy]; !ok {
			if p.named == nil {
				p.named = map[string]string{}
			}
			p.named[r.policy] = p.file + "\x00" + join(path, "policy")
		}
		return r, nil
	case r.unlimited:
		if _, ok := units[strings.ToLower(unit)]; ok {
			return nil, p.fail(join(path, "unit"), n, "should not specify rate limit unit when unlimited")
		}
		return r, nil
	}
	u, ok := units[strings.ToLower(unit)]
	if !ok {
		return nil, p.fail(join(path, "unit"), n, "invalid rate limit unit '%s' (want second, minute, hour, day, week, month or year)", unit)
	}
	lower := strings.ToLower(unit)
	r.unitMs = u.ms
	r.limit = &rlsv3.RateLimitResponse_RateLimit{Name: r.name, RequestsPerUnit: rpu, Unit: u.enum}
	if rpu == 0 {
		r.denyAll = true
		return r, nil
	}
	r.policy = GeneratedPrefix + lower + ":" + strconv.FormatUint(uint64(rpu), 10)
	if _, ok := p.shapes[r.policy]; !ok {
		pol, err := sluice.NewPolicy(r.policy, sluice.Limit{
			Name:     lower,
			Strategy: sluice.FixedWindow{Limit: float64(rpu), WindowMs: float64(u.ms)},
			Unit:     sluice.UnitCost,
		})
		if err != nil {
			return nil, p.fail(path, n, "%v", err)
		}
		p.shapes[r.policy] = pol
	}
	return r, nil
}

func (p *parser) replaces(path string, n *yaml.Node, r *rule) error {
	if n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.fail(path, n, "must be a list of {name: …}")
	}
	for i, c := range n.Content {
		ip := fmt.Sprintf("%s[%d]", path, i)
		var name string
		err := p.fields(ip, deref(c), func(key string, v *yaml.Node) error {
			if key != "name" {
				return p.fail(join(ip, key), v, "unknown key")
			}
			var err error
			name, err = p.str(join(ip, key), v)
			return err
		})
		if err != nil {
			return err
		}
		if name == "" {
			return p.fail(ip, c, "should not have an empty replaces entry")
		}
		r.replaces = append(r.replaces, name)
	}
	return nil
}
