package main

// The replay windows of v2 signed requests (sign.go), as IPsec's
// anti-replay window (RFC 4303 §3.4.3): per sender, the highest counter
// accepted and a bitmap of the signWindowBits counters below it. A counter
// above the highest slides the window; one inside it is accepted once; one
// below it is refused as stale. The state lives in the box's PostgreSQL
// (platform_migrations/0006_sign_senders.sql and 0011), whose function
// svc.sign_accept decides and records in one statement, committed before
// the box acts on the request (without waiting for the disk flush: see the
// function): it survives restarts and every replica on that database
// shares it.
//
// Memory and rows are bounded by the number of senders, not by traffic:
// only a request whose MAC verified reaches a window, a sender is one
// control plane process, and at most signMaxSenders of them may be live
// (signed within the signing window) at once.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Limits of the replay windows.
const (
	// signWindowBits is how far below a sender's highest counter a request
	// may still arrive (overtaken by later ones) and be accepted once: the
	// width of svc.sign_senders.seen.
	signWindowBits = 4096
	// signMaxSenders bounds the senders a box keeps at once; past it a new
	// sender is refused (errSignCapacity) until one is a signing window
	// idle. Each control plane process is one sender.
	signMaxSenders = 1024
)

// signWindows decides v2 counters against the windows kept in db.
type signWindows struct {
	db         *pgxpool.Pool
	maxSenders int // signMaxSenders; tests lower it
}

// newSignWindows returns the windows kept in db.
func newSignWindows(db *pgxpool.Pool) *signWindows {
	return &signWindows{db: db, maxSenders: signMaxSenders}
}

// accept admits counter of sender, signed at signed, at most once: it
// refuses a counter already accepted (errSignReplayed) or below the window
// (errSignStale), and a new sender when maxSenders are live
// (errSignCapacity). The decision is committed before accept returns.
func (w *signWindows) accept(ctx context.Context, sender string, counter uint64, signed, now time.Time) error {
	var verdict string
	err := w.db.QueryRow(ctx, `SELECT svc.sign_accept($1, $2, $3, $4, $5, $6)`,
		sender, int64(counter), signed, now, signWindow, w.maxSenders).Scan(&verdict)
	if err != nil {
		return fmt.Errorf("verify signed request: replay window of sender %s: %w", sender, err)
	}
	switch verdict {
	case "ok":
		return nil
	case "replayed":
		return &signError{Check: errSignReplayed, Header: signCounterHeader}
	case "stale":
		return &signError{Check: errSignStale, Header: signCounterHeader}
	case "capacity":
		return &signError{Check: errSignCapacity, Header: signSenderHeader}
	}
	return fmt.Errorf("verify signed request: replay window of sender %s: unknown verdict %q", sender, verdict)
}
