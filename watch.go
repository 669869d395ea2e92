package main

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"
)

// watchInterval is how often the watcher looks for edited sources. Polling
// keeps the binary dependency-free and works on every filesystem, including
// bind mounts where inotify events never arrive.
const watchInterval = 300 * time.Millisecond

// sourceStamp identifies a version of the project's sources: every watched
// file's path, size and modification time.
type sourceStamp map[string]string

// stampSources walks the TypeScript sources the runtime compiles (every
// .ts/.js/.json file outside .svc and node_modules).
func stampSources(dir string) sourceStamp {
	st := sourceStamp{}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if d.IsDir() {
			if path != dir && (name == ".svc" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".ts", ".tsx", ".js", ".mjs", ".json":
		default:
			return nil
		}
		if info, err := d.Info(); err == nil {
			st[path] = fmt.Sprintf("%d/%d", info.ModTime().UnixNano(), info.Size())
		}
		return nil
	})
	return st
}

// equal reports whether two stamps describe the same sources.
func (a sourceStamp) equal(b sourceStamp) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// watch recompiles the catalog whenever the sources change, until ctx ends.
func (rt *devRuntime) watch(ctx context.Context) {
	last := stampSources(rt.proj.Dir)
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := stampSources(rt.proj.Dir)
		if cur.equal(last) {
			continue
		}
		schema := filepath.Join(rt.proj.Dir, "src", "schema.ts")
		schemaChanged := cur[schema] != last[schema]
		last = cur
		rt.log.Info("sources changed; recompiling")
		rt.recompile()
		if schemaChanged {
			rt.autoMigrate(ctx)
		}
	}
}
