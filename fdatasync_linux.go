//go:build linux

package main

import (
	"os"
	"syscall"
)

// journalFdatasync flushes f's data, and the metadata needed to read it back
// (its size), to the disk. Unlike fsync it skips metadata such as the
// modification time, which saves a file-system journal commit per append when
// the size has not changed.
func journalFdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var syncErr error
	// Control keeps the descriptor from being closed while the call runs.
	if err := rc.Control(func(fd uintptr) {
		for {
			syncErr = syscall.Fdatasync(int(fd))
			if syncErr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if syncErr != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: syncErr}
	}
	return nil
}
