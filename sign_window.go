package main

// The replay windows of v2 signed requests (sign.go), as IPsec's
// anti-replay window (RFC 4303 §3.4.3): per sender, the highest counter
// accepted and a bitmap of the signWindowBits counters below it. A counter
// above the highest slides the window; one inside it is accepted once; one
// below it is refused as stale. The state lives in the box's PostgreSQL
// (platform_migrations/0004_sign_senders.sql), updated in the same
// transaction that decides, before the box acts on the request: it survives
// restarts and every replica on that database shares it.
//
// Memory and rows are bounded by the number of senders, not by traffic:
// only a request whose MAC verified reaches a window, a sender is one
// control plane process, and at most signMaxSenders of them may be live
// (signed within the signing window) at once.

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Limits of the replay windows.
const (
	// signWindowBits is how far below a sender's highest counter a request
	// may still arrive (overtaken by later ones) and be accepted once.
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
// (errSignStale), and a new sender when signMaxSenders are live
// (errSignCapacity). The decision is committed before accept returns.
func (w *signWindows) accept(ctx context.Context, sender string, counter uint64, signed, now time.Time) error {
	err := pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		hwm, seen, err := w.lock(ctx, tx, sender, now)
		if err != nil {
			return err
		}
		hwm, seen, err = signSlide(hwm, seen, counter)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE svc.sign_senders SET hwm = $2, seen = $3, newest = GREATEST(newest, $4) WHERE sender = $1`,
			sender, int64(hwm), seen.FillBytes(make([]byte, signWindowBits/8)), signed)
		return err
	})
	var se *signError
	if err != nil && !errors.As(err, &se) {
		return fmt.Errorf("verify signed request: replay window of sender %s: %w", sender, err)
	}
	return err
}

// lock returns sender's window, locked for this transaction, creating an
// empty one for a new sender when fewer than maxSenders are live (the
// senders idle for a signing window are dropped first: every request they
// signed is past its timestamp's validity).
func (w *signWindows) lock(ctx context.Context, tx pgx.Tx, sender string, now time.Time) (uint64, *big.Int, error) {
	var hwm int64
	var seen []byte
	err := tx.QueryRow(ctx, `SELECT hwm, seen FROM svc.sign_senders WHERE sender = $1 FOR UPDATE`, sender).Scan(&hwm, &seen)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, err := tx.Exec(ctx, `DELETE FROM svc.sign_senders WHERE newest < $1`, now.Add(-signWindow)); err != nil {
			return 0, nil, err
		}
		var live int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM svc.sign_senders`).Scan(&live); err != nil {
			return 0, nil, err
		}
		if live >= w.maxSenders {
			return 0, nil, &signError{Check: errSignCapacity, Header: signSenderHeader}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO svc.sign_senders (sender, hwm, seen, newest) VALUES ($1, 0, '', $2) ON CONFLICT (sender) DO NOTHING`, sender, now); err != nil {
			return 0, nil, err
		}
		err = tx.QueryRow(ctx, `SELECT hwm, seen FROM svc.sign_senders WHERE sender = $1 FOR UPDATE`, sender).Scan(&hwm, &seen)
	}
	if err != nil {
		return 0, nil, err
	}
	return uint64(hwm), new(big.Int).SetBytes(seen), nil
}

// signWindowMask keeps the signWindowBits bits of a window.
var signWindowMask = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), signWindowBits), big.NewInt(1))

// signSlide applies counter to the window (hwm, seen: bit i set when
// counter hwm-i was accepted) and returns the new window, or refuses a
// counter already accepted or below the window.
func signSlide(hwm uint64, seen *big.Int, counter uint64) (uint64, *big.Int, error) {
	if counter > hwm {
		next := new(big.Int)
		if d := counter - hwm; d < signWindowBits {
			next.And(next.Lsh(seen, uint(d)), signWindowMask)
		}
		return counter, next.SetBit(next, 0, 1), nil
	}
	d := hwm - counter
	if d >= signWindowBits {
		return 0, nil, &signError{Check: errSignStale, Header: signCounterHeader}
	}
	if seen.Bit(int(d)) == 1 {
		return 0, nil, &signError{Check: errSignReplayed, Header: signCounterHeader}
	}
	return hwm, new(big.Int).SetBit(seen, int(d), 1), nil
}
