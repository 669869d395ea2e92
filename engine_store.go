package main

// The engine's store is a seam (STYLE 20, DESIGN §12 "One event model, two
// stores"): the engine keeps its state in memory and needs from durable
// storage only what engineStore and engineLog say. Two implementations:
// the file journal (engine_store_file.go, the default) and PostgreSQL
// (engine_store_pg.go, SVC_ENGINE=postgres). The engine knows only whether
// the store is shared (its replica name is not empty): then it applies
// every event when the log delivers it (engine_replica.go).

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// engineStore is where an engine's durable state lives: it opens the event
// log (replaying it) and keeps the pinned workflow versions. One store
// lives as long as its engine; its log may be opened again after a failure.
type engineStore interface {
	// kind names the store in the health route: "file" or "postgres".
	kind() string
	// replica names this process among the engines sharing the store
	// (the owner of the runs it executes); "" for a store one process owns
	// whole (the file journal), where every run is this process's.
	replica() string
	// open replays the log, calling h.onSnapshot with the newest snapshot,
	// if any, then h.onRecord for every later record, in log order, and
	// returns the log open for appends.
	open(h engineLogHooks) (engineLog, error)
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

// engineLogHooks are the engine's side of an open log.
type engineLogHooks struct {
	onFail     func(error)        // told once when the log stops writing
	onSnapshot func([]byte) error // replay: the newest snapshot
	onRecord   func([]byte) error // replay: each later record, in log order
	// deliver is called by a shared log (one more engines append to) with
	// the records committed since the last call, this process's and the
	// others', in the log's one order, up to the record at seq upto; the
	// engine applies them (engine_replica.go). Calls never overlap.
	deliver func(recs [][]byte, upto int64)
	// claim encodes the record by which replica by takes over the runs of
	// replica from (by "": from releases them), spread over the live
	// replicas spread when there are any; shared logs only.
	claim func(from, by string, spread []string) []byte
}

// engineDurability is how soon a record appended to the log must be on
// disk, as its writer needs it.
type engineDurability int

const (
	// commitSoon: nobody waits for it; it rides the next commit (a step's
	// records, which a later durable record implies).
	commitSoon engineDurability = iota
	// commitDurable: its writer waits until it is durable (a start, a
	// run's end), at once: the file journal leaves the write to that wait.
	commitDurable
	// commitHistory: history, not state (a chat turn's record, shown by
	// the runs API): the file journal lets it wait up to 10 ms for company
	// (journal.AppendLazy); a shared log commits it as commitSoon.
	commitHistory
)

// engineLog is an open event log. Its methods are safe for concurrent use.
type engineLog interface {
	// append queues an encoded event after every one appended before it
	// and returns at once; Wait on the result blocks until the event, and
	// every one before it, is durable and, on a shared log, delivered.
	// d says how soon the caller needs it on disk (a store may commit the
	// others more cheaply). The log may keep payload: the caller must not
	// change it.
	append(payload []byte, d engineDurability) engineCommit
	// fresh reports whether this process may still act on the runs it
	// holds: always on a log it owns whole; on a shared log, while its
	// lease surely holds (a process that stalled past it must not start
	// steps of runs another replica may have claimed).
	fresh() bool
	// catchUp delivers what other processes committed before the call and
	// reports whether anything arrived (false on a log it owns whole, where
	// nothing can be missed).
	catchUp(ctx context.Context) bool
	// size is the bytes appended (on a shared log: delivered) since the
	// last snapshot.
	size() int64
	// beginCompact cuts the log for a snapshot of exactly the events
	// applied so far (on a shared log: delivered up to seq upto); the
	// caller, holding the lock it applies under, copies its state and
	// calls Finish later with that state encoded.
	beginCompact(upto int64) (engineCompaction, error)
	// close writes the pending appends and releases the log (on a shared
	// log: hands this replica's runs to the others).
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
	Kind     string `json:"kind"`               // "file" or "postgres"
	Lease    string `json:"lease,omitempty"`    // postgres: this replica's lease (as a member; lost when a partition's was): held, lost or released
	Owner    string `json:"owner,omitempty"`    // postgres: this replica's name, the owner of the runs it executes
	Epoch    int64  `json:"epoch,omitempty"`    // postgres: the fencing token of its lease (of a partition's store; the fleet's: the newest of its partitions')
	Replicas int    `json:"replicas,omitempty"` // postgres: replicas holding a lease, as of the last renewal
	// Partitions are, on PostgreSQL, the partitions of the log this
	// replica holds (engine_fleet.go).
	Partitions []int `json:"partitions,omitempty"`
}

// errEngineLeaseLost is the failure of a PostgreSQL log whose replica lease
// expired and was taken over (this process stalled or lost the database
// past its lease): it stops writing, its runs belong to another replica,
// and the engine rejoins as a new replica.
var errEngineLeaseLost = errors.New("this replica lost its lease: another replica took over its runs; it rejoins")

// Engine kinds of SVC_ENGINE.
const (
	engineKindFile     = "file"
	engineKindPostgres = "postgres"
)

// Defaults and bounds of a PostgreSQL replica's lease.
const (
	engineLeaseDefault      = 8 * time.Second
	engineLeaseRenewDefault = 3 * time.Second
	engineLeaseMin          = time.Second
	engineLeaseMax          = 10 * time.Minute
	// enginePollDefault is how often an idle replica reads the log without
	// a notification (jittered ±25%): the fallback for a lost NOTIFY.
	enginePollDefault = time.Second
)

// engineSettings is the engine's selection (SVC_ENGINE) and the
// PostgreSQL engine's lease settings.
type engineSettings struct {
	Kind  string        // engineKindFile or engineKindPostgres
	Lease time.Duration // how long a lease lasts unless renewed
	Renew time.Duration // how often the holder renews it
	Poll  time.Duration // how often an idle replica reads the log without a notification
	// Partitions is how many partitions a new PostgreSQL log is split
	// into (SVC_ENGINE_PARTITIONS); a log keeps the number it was made with.
	Partitions int
	// LocalStorageOK is SVC_STORAGE_LOCAL_OK=1: svc serve may run the
	// PostgreSQL engine with the built-in object storage.
	LocalStorageOK bool
}

// readEngineSettings reads SVC_ENGINE, SVC_ENGINE_LEASE,
// SVC_ENGINE_LEASE_RENEW, SVC_ENGINE_POLL, SVC_ENGINE_PARTITIONS and SVC_STORAGE_LOCAL_OK (the one
// place they are read). An unknown engine or a bad duration is an error naming the
// variable and what it accepts.
func readEngineSettings(getenv func(string) string) (engineSettings, error) {
	s := engineSettings{Kind: engineKindFile, Lease: engineLeaseDefault, Renew: engineLeaseRenewDefault, Poll: enginePollDefault, Partitions: enginePartitionsDefault,
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
	}{{"SVC_ENGINE_LEASE", &s.Lease}, {"SVC_ENGINE_LEASE_RENEW", &s.Renew}, {"SVC_ENGINE_POLL", &s.Poll}} {
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
	if v := strings.TrimSpace(getenv("SVC_ENGINE_PARTITIONS")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > enginePartitionsMax {
			return s, fmt.Errorf("SVC_ENGINE_PARTITIONS is %q: it must be a whole number from 1 to %d (it is read when the log is first made)", truncateForMessage(v), enginePartitionsMax)
		}
		s.Partitions = n
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
