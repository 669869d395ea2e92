package main

// A token-bucket rate limiter per key (a source address, a credential)
// in bounded memory, for any server of svc to share: rateLimiter.allow
// spends a token of the key's bucket and says how long to wait when there
// is none; rateLimitRefuse answers 429 with Retry-After.

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// rateLimiter is a token bucket per key: each holds at most burst tokens
// and gains rate tokens a second; a request spends one. At most maxKeys
// buckets are kept: a new key beyond that first drops the buckets that
// refilled (the same as absent), then, when none did, an arbitrary one,
// which can only let its key burst again, never refuse another key.
type rateLimiter struct {
	rate    float64 // tokens a second
	burst   float64
	maxKeys int
	now     func() time.Time

	mu      sync.Mutex
	buckets map[string]*rateLimitBucket
	swept   time.Time // the last sweep of the refilled buckets
}

// rateLimitBucket is one key's tokens as of at.
type rateLimitBucket struct {
	tokens float64
	at     time.Time
}

// newRateLimiter returns a limiter of rate tokens a second with burst
// tokens per key, keeping at most maxKeys keys; all must be positive.
func newRateLimiter(rate float64, burst, maxKeys int) *rateLimiter {
	if rate <= 0 || burst < 1 || maxKeys < 1 {
		panic("newRateLimiter: want a positive rate, burst and key count")
	}
	return &rateLimiter{rate: rate, burst: float64(burst), maxKeys: maxKeys, now: time.Now, buckets: map[string]*rateLimitBucket{}}
}

// allow spends a token of key's bucket; when it has none it returns false
// and how long until it has one.
func (l *rateLimiter) allow(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b := l.buckets[key]
	if b == nil {
		if len(l.buckets) >= l.maxKeys {
			l.evict(now)
		}
		b = &rateLimitBucket{tokens: l.burst, at: now}
		l.buckets[key] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
}

// evict makes room for a new key: it drops every bucket that has refilled,
// at most once per refill time (a sweep reads them all), and otherwise one
// arbitrary bucket.
func (l *rateLimiter) evict(now time.Time) {
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	if now.Sub(l.swept) >= full {
		l.swept = now
		for k, b := range l.buckets {
			if b.tokens+now.Sub(b.at).Seconds()*l.rate >= l.burst {
				delete(l.buckets, k)
			}
		}
	}
	for k := range l.buckets {
		if len(l.buckets) < l.maxKeys {
			return
		}
		delete(l.buckets, k)
	}
}

// rateLimitRefuse answers 429 rate_limited with message, Retry-After in
// whole seconds (at least 1) and when to retry.
func rateLimitRefuse(w http.ResponseWriter, wait time.Duration, message string) {
	secs := strconv.Itoa(max(int(math.Ceil(wait.Seconds())), 1))
	w.Header().Set("Retry-After", secs)
	writeAPIError(w, http.StatusTooManyRequests, apiError{Code: "rate_limited", Message: message + "; retry in " + secs + " s"})
}

// rateLimitSource is the key of a request's source: its TCP peer's
// address (rateLimitPeer), IPv6 by its /64, the block a single host
// usually has.
func rateLimitSource(r *http.Request) string {
	host := rateLimitPeer(r)
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// rateLimitPeer is the address of r's TCP peer, never a header a client
// may set (X-Forwarded-For): behind a reverse proxy, the proxy's.
func rateLimitPeer(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
