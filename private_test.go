package main

// Secrets on a shared machine: after a full `svc dev` boot on the local
// PostgreSQL provider and a workflow run, no other local user can read
// svc's state or its secrets.

import (
	"context"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// privateTestCheckModes fails the test for each directory under stateDir
// that is not privateDirMode and each file that is not privateFileMode.
func privateTestCheckModes(t *testing.T, stateDir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(stateDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(stateDir, path)
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := privateFileMode
		if d.IsDir() {
			want = privateDirMode
		}
		if got := info.Mode().Perm(); got != want {
			t.Errorf(".svc/%s mode = %o; want %o", rel, got, want)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 10 {
		t.Errorf("walked only %d entries under .svc; want the state of a booted project", n)
	}
}

// privateTestLoosen gives every directory under stateDir 0755 and every
// file 0644, as earlier versions of svc wrote them.
func privateTestLoosen(t *testing.T, stateDir string) {
	t.Helper()
	err := filepath.WalkDir(stateDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(path, 0o755)
		}
		return os.Chmod(path, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestDevStateIsPrivate(t *testing.T) {
	pgTestNeedLocal(t)
	dir := projectDir(t)
	cluster, _ := pgTestLocalCluster(t, dir, nil)
	writeFile(t, dir, "workflows/hello.workflow.ts", `async function hi() { "use step"; return "hi"; }
export default async function hello() { "use workflow"; return await hi(); }`)
	env := baseEnv()
	for k, v := range pgTestSentinels {
		env = append(env, k+"="+v)
	}
	stateDir := filepath.Join(dir, ".svc")
	for _, tt := range []struct {
		name   string
		before func()
	}{
		{"fresh project", func() {}},
		{"existing project with 0755 and 0644 modes", func() { privateTestLoosen(t, stateDir) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.before()
			d := startDevProcess(t, dir, freePortBase(t), env)
			d.payload = d.nextPayload(120 * time.Second)
			pgTestCheckEnv(t, "postmaster", pgTestPostmasterEnv(t, cluster.dataDir))

			// The payload's URL is the one place the password is given whole.
			u, err := url.Parse(d.payload.Services.PostgresURL)
			if err != nil {
				t.Fatal(err)
			}
			password, _ := u.User.Password()
			if password == "" {
				t.Errorf("services.postgres_url %q carries no password", redactURL(u.String()))
			} else if strings.Contains(d.stderr.String(), password) {
				t.Errorf("the log shows the PostgreSQL password:\n%s", d.stderr.String())
			}
			ctx, cancel := context.WithTimeout(context.Background(), pgConnectTimeout)
			defer cancel()
			conn, err := pgx.Connect(ctx, d.payload.Services.PostgresURL)
			if err != nil {
				t.Fatalf("connect with services.postgres_url: %v", err)
			}
			conn.Close(ctx)

			var rc startReceipt
			httpJSON(t, "POST", d.url("/api/workflows/hello/start"), "", &rc)
			var got struct{ Run runRecord }
			httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID+"?wait=20s"), nil, &got)
			if string(got.Run.Output) != `"hi"` {
				t.Fatalf("run output = %s %+v; want \"hi\"", got.Run.Output, got.Run.Error)
			}
			privateTestCheckModes(t, stateDir)
			if code := d.interrupt(); code != 0 {
				t.Errorf("SIGINT exit = %d; want 0\n%s", code, d.stderr.String())
			}
		})
	}
}
