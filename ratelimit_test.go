package main

import (
	"net/http/httptest"
	"testing"
	"time"
)

// TestRateLimiter: a key gets its burst at once, then one token per
// 1/rate, with the wait until the next said when refused; keys do not
// share tokens; at most maxKeys buckets are kept however many keys come.
func TestRateLimiter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newRateLimiter(2, 3, 4) // 2 a second, a burst of 3, 4 keys
	l.now = func() time.Time { return now }
	for i := range 3 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	if ok, wait := l.allow("a"); ok || wait != 500*time.Millisecond {
		t.Fatalf("past the burst = %v, wait %v; want refused, 500ms", ok, wait)
	}
	if ok, _ := l.allow("b"); !ok {
		t.Fatalf("another key refused: keys share tokens")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.allow("a"); !ok {
		t.Fatalf("a refilled token refused")
	}
	if ok, _ := l.allow("a"); ok {
		t.Fatalf("a second token after one refill allowed")
	}
	for i := range 1000 {
		l.allow(string(rune('c' + i)))
		if len(l.buckets) > 4 {
			t.Fatalf("%d buckets after %d keys; want at most 4", len(l.buckets), i+3)
		}
	}
}

// TestRateLimitSource keys a request by its TCP peer, IPv6 by its /64,
// never by X-Forwarded-For.
func TestRateLimitSource(t *testing.T) {
	for addr, want := range map[string]string{
		"203.0.113.9:5000":            "203.0.113.9",
		"[2001:db8:1:2:aaaa::1]:5000": "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb::9]:443":  "2001:db8:1:2::/64",
		"[::ffff:203.0.113.9]:5000":   "::ffff:203.0.113.9",
		"not an address":              "not an address",
	} {
		r := httptest.NewRequest("POST", "/", nil)
		r.RemoteAddr = addr
		r.Header.Set("X-Forwarded-For", "198.51.100.1")
		if got := rateLimitSource(r); got != want {
			t.Errorf("rateLimitSource(%s) = %q; want %q", addr, got, want)
		}
	}
}
