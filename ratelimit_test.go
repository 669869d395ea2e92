package main

import (
	"fmt"
	"testing"
	"time"
)

// TestRateLimiter checks a key's burst, its refusal with the time until
// its next token, the refill, that keys are independent, and that the
// keys kept stay bounded: idle (full) buckets make room, busy ones do not.
func TestRateLimiter(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := newRateLimiter(2, 3, 2)
	l.now = func() time.Time { return now }
	for i := range 3 {
		if ok, _ := l.allow("a"); !ok {
			t.Fatalf("request %d within the burst refused", i)
		}
	}
	if ok, wait := l.allow("a"); ok || wait != 500*time.Millisecond {
		t.Fatalf("past the burst = %v, retry after %s; want refused, retry after 500ms", ok, wait)
	}
	if ok, _ := l.allow("b"); !ok {
		t.Fatal("another key refused")
	}
	if ok, wait := l.allow("c"); ok || wait <= 0 {
		t.Fatalf("a third key over a cap of 2 busy keys = %v, %s; want refused with a wait", ok, wait)
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.allow("a"); !ok {
		t.Fatal("a refilled token refused")
	}
	for i := range 5 {
		now = now.Add(time.Second) // every bucket is full again
		if ok, _ := l.allow(fmt.Sprint("new-", i)); !ok {
			t.Fatalf("new key %d refused although the others are idle", i)
		}
	}
	if len(l.buckets) > 2 {
		t.Errorf("%d buckets kept; want at most 2", len(l.buckets))
	}
}
