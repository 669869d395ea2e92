package main

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionVerb checks `svc --version`, `svc version` and `svc version
// --json`: the version, and the Go version of this toolchain.
func TestVersionVerb(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		stdout, _, code := runInProcess(t, t.TempDir(), nil, args...)
		if code != 0 || !strings.HasPrefix(stdout, "svc ") || !strings.Contains(stdout, runtime.Version()) {
			t.Errorf("svc %s = exit %d %q; want svc <version> and %s", args[0], code, stdout, runtime.Version())
		}
	}
	for _, args := range [][]string{{"--json", "version"}, {"--version", "--json"}} {
		stdout, _, code := runInProcess(t, t.TempDir(), nil, args...)
		var env struct {
			OK   bool         `json:"ok"`
			Data buildVersion `json:"data"`
		}
		if err := json.Unmarshal([]byte(stdout), &env); code != 0 || err != nil || !env.OK || env.Data.SchemaVersion != 1 ||
			env.Data.Version == "" || env.Data.GoVersion != runtime.Version() {
			t.Errorf("svc %q = exit %d %s; want an envelope with version and go_version %s", args, code, stdout, runtime.Version())
		}
	}
}

// TestVersionLinkTime builds the binary with the version and commit set at
// link time and checks that `svc --version` prints them.
func TestVersionLinkTime(t *testing.T) {
	t.Parallel() // waits on processes and clocks more than it computes: overlaps the others (issue 38, item E)
	bin := filepath.Join(t.TempDir(), "svc")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version=v9.8.7 -X main.commit=abc1234", ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version", "--json").Output()
	var env struct{ Data buildVersion }
	if err != nil || json.Unmarshal(out, &env) != nil || env.Data.Version != "v9.8.7" || env.Data.Commit != "abc1234" {
		t.Fatalf("svc --version --json = %s (%v); want version v9.8.7, commit abc1234", out, err)
	}
}
