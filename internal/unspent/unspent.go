// Package unspent corrects the parts of a denied group of checks, for the stores. A composite
// policy's limits, and CheckAll's items, are decided together, all or nothing, and each part is
// decided as if its cost were consumed: a part that would have allowed reports what it would have
// had left after its cost. When the group is denied nothing is consumed, so that part still has its
// cost; Check and CheckAll here give it back in the part's Remaining before the store combines the
// parts (sluice.Combine), and a client reading the parts, or the RateLimit fields built from them,
// sees what it has, not a budget the denial did not spend.
//
// For a whole cost, every strategy's remaining after an allowed check is its remaining before less
// the cost, so adding the cost back is what a Peek at the same instant reports; except for GCRA
// when periodMs/limit is not a whole number of ms (nor a binary fraction of one), where float
// rounding can leave the two one unit apart, either way. The stores' scripts are left alone: all
// three correct their replies with this package, so they still answer alike.
package unspent

import "github.com/sluicehq/sluice"

// Check corrects parts, the decisions of p's limits (one each, in order) for one check of cost:
// when any is denied, each allowed part's Remaining gets back what its limit counted,
// p.Cost(i, cost). It changes nothing when every part allowed.
func Check(p *sluice.Policy, cost int64, parts []sluice.Decision) {
	if len(parts) < 2 || allowed(parts) {
		return
	}
	for i := range parts {
		if parts[i].Allowed {
			parts[i].Remaining += p.Cost(i, cost)
		}
	}
}

// CheckAll is Check for a CheckAll of items, items[i] under ps[i]: parts holds, item by item, one
// decision per limit of the item's policy. When any is denied, every allowed part gets back the
// cost its limit counted for its item. A part on a key that an earlier item also checked still
// reports what is left after the earlier items (it was decided as if they were consumed), though
// the denial consumed none of them.
func CheckAll(ps []*sluice.Policy, items []sluice.Item, parts []sluice.Decision) {
	if allowed(parts) {
		return
	}
	k := 0
	for i, op := range items {
		for j := range ps[i].Limits() {
			if k < len(parts) && parts[k].Allowed {
				parts[k].Remaining += ps[i].Cost(j, op.Cost)
			}
			k++
		}
	}
}

func allowed(parts []sluice.Decision) bool {
	for i := range parts {
		if !parts[i].Allowed {
			return false
		}
	}
	return true
}
