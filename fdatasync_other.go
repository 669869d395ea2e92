//go:build !linux

package main

import (
	"errors"
	"os"
)

// journalFdatasync flushes f to the disk. Outside Linux it is a full fsync
// (on macOS Go's Sync issues F_FULLFSYNC), which is slower but never weaker.
func journalFdatasync(f *os.File) error {
	return f.Sync()
}

// journalPreallocate is not done outside Linux: segments grow by their
// writes.
func journalPreallocate(*os.File, int64, int64) error { return errors.ErrUnsupported }
