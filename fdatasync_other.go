//go:build !linux

package main

import "os"

// journalFdatasync flushes f to the disk. Outside Linux it is a full fsync
// (on macOS Go's Sync issues F_FULLFSYNC), which is slower but never weaker.
func journalFdatasync(f *os.File) error {
	return f.Sync()
}
