// Package envoy serves Envoy's rate-limit API, envoy.service.ratelimit.v3.RateLimitService/
// ShouldRateLimit, from envoyproxy/ratelimit config files read unchanged, deciding through a
// server.Server on sluice's gRPC port.
//
// # Config files
//
// The files the config's envoy key names (globs allowed) are envoyproxy/ratelimit's, one domain per
// file:
//
//	domain: edge
//	descriptors:
//	  - key: remote_address              # a key alone matches any value, each value counted apart
//	    rate_limit: {unit: minute, requests_per_unit: 60}
//	  - key: path
//	    value: /api/*                    # '*' matches any run of bytes
//	    share_threshold: true            # ... and all matching values share one count
//	    rate_limit: {unit: second, requests_per_unit: 10, name: api}
//	  - key: user
//	    value: admin
//	    rate_limit: {unlimited: true}
//	  - key: user
//	    descriptors:                     # nested: (user, *), (plan, pro)
//	      - key: plan
//	        value: pro
//	        rate_limit: {unit: hour, requests_per_unit: 1000, replaces: [{name: api}]}
//	  - key: tenant
//	    shadow_mode: true                # counted, never denies
//	    rate_limit: {policy: tenant-tokens}
//
// A rate_limit block sets unit (second, minute, hour, day, week, month = 30 days, year = 365 days)
// and requests_per_unit, or unlimited: true, and optionally name and replaces. It becomes a sluice
// fixed window of requests_per_unit per unit aligned to the epoch, as envoyproxy/ratelimit counts;
// requests_per_unit 0 denies everything. Instead of unit and requests_per_unit, sluice also accepts
// policy: NAME, naming any policy of the sluice config (any strategy, composites included, so one
// descriptor may carry several limits); name and replaces work with it as well. Keys
// detailed_metric, value_to_metric and metadata are accepted and ignored; quota_mode is refused;
// any other key is an error. Errors name the file, the field's path and its line.
//
// # Matching
//
// A request descriptor matches the rule of the node its entries walk to, at exactly their depth.
// At each level an exact key and value is preferred, then wildcard values (the most literal
// characters first), then the key alone; where a preferred branch ends without a rule, the next one
// is tried (envoyproxy/ratelimit gives up instead). But a descriptor listed with neither a
// rate_limit nor descriptors of its own whitelists what reaches it, whatever entries follow, as in
// envoyproxy/ratelimit ("effectively whitelisted"): no less specific branch is tried. A '*'
// anywhere in a value is a wildcard (envoyproxy/ratelimit reads only a trailing one so). The state
// of a match is per domain, descriptor path and values: each distinct set of values has its own
// count.
//
// A request descriptor carrying a limit override (its limit: requests_per_unit per unit) is limited
// by it instead of by any rule, matched or not, as envoyproxy/ratelimit does: not shadowed, not
// named (so never replaced), counted per domain and entries, apart from the rules' counts and apart
// per override unit and requests_per_unit; requests_per_unit 0 denies everything. The unit is read
// as envoyproxy/ratelimit reads it (SECOND 1 to YEAR 6, and 7 as WEEK); any other is
// INVALID_ARGUMENT naming descriptors[i].limit.unit (envoyproxy/ratelimit panics).
// unit_multiplier, which envoyproxy/ratelimit ignores, multiplies the window. In a domain no file
// defines, overrides are ignored as well.
//
// # Deciding
//
// Every descriptor's hits are the request's hits_addend (0 means 1), or its own hits_addend when
// set. The limits named in the replaces of any matched rule are dropped from the request; unlimited
// and unmatched descriptors are OK with no limit (limit_remaining 2^32-1 for unlimited, as
// envoyproxy/ratelimit). All the enforced descriptors are then decided at once with one
// Server.CheckAll: if any is over limit, the request is OVER_LIMIT and consumes from none of them
// (envoyproxy/ratelimit consumes from all). A descriptor whose hits_addend is 0 is checked without
// consuming, and is OK even with nothing left, as envoyproxy/ratelimit's count + 0 > limit is false
// at exactly the limit (sluice never counts past one; requests_per_unit 0 still denies it); one
// with is_negative_hits gives its hits back.
// Hits above what a limit can ever admit are over limit. Shadow-mode rules are checked after the
// others, consuming only when the request was allowed, and their status is always OK.
//
// A domain no file defines answers OK for every descriptor, as envoyproxy/ratelimit does. A rule
// naming a policy the sluice config lacks is NOT_FOUND (Rules.Validate catches that at load), and
// a store that cannot answer under a fail-closed policy UNAVAILABLE, which Envoy treats per its
// failure_mode_deny.
//
// # Response
//
// Each status carries current_limit (for a sluice policy: its binding limit, as a whole number of
// the largest unit dividing its window, or else a rate per second), limit_remaining and
// duration_until_reset, in whole seconds rounded up, as envoyproxy/ratelimit sends it (Envoy drops
// a fraction when it writes x-ratelimit-reset): for a rate_limit block or an override, the time to
// the end of its window, in [1 s, the window]. response_headers_to_add carries the IETF RateLimit header fields of
// draft-ietf-httpapi-ratelimit-headers for the enforced limits, RateLimit-Policy: "name";q=…;w=…
// and RateLimit: "name";r=…;t=…, and Retry-After (seconds) when over limit.
//
// When the store cannot answer in time and the fail mode of every policy involved is open, the
// request is OK and response_headers_to_add carries sluice-fail-mode: open instead; the statuses
// of the descriptors so allowed carry no current_limit, limit_remaining or duration_until_reset
// and no RateLimit fields are added for them, since no limit was consulted.
//
// # Policies
//
// The rate_limit blocks generate one fixed-window policy per (unit, requests_per_unit), named
// envoy:UNIT:N (the prefix is reserved), which the Service installs in the Server's limiter beside
// the config's policies, and again after every Server.Reload. Limit overrides get one per (unit,
// unit_multiplier, requests_per_unit), named envoy:override:UNIT:N (envoy:override:MxUNIT:N), each
// installed on first use and kept; past 1000 of them a request needing another is
// RESOURCE_EXHAUSTED.
package envoy
