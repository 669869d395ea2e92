package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

const (
	// privateFileMode is the mode of every file svc writes under .svc: the
	// state there (keys, passwords, transcripts, objects) is the user's alone.
	privateFileMode os.FileMode = 0o600
	// privateDirMode is the mode of .svc and every directory under it.
	privateDirMode os.FileMode = 0o700
	// sharedDirMode is the mode of project directories svc creates outside
	// .svc (the scaffold's), which hold the user's source.
	sharedDirMode os.FileMode = 0o755
)

// writeFileAtomic writes data to path via a fsynced temporary file and a
// rename, creating parent directories, so readers never see a partial file.
// Parent directories it creates are privateDirMode when perm gives group and
// others nothing (a file under .svc), sharedDirMode otherwise.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dirMode := sharedDirMode
	if perm&0o077 == 0 {
		dirMode = privateDirMode
	}
	if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// syncDir fsyncs a directory so a rename into it survives a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// errLocked reports that another process holds a lockFile lock.
var errLocked = errors.New("locked by another process")

// lockFile takes an exclusive, non-blocking flock on path (created if
// missing) and returns the open file; closing it releases the lock, and the
// kernel drops it when the process dies, so a killed session never leaves a
// stale lock. It fails with errLocked when another process holds it.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, privateFileMode)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, fmt.Errorf("lock %q: %w", path, err)
	}
	return f, nil
}

// mkdirPrivate creates dir, and any missing parent, with privateDirMode,
// and sets that mode on dir if it already existed with another.
func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(dir, privateDirMode); err != nil {
		return fmt.Errorf("make private directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, privateDirMode); err != nil {
		return fmt.Errorf("make private directory %s: %w", dir, err)
	}
	return nil
}

// tightenTree makes root private (see mkdirPrivate) and takes the group and
// other permission bits off every directory and regular file under it that
// this process's user owns, so state written by earlier versions with 0755
// and 0644 becomes 0700 and 0600. Symbolic links are not followed. Entries
// owned by another user (a container's database volume) are left alone, with
// what is under them, and so are directories this user cannot read.
func tightenTree(root string) error {
	if err := mkdirPrivate(root); err != nil {
		return err
	}
	uid := uint32(os.Geteuid())
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrPermission) {
			return nil
		}
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) { // removed while walking
			return nil
		}
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Uid != uid {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if mode := info.Mode().Perm(); mode&0o077 != 0 {
			return os.Chmod(path, mode&^0o077)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("tighten modes under %s: %w", root, err)
	}
	return nil
}
