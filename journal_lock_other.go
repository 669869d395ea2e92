//go:build !unix

package main

import (
	"os"
	"path/filepath"
)

// journalLock opens dir/LOCK; outside Unix there is no advisory lock, so a
// second process on the same journal is not detected.
func journalLock(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o644)
}
