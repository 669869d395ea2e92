package main

// The engine's store on the file journal (the default, SVC_ENGINE=file):
// events in the journal's segments and snapshots (journal.go), pinned
// versions as files under the journal directory (versions/<hash>.json,
// fsynced before the start that needs them is journaled). One process owns
// the directory (the journal's flock).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
)

// versionsDir is the directory, under the journal's, of saved versions.
const versionsDir = "versions"

// engineStoreFile is the file journal in dir, recording its batches in
// metrics (nil: nowhere).
type engineStoreFile struct {
	dir     string
	metrics *metrics
}

// kind names the store.
func (s engineStoreFile) kind() string { return engineKindFile }

// health reports the kind: a file store has no lease.
func (s engineStoreFile) health() engineStoreHealth { return engineStoreHealth{Kind: engineKindFile} }

// replica is "": one process owns the journal and every run in it.
func (s engineStoreFile) replica() string { return "" }

// open opens and replays the journal.
func (s engineStoreFile) open(h engineLogHooks) (engineLog, error) {
	j, err := openJournal(s.dir, journalOptions{OnFail: h.onFail, Metrics: s.metrics}, h.onSnapshot, h.onRecord)
	if err != nil {
		return nil, err
	}
	return engineStoreFileLog{j}, nil
}

// versionPath returns the file of version v.
func (s engineStoreFile) versionPath(v string) string {
	return filepath.Join(s.dir, versionsDir, v+".json")
}

// saveVersion writes version v atomically and fsynced.
func (s engineStoreFile) saveVersion(v string, data []byte) error {
	return writeFileAtomic(s.versionPath(v), data, privateFileMode)
}

// loadVersion reads version v.
func (s engineStoreFile) loadVersion(v string) ([]byte, error) { return os.ReadFile(s.versionPath(v)) }

// removeVersions deletes the version files keep refuses.
func (s engineStoreFile) removeVersions(keep func(string) bool) {
	entries, _ := os.ReadDir(filepath.Join(s.dir, versionsDir))
	for _, ent := range entries {
		if v, ok := strings.CutSuffix(ent.Name(), ".json"); ok && !keep(v) {
			os.Remove(filepath.Join(s.dir, versionsDir, ent.Name()))
		}
	}
}

// engineStoreFileLog is the open journal as the engine's log.
type engineStoreFileLog struct{ j *journal }

// append queues the record for the next group commit, every record
// fsynced with its batch; a record of history may wait for company
// (journal.AppendLazy); a durable one, whose writer waits at once, is
// written by that wait (journal.AppendWaited).
func (l engineStoreFileLog) append(payload []byte, d engineDurability) engineCommit {
	switch d {
	case commitHistory:
		return l.j.AppendLazy(payload)
	case commitDurable:
		return l.j.AppendWaited(payload)
	}
	return l.j.Append(payload)
}

// fresh is true: nobody else can take the journal's runs.
func (l engineStoreFileLog) fresh() bool { return true }

// catchUp has nothing to do: only this process writes the journal.
func (l engineStoreFileLog) catchUp(context.Context) bool { return false }

// size is the bytes appended since the last snapshot.
func (l engineStoreFileLog) size() int64 { return l.j.Size() }

// beginCompact cuts the journal for a snapshot.
func (l engineStoreFileLog) beginCompact(int64) (engineCompaction, error) {
	c, err := l.j.BeginCompact()
	if err != nil {
		return nil, err
	}
	return c, nil
}

// close flushes and closes the journal.
func (l engineStoreFileLog) close() error { return l.j.Close() }
