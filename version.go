package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version and commit name this build. Empty, they come from the build
// information the Go toolchain embeds (the module version of `go install`,
// the VCS revision of a build in a checkout); a release sets them at link
// time: go build -ldflags "-X main.version=v1.2.3 -X main.commit=abc123".
var (
	version string
	commit  string
)

// buildVersion is what `svc version` prints.
type buildVersion struct {
	SchemaVersion int    `json:"schema_version"`
	Version       string `json:"version"`
	Commit        string `json:"commit"`   // "" when unknown (not built from a checkout)
	Modified      bool   `json:"modified"` // the checkout had uncommitted changes
	GoVersion     string `json:"go_version"`
}

// readBuildVersion returns the version of this binary: the link-time
// values first, then the embedded build information; "(devel)" when
// neither knows.
func readBuildVersion() buildVersion {
	v := buildVersion{SchemaVersion: schemaVersion, Version: version, Commit: commit, GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v.orDevel()
	}
	if v.Version == "" {
		v.Version = bi.Main.Version
	}
	revision, modified := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if v.Commit == "" {
		v.Commit, v.Modified = revision, modified
	}
	return v.orDevel()
}

// orDevel returns v with "(devel)" for an unknown version, as the Go
// toolchain names a build outside a released module.
func (v buildVersion) orDevel() buildVersion {
	if v.Version == "" {
		v.Version = "(devel)"
	}
	return v
}

// runVersion is `svc version` (and `svc --version`).
func runVersion(ctx context.Context, c *cmd, fs *flag.FlagSet) error {
	if fs.NArg() != 0 {
		return fmt.Errorf("version takes no arguments: %w", errUsage)
	}
	v := readBuildVersion()
	c.emit(v, func(w io.Writer) {
		fmt.Fprintf(w, "svc %s\n", v.Version)
		if v.Commit != "" {
			dirty := ""
			if v.Modified {
				dirty = " (modified)"
			}
			fmt.Fprintf(w, "  commit  %s%s\n", v.Commit, dirty)
		}
		fmt.Fprintf(w, "  go      %s\n", v.GoVersion)
	})
	return nil
}
