package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileAtomicPrivateDirs(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, ".svc", "a", "key")
	if err := writeFileAtomic(path, []byte("k"), privateFileMode); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, ".svc"), filepath.Join(root, ".svc", "a"), path} {
		want := privateDirMode
		if p == path {
			want = privateFileMode
		}
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("mode of %s = %v (%v); want %o", p, fi.Mode().Perm(), err, want)
		}
	}
}

func TestTightenTree(t *testing.T) {
	root := filepath.Join(t.TempDir(), ".svc")
	outside := filepath.Join(t.TempDir(), "outside")
	tests := []struct {
		rel  string
		dir  bool
		mode os.FileMode
		want os.FileMode
	}{
		{"", true, 0o755, 0o700},
		{"journal", true, 0o755, 0o700},
		{"journal/00001.seg", false, 0o644, 0o600},
		{"s3/svc", true, 0o775, 0o700},
		{"s3/svc/obj", false, 0o664, 0o600},
		{"master.key", false, 0o600, 0o600},
		{"readonly", false, 0o444, 0o400},
		{"tool", false, 0o755, 0o700},
	}
	for _, tt := range tests {
		p := filepath.Join(root, tt.rel)
		var err error
		if tt.dir {
			err = os.MkdirAll(p, 0o755)
		} else {
			err = os.WriteFile(p, []byte("x"), 0o600)
		}
		if err == nil {
			err = os.Chmod(p, tt.mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// A symbolic link is not followed: what it points at keeps its mode.
	if err := os.WriteFile(outside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(outside, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}

	if err := tightenTree(root); err != nil {
		t.Fatalf("tightenTree: %v", err)
	}
	for _, tt := range tests {
		fi, err := os.Stat(filepath.Join(root, tt.rel))
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != tt.want {
			t.Errorf("after tightenTree, mode of %q (was %o) = %o; want %o", tt.rel, tt.mode, got, tt.want)
		}
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the target of a symbolic link under the tree changed mode: %v (%v); want 644", fi.Mode().Perm(), err)
	}
}
