package envoy

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice"
)

// match finds the most specific rule for a request descriptor of domain: the descriptor's entries
// must walk the tree to a node with a rate_limit at exactly their depth. At each level an exact key
// and value is tried first, then wildcard values (most literal characters first), then the key
// alone. Unlike envoyproxy/ratelimit, which follows only the first branch that matches at each
// level, a branch that ends without a rule falls back to the less specific ones; but a descriptor
// listed with neither a rate_limit nor descriptors of its own whitelists what reaches it, as in
// envoyproxy/ratelimit, and ends the search. It returns the nodes walked, one per entry, or nil.
func (r *Rules) match(domain string, entries []*rlv3.RateLimitDescriptor_Entry) []*node {
	root := r.domains[domain]
	if root == nil || len(entries) == 0 || len(entries) > maxDepth {
		return nil
	}
	chain, _ := root.find(entries, make([]*node, 0, len(entries)))
	return chain
}

// find walks entries down from n. stop reports that the walk reached a whitelisting node: the
// descriptor has no limit, and no less specific branch may be tried.
func (n *node) find(entries []*rlv3.RateLimitDescriptor_Entry, chain []*node) (_ []*node, stop bool) {
	e := entries[0]
	try := func(c *node) ([]*node, bool) {
		if c.whitelists() {
			return nil, true
		}
		chain := append(chain, c)
		if len(entries) == 1 {
			if c.rule != nil {
				return chain, false
			}
			return nil, false
		}
		return c.find(entries[1:], chain)
	}
	if c := n.exact[e.GetKey()+"\x00"+e.GetValue()]; c != nil {
		if out, stop := try(c); out != nil || stop {
			return out, stop
		}
	}
	for _, c := range n.wild {
		if c.key == e.GetKey() && globMatch(c.glob, e.GetValue()) {
			if out, stop := try(c); out != nil || stop {
				return out, stop
			}
		}
	}
	if c := n.any[e.GetKey()]; c != nil {
		return try(c)
	}
	return nil, false
}

// whitelists reports whether n is a descriptor listed with neither a rate_limit nor descriptors of
// its own: envoyproxy/ratelimit's README calls it "effectively whitelisted", whatever entries follow
// it in the request.
func (n *node) whitelists() bool {
	return n.rule == nil && len(n.exact) == 0 && len(n.wild) == 0 && len(n.any) == 0
}

// globMatch reports whether value matches parts, a pattern split at its '*'s, each of which stands
// for any run of bytes.
func globMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// stateKey is the sluice key of a matched descriptor: its domain and every entry's key and value,
// so that each distinct descriptor has its own state (a value matched by a wildcard with
// share_threshold counts under the pattern instead; chain is nil for a limit override, which
// matched no node). Quoting keeps the encoding unambiguous; a key longer than sluice.MaxKeyLen is
// replaced by its SHA-256.
func stateKey(domain string, chain []*node, entries []*rlv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(domain))
	for i, e := range entries {
		b.WriteByte('/')
		b.WriteString(strconv.Quote(e.GetKey()))
		if chain != nil && chain[i].share {
			b.WriteByte('~')
			b.WriteString(strconv.Quote(chain[i].value))
			continue
		}
		b.WriteByte('=')
		b.WriteString(strconv.Quote(e.GetValue()))
	}
	if b.Len() <= sluice.MaxKeyLen {
		return b.String()
	}
	sum := sha256.Sum256([]byte(b.String()))
	return "sha256:" + hex.EncodeToString(sum[:])
}
