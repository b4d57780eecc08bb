package algo

import "github.com/sluicehq/sluice"

// TokenBucket decides for sluice.TokenBucket. A key holds up to capacity tokens, refilled
// continuously at refillPerSec; a check spends cost tokens if it has them.
type TokenBucket struct {
	capacity, perMs float64
	limit           int64
}

// TokenBucketState is a key's tokens as of the instant Last (epoch ms). The zero value (Last 0) is a
// fresh key: a full bucket.
type TokenBucketState struct {
	Tokens float64
	Last   int64
}

// NewTokenBucket prepares a validated sluice.TokenBucket.
func NewTokenBucket(s sluice.TokenBucket) *TokenBucket {
	return &TokenBucket{capacity: s.Capacity, perMs: s.RefillPerSec / 1000, limit: int64(s.Capacity)}
}

// tokens is what the bucket holds at now. Time running backwards refills nothing.
func (b *TokenBucket) tokens(s TokenBucketState, n float64) float64 {
	if s.Last == 0 {
		return b.capacity
	}
	elapsed := atLeast(n-float64(s.Last), 0)
	return atMost(s.Tokens+float64(elapsed*b.perMs), b.capacity)
}

// fullAt is the instant the bucket is full again, holding tokens at now.
func (b *TokenBucket) fullAt(now int64, tokens float64) int64 {
	return now + ceil((b.capacity-tokens)/b.perMs)
}

// Check spends cost tokens at now if the bucket holds them.
func (b *TokenBucket) Check(s TokenBucketState, now, cost int64) (TokenBucketState, sluice.Decision) {
	s, v := b.Decide(s, now, cost)
	return s, v.Decision(b.limit)
}

// Decide is Check deciding a Verdict, which a store's hot path passes on in registers.
func (b *TokenBucket) Decide(s TokenBucketState, now, cost int64) (TokenBucketState, sluice.Verdict) {
	next, tokens := b.Spend(s, now, cost)
	return next, b.Verdict(tokens, now, cost)
}

// Spend is Decide's first half: the state after a check of cost at now, and the tokens the bucket
// held at now, from which Verdict answers. A store that holds a key's state only from reading it
// to writing it back calls Spend in between and Verdict after, so that the verdict's divisions do
// not keep other checks waiting.
func (b *TokenBucket) Spend(s TokenBucketState, now, cost int64) (next TokenBucketState, tokens float64) {
	tokens = b.tokens(s, float64(now))
	if c := float64(cost); tokens >= c {
		return TokenBucketState{Tokens: tokens - c, Last: now}, tokens
	}
	return s, tokens
}

// Verdict is Decide's second half: the verdict of a check of cost at now on a bucket that held
// tokens (Spend's answer).
func (b *TokenBucket) Verdict(tokens float64, now, cost int64) sluice.Verdict {
	c := float64(cost)
	if tokens >= c {
		left := tokens - c
		return allow(whole(left), b.fullAt(now, left))
	}
	return deny(whole(tokens), b.fullAt(now, tokens), ceil((c-tokens)/b.perMs))
}

// Peek reports the state at now without changing it.
func (b *TokenBucket) Peek(s TokenBucketState, now int64) sluice.Decision {
	tokens := b.tokens(s, float64(now))
	return peek(tokens >= 1, b.limit, whole(tokens), b.fullAt(now, tokens), ceil((1-tokens)/b.perMs))
}

// Forecast projects the state at now for checks of cost.
func (b *TokenBucket) Forecast(s TokenBucketState, now, cost int64) sluice.Forecast {
	tokens := b.tokens(s, float64(now))
	next := now
	if tokens < b.capacity {
		next = now + ceil((min(float64(floor(tokens)+1), b.capacity)-tokens)/b.perMs)
	}
	return sluice.Forecast{SpendableNow: spendable(tokens, cost), NextReplenishAt: next, FullAt: b.fullAt(now, tokens)}
}

// Refund puts cost tokens back at now, never past capacity.
func (b *TokenBucket) Refund(s TokenBucketState, now, cost int64) TokenBucketState {
	if s.Last == 0 {
		return s
	}
	return TokenBucketState{Tokens: atMost(b.tokens(s, float64(now))+float64(cost), b.capacity), Last: max(now, s.Last)}
}

// Idle reports whether the state decides like a fresh key's at now and at every later instant: the
// bucket has refilled to capacity.
func (b *TokenBucket) Idle(s TokenBucketState, now int64) bool {
	return s.Last == 0 || b.tokens(s, float64(now)) >= b.capacity
}

// Clone copies a state.
func (b *TokenBucket) Clone(s TokenBucketState) TokenBucketState { return s }
