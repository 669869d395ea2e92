package main

// A generic rate limiter: a token bucket per key (a credential, an
// address), with a bounded number of keys. The control plane's proxy
// limits each credential with it (cp_proxy.go).

import (
	"math"
	"sync"
	"time"
)

// rateLimiter allows each key rate events a second with bursts of burst.
// At most maxKeys buckets are kept: a new key past that first drops the
// buckets that are full again (their keys are as if never seen), and when
// none is, it is refused, so memory stays bounded whatever the keys. Safe
// for concurrent use.
type rateLimiter struct {
	rate    float64 // tokens a second
	burst   float64
	maxKeys int
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*rateBucket
}

// rateBucket is one key's tokens as of at.
type rateBucket struct {
	tokens float64
	at     time.Time
}

// newRateLimiter returns a limiter of rate events a second per key, burst
// at once, over at most maxKeys keys.
func newRateLimiter(rate float64, burst, maxKeys int) *rateLimiter {
	return &rateLimiter{rate: rate, burst: float64(burst), maxKeys: maxKeys, now: time.Now, buckets: map[string]*rateBucket{}}
}

// allow takes one token of key's bucket. When there is none it answers
// false and how long until there is.
func (l *rateLimiter) allow(key string) (ok bool, retryAfter time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.maxKeys {
			l.sweep(now)
		}
		if len(l.buckets) >= l.maxKeys {
			return false, time.Duration(float64(time.Second) / l.rate)
		}
		b = &rateBucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// sweep drops the buckets that have refilled to burst by now.
func (l *rateLimiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}
