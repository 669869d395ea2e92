package main

// The engine's store is a seam (STYLE 20, DESIGN §12 "One event model, two
// stores"): the engine keeps its state in memory and needs from durable
// storage only what engineStore and engineLog say. Two implementations:
// the file journal (engine_store_file.go, the default) and PostgreSQL
// (engine_store_pg.go, SVC_ENGINE=postgres). Nothing else in the engine
// knows which one it runs on.

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// engineStore is where an engine's durable state lives: it opens the event
// log (replaying it) and keeps the pinned workflow versions. One store
// lives as long as its engine; its log may be opened again after a failure.
type engineStore interface {
	// kind names the store in the health route: "file" or "postgres".
	kind() string
	// open replays the log, calling onSnapshot with the newest snapshot,
	// if any, then onRecord for every later record, in append order, and
	// returns the log open for appends. onFail is told, once, when the
	// returned log stops writing. An error wrapping an *engineStandbyError
	// means another process owns the state now: nothing was replayed.
	open(onFail func(error), onSnapshot, onRecord func([]byte) error) (engineLog, error)
	// saveVersion durably keeps the compiled version hash (content-
	// addressed: saving one twice is harmless).
	saveVersion(hash string, data []byte) error
	// loadVersion returns a saved version.
	loadVersion(hash string) ([]byte, error)
	// removeVersions deletes the saved versions keep refuses.
	removeVersions(keep func(hash string) bool)
	// health reports the store's kind and, for a shared store, its lease.
	health() engineStoreHealth
}

// engineLog is an open event log. Its methods are safe for concurrent use.
type engineLog interface {
	// append queues an encoded event after every one appended before it
	// and returns at once; Wait on the result blocks until the event, and
	// every one before it, is durable. durable says whether the caller
	// will wait (a store may commit the others more cheaply). The log may
	// keep payload: the caller must not change it.
	append(payload []byte, durable bool) engineCommit
	// size is the bytes appended since the last snapshot.
	size() int64
	// beginCompact cuts the log for a snapshot of exactly the events
	// appended so far; the caller, holding the lock it appends under,
	// copies its state and calls Finish later with that state encoded.
	beginCompact() (engineCompaction, error)
	// close writes the pending appends and releases the log.
	close() error
}

// engineCommit is an appended event: Wait returns once it is durable, or
// why it never will be.
type engineCommit interface{ Wait() error }

// engineCompaction is a compaction begun: Finish writes the snapshot and
// drops the events it replaces.
type engineCompaction interface{ Finish(snap []byte) error }

// engineStoreHealth is the store as GET /api/health reports it.
type engineStoreHealth struct {
	Kind  string `json:"kind"`            // "file" or "postgres"
	Lease string `json:"lease,omitempty"` // postgres: held, standby, lost or released
	Owner string `json:"owner,omitempty"` // postgres: this process's lease owner name
	Epoch int64  `json:"epoch,omitempty"` // postgres: the fencing token of the lease held or last held
}

// engineStandbyError is the failure of opening a store whose state another
// process owns: the engine stands by, refusing changes, and tries again
// every Poll until it can take over.
type engineStandbyError struct {
	Holder string    // who holds the lease
	Until  time.Time // when its lease expires unless renewed
	Poll   time.Duration
}

// Error says who owns the state and what the engine does.
func (e *engineStandbyError) Error() string {
	return fmt.Sprintf("standby: another svc process (%s) holds the engine lease until %s; this one takes over when it stops or stops renewing",
		e.Holder, e.Until.UTC().Format(time.RFC3339))
}

// errEngineLeaseLost is the failure of a PostgreSQL log whose lease another
// process took over (this one stalled or lost the database past its
// lease): it stops writing, and the engine steps down to standby.
var errEngineLeaseLost = errors.New("this process lost the engine lease to another process: it stopped executing and stands by")

// Engine kinds of SVC_ENGINE.
const (
	engineKindFile     = "file"
	engineKindPostgres = "postgres"
)

// Defaults and bounds of the PostgreSQL engine's lease.
const (
	engineLeaseDefault      = 10 * time.Second
	engineLeaseRenewDefault = 3 * time.Second
	engineLeaseMin          = time.Second
	engineLeaseMax          = 10 * time.Minute
)

// engineSettings is the engine's selection (SVC_ENGINE) and the
// PostgreSQL engine's lease settings.
type engineSettings struct {
	Kind  string        // engineKindFile or engineKindPostgres
	Lease time.Duration // how long a lease lasts unless renewed
	Renew time.Duration // how often the holder renews it
	// LocalStorageOK is SVC_STORAGE_LOCAL_OK=1: svc serve may run the
	// PostgreSQL engine with the built-in object storage.
	LocalStorageOK bool
}

// readEngineSettings reads SVC_ENGINE, SVC_ENGINE_LEASE,
// SVC_ENGINE_LEASE_RENEW and SVC_STORAGE_LOCAL_OK (the one place they are
// read). An unknown engine or a bad duration is an error naming the
// variable and what it accepts.
func readEngineSettings(getenv func(string) string) (engineSettings, error) {
	s := engineSettings{Kind: engineKindFile, Lease: engineLeaseDefault, Renew: engineLeaseRenewDefault,
		LocalStorageOK: getenv("SVC_STORAGE_LOCAL_OK") == "1"}
	switch v := strings.TrimSpace(getenv("SVC_ENGINE")); v {
	case "", engineKindFile:
	case engineKindPostgres:
		s.Kind = engineKindPostgres
	default:
		return s, fmt.Errorf("SVC_ENGINE is %q: it must be %q (the default: the journal on this disk) or %q (the engine's state in the database, schema svc_engine)",
			truncateForMessage(v), engineKindFile, engineKindPostgres)
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"SVC_ENGINE_LEASE", &s.Lease}, {"SVC_ENGINE_LEASE_RENEW", &s.Renew}} {
		v := strings.TrimSpace(getenv(d.name))
		if v == "" {
			continue
		}
		n, err := time.ParseDuration(v)
		if err != nil || n < engineLeaseMin/4 || n > engineLeaseMax {
			return s, fmt.Errorf("%s is %q: it must be a duration such as 10s, between %v and %v", d.name, truncateForMessage(v), engineLeaseMin/4, engineLeaseMax)
		}
		*d.dst = n
	}
	if s.Lease < engineLeaseMin || 2*s.Renew > s.Lease {
		return s, fmt.Errorf("SVC_ENGINE_LEASE (%v) must be at least %v and at least twice SVC_ENGINE_LEASE_RENEW (%v), so a renewal that fails once does not lose the lease", s.Lease, engineLeaseMin, s.Renew)
	}
	return s, nil
}

// truncateForMessage bounds a user-supplied value quoted in an error.
func truncateForMessage(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
