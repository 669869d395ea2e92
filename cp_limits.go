package main

// The rate limits shared by the replicas of the control plane (issue 20
// item 7, issue 19 item 6): each process keeps its own token buckets
// (ratelimit.go), which alone would let N replicas take N times the
// requests, so a request also spends a token of a bucket in PostgreSQL:
// a sign-in route's, of its source in cp.sign_in_limits, in a statement
// of its own; a proxied request's, of its caller in cp.proxy_limits, in the
// statement that resolves its target (cpStore.proxyTarget), so the proxy
// makes no more round trips than before.

import (
	"context"
	"sync/atomic"
	"time"
)

// cpSignInTakeSQL refills source's bucket by the time since its last
// request, at $2 tokens a second up to $3, and takes one; it returns the
// tokens left (negative: refused; a refused request takes nothing more).
const cpSignInTakeSQL = `INSERT INTO cp.sign_in_limits AS l (source, tokens, at) VALUES ($1, $3 - 1, now())
ON CONFLICT (source) DO UPDATE SET
    tokens = GREATEST(-1, LEAST($3, l.tokens + extract(epoch FROM now() - l.at) * $2) - 1),
    at = now()
RETURNING tokens`

// cpSignInSweepEvery is how often the idle buckets are deleted.
const cpSignInSweepEvery = time.Minute

// cpSharedLimit is a rate limit's buckets in table (cp.sign_in_limits or
// cp.proxy_limits: a key, tokens, at).
type cpSharedLimit struct {
	store     *cpStore
	table     string
	rate      float64
	burst     int
	nextSweep atomic.Int64 // unix nanoseconds
}

// sweep deletes, at most once every cpSignInSweepEvery, the buckets idle
// for longer than a full refill (a new one starts full anyway).
func (l *cpSharedLimit) sweep(ctx context.Context) {
	now := time.Now()
	if next := l.nextSweep.Load(); now.UnixNano() >= next && l.nextSweep.CompareAndSwap(next, now.Add(cpSignInSweepEvery).UnixNano()) {
		full := time.Duration(float64(l.burst) / l.rate * float64(time.Second))
		l.store.db.Exec(ctx, `DELETE FROM `+l.table+` WHERE at < now() - $1 * interval '1 millisecond'`, full.Milliseconds())
	}
}

// wait is how long until an empty bucket has a token again.
func (l *cpSharedLimit) wait() time.Duration { return time.Duration(float64(time.Second) / l.rate) }

// allow spends one of source's tokens in cp.sign_in_limits; when none is
// left it says how long until one is. A database that does not answer lets
// the request through: the process's own bucket still bounds it, and the
// route itself needs the database.
func (l *cpSharedLimit) allow(ctx context.Context, source string) (bool, time.Duration) {
	l.sweep(ctx)
	var tokens float64
	if err := l.store.db.QueryRow(ctx, cpSignInTakeSQL, source, l.rate, float64(l.burst)).Scan(&tokens); err != nil {
		return true, 0
	}
	if tokens < 0 {
		return false, l.wait()
	}
	return true, 0
}
