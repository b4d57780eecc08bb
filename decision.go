package sluice

import "time"

// Decision is the answer to one check.
//
// Instants are epoch milliseconds and durations are milliseconds, so a decision reads the same from
// every store and over every wire. The JSON field names are sluice's wire names.
type Decision struct {
	// Allowed reports whether the cost was admitted (and consumed).
	Allowed bool `json:"allowed"`
	// Limit is the ceiling of the binding limit: the burst of GCRA, the capacity of a token bucket,
	// the limit of a window. A fractional parameter is reported by its integer part.
	Limit int64 `json:"limit"`
	// Remaining is how many whole units are left after this check. Never negative.
	Remaining int64 `json:"remaining"`
	// ResetAt is the instant (epoch ms) at which the binding limit is fully replenished.
	ResetAt int64 `json:"resetAt"`
	// RetryAfterMs is how long to wait before the same check could pass; 0 when allowed.
	RetryAfterMs int64 `json:"retryAfterMs"`
	// DeniedBy is the index in Parts of the part that denied, or -1 when allowed. A decision of a
	// single-limit policy that was denied has DeniedBy 0.
	DeniedBy int `json:"deniedBy"`
	// Parts holds one decision per limit of a composite policy, or one per item of CheckAll, each as
	// that part alone would decide; but when the whole was denied, nothing was consumed, and a part
	// that would have allowed reports the Remaining it has, not less its cost. Nil for a
	// single-limit policy.
	Parts []Decision `json:"parts,omitempty"`
	// FailOpen reports that the store could not answer in time and the policy's fail mode allowed
	// the check: no limit was consulted, so Allowed is true and the numbers are zero. Only a
	// service sets it (the library has no fail mode), and a client of one that admits on its own
	// when the service cannot answer.
	FailOpen bool `json:"failOpen,omitempty"`
	// Override reports that the key has an override of its own (a Resolver's, such as package
	// overrides'): its plan or its own limits applied instead of the policy as configured.
	Override bool `json:"override,omitempty"`
	// Plan names the plan the key was checked under (Policy.Plan): the policy's default plan, or
	// the one its override assigns; "" for a policy without plans and for limits of an override's
	// own. On CheckAll each part says its own, and the whole, as for its numbers, the binding part's.
	Plan string `json:"plan,omitempty"`
}

// RetryAfter is RetryAfterMs as a time.Duration.
func (d Decision) RetryAfter() time.Duration { return time.Duration(d.RetryAfterMs) * time.Millisecond }

// Reset is ResetAt as a time.Time.
func (d Decision) Reset() time.Time { return time.UnixMilli(d.ResetAt) }

// Forecast is a projection of a key's capacity that consumes nothing.
type Forecast struct {
	// SpendableNow is how many checks of the given cost would pass back to back right now.
	SpendableNow int64 `json:"spendableNow"`
	// NextReplenishAt is the instant (epoch ms) at which capacity next grows by at least one whole
	// unit; now when it is already full.
	NextReplenishAt int64 `json:"nextReplenishAt"`
	// FullAt is the instant (epoch ms) at which the key is fully replenished; now when it already is.
	FullAt int64 `json:"fullAt"`
}

// Verdict is the decision of a single limit without the fields its policy fixes: Limit, and
// DeniedBy, which is -1 when allowed and 0 when denied. It is small enough to return without the
// copies a Decision costs on a hot path (CheckVerdict). Stores and package algo decide in
// Verdicts; Decision builds the full answer.
type Verdict struct {
	Allowed      bool
	Remaining    int64
	ResetAt      int64
	RetryAfterMs int64
}

// Decision is the Decision of v under a limit of the given ceiling.
func (v Verdict) Decision(limit int64) Decision {
	deniedBy := 0
	if v.Allowed {
		deniedBy = -1
	}
	return Decision{Allowed: v.Allowed, Limit: limit, Remaining: v.Remaining, ResetAt: v.ResetAt, RetryAfterMs: v.RetryAfterMs, DeniedBy: deniedBy}
}

// Combine folds the decisions of several parts that were checked together, all or nothing, into
// one. It is how a store reports a composite policy, and how CheckAll reports its items.
//
// Allowed only if every part allowed. When allowed, the binding part is the one with the least
// remaining; when denied, it is the denying part with the longest retry (ties go to the least
// remaining, then the lowest index). Limit, Remaining, ResetAt and RetryAfterMs come from the binding
// part, DeniedBy is its index when denied, and Parts is parts itself.
func Combine(parts []Decision) Decision {
	bind, allowed := -1, true
	for i, d := range parts {
		if !d.Allowed {
			if allowed {
				allowed, bind = false, i
				continue
			}
			b := parts[bind]
			if d.RetryAfterMs > b.RetryAfterMs || d.RetryAfterMs == b.RetryAfterMs && d.Remaining < b.Remaining {
				bind = i
			}
			continue
		}
		if allowed && (bind < 0 || d.Remaining < parts[bind].Remaining) {
			bind = i
		}
	}
	if bind < 0 {
		return Decision{Allowed: true, DeniedBy: -1, Parts: parts}
	}
	out := parts[bind]
	out.Parts = parts
	out.DeniedBy = -1
	if !allowed {
		out.DeniedBy = bind
	}
	return out
}
