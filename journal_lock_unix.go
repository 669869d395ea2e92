//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// errJournalLocked reports that another process has the journal open.
var errJournalLocked = errors.New("another process (a second svc dev of this project?) has the journal open")

// journalLock takes an exclusive, non-blocking flock on dir/LOCK, so two
// processes never append to one journal. The kernel drops it when the
// process dies, so a killed session never leaves a stale lock.
func journalLock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errJournalLocked
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f, nil
}
