package main

// The sign-in routes' rate limit shared by the replicas of the control
// plane (issue 20 item 7): each process keeps its own token buckets
// (ratelimit.go), which alone would let N replicas take N times the
// attempts, so a request that passes its process's bucket also spends a
// token of its source's bucket in cp.sign_in_limits, in one statement.

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

// cpSharedLimit is the shared bucket of the sign-in routes.
type cpSharedLimit struct {
	store     *cpStore
	rate      float64
	burst     int
	nextSweep atomic.Int64 // unix nanoseconds
}

// allow spends one of source's shared tokens; when none is left it says
// how long until one is. A database that does not answer lets the request
// through: the process's own bucket still bounds it, and the route itself
// needs the database.
func (l *cpSharedLimit) allow(ctx context.Context, source string) (bool, time.Duration) {
	now := time.Now()
	if next := l.nextSweep.Load(); now.UnixNano() >= next && l.nextSweep.CompareAndSwap(next, now.Add(cpSignInSweepEvery).UnixNano()) {
		full := time.Duration(float64(l.burst) / l.rate * float64(time.Second))
		l.store.db.Exec(ctx, `DELETE FROM cp.sign_in_limits WHERE at < now() - $1 * interval '1 millisecond'`, full.Milliseconds())
	}
	var tokens float64
	if err := l.store.db.QueryRow(ctx, cpSignInTakeSQL, source, l.rate, float64(l.burst)).Scan(&tokens); err != nil {
		return true, 0
	}
	if tokens < 0 {
		return false, time.Duration(float64(time.Second) / l.rate)
	}
	return true, 0
}
