package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestPgVersionLess(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"9.6", "15", true},
		{"15", "9.6", false},
		{"12", "16", true},
		{"16", "16", false},
		{"9.5", "9.6", true},
		{"10", "9.6", false},
	}
	for _, tt := range tests {
		if got := pgVersionLess(tt.a, tt.b); got != tt.want {
			t.Errorf("pgVersionLess(%q, %q) = %v; want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// pgTestBinTree makes stand-in server binaries under a temporary root:
// lib/9.6/bin and lib/15/bin complete, lib/16/bin without pg_ctl, and
// path/ (as if on PATH). It returns the root and the glob of lib.
func pgTestBinTree(t *testing.T) (root, glob string) {
	t.Helper()
	root = t.TempDir()
	for _, rel := range []string{"lib/9.6/bin/initdb", "lib/9.6/bin/pg_ctl", "lib/15/bin/initdb", "lib/15/bin/pg_ctl",
		"lib/16/bin/initdb", "path/initdb", "path/pg_ctl"} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root, filepath.Join(root, "lib", "*", "bin")
}

func TestPgFindServerBinaries(t *testing.T) {
	root, glob := pgTestBinTree(t)
	pathInitdb, pathPgCtl := filepath.Join(root, "path/initdb"), filepath.Join(root, "path/pg_ctl")
	lookPath := func(have ...string) func(string) (string, error) {
		return func(name string) (string, error) {
			for _, h := range have {
				if filepath.Base(h) == name {
					return h, nil
				}
			}
			return "", exec.ErrNotFound
		}
	}
	tests := []struct {
		name     string
		lookPath func(string) (string, error)
		glob     string
		want     pgServerBinaries
		wantOK   bool
	}{
		{"on PATH", lookPath(pathInitdb, pathPgCtl), glob, pgServerBinaries{pathInitdb, pathPgCtl}, true},
		{"highest complete version", lookPath(pathInitdb), glob,
			pgServerBinaries{filepath.Join(root, "lib/15/bin/initdb"), filepath.Join(root, "lib/15/bin/pg_ctl")}, true},
		{"none", lookPath(), filepath.Join(root, "nowhere", "*", "bin"), pgServerBinaries{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := pgFindServerBinaries(tt.lookPath, tt.glob)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("pgFindServerBinaries = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestPgClusterBinaries(t *testing.T) {
	root, glob := pgTestBinTree(t)
	given := pgServerBinaries{filepath.Join(root, "path/initdb"), filepath.Join(root, "path/pg_ctl")}
	tests := []struct {
		name    string
		version string // PG_VERSION of the cluster; "" for none
		want    pgServerBinaries
	}{
		{"no cluster", "", given},
		{"cluster of an installed version", "9.6\n",
			pgServerBinaries{filepath.Join(root, "lib/9.6/bin/initdb"), filepath.Join(root, "lib/9.6/bin/pg_ctl")}},
		{"cluster of an incomplete version", "16\n", given},
		{"cluster of a missing version", "11\n", given},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := t.TempDir()
			if tt.version != "" {
				if err := os.WriteFile(filepath.Join(dataDir, "PG_VERSION"), []byte(tt.version), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := pgClusterBinaries(given, glob, dataDir); got != tt.want {
				t.Errorf("pgClusterBinaries(PG_VERSION %q) = %v; want %v", tt.version, got, tt.want)
			}
		})
	}
}

// TestPgLocalDataDir: a session that is not root keeps the cluster in the
// project's .svc (root sessions: postgres_root_test.go).
func TestPgLocalDataDir(t *testing.T) {
	project := t.TempDir()
	if got, err := pgLocalDataDir(project, nil); err != nil || got != filepath.Join(project, ".svc", "postgres") {
		t.Errorf("pgLocalDataDir(%q, nil) = %q, %v; want .svc/postgres", project, got, err)
	}
}

func TestPostgresNoProvider(t *testing.T) {
	_, err := startPostgres(context.Background(), pgOptions{
		ProjectDir: t.TempDir(),
		Port:       1,
		Getenv:     func(string) string { return "" },
		LookPath:   func(string) (string, error) { return "", exec.ErrNotFound },
		BinGlob:    filepath.Join(t.TempDir(), "*", "bin"),
	})
	if !errors.Is(err, errNoPostgres) {
		t.Fatalf("startPostgres = %v; want errNoPostgres", err)
	}
	for _, want := range []string{"SVC_DATABASE_URL", "apt-get install postgresql", "docker", "podman"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("startPostgres error %q does not mention %q", err, want)
		}
	}
}

func TestPostgresEnvProvider(t *testing.T) {
	good := testPostgresURL(t)
	closed, err := pgTestFreePort()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		url     string
		wantErr string
	}{
		{"reachable", good, ""},
		{"unreachable", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/svc?sslmode=disable", closed), "connect to SVC_DATABASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := startPostgres(context.Background(), pgOptions{
				Getenv: func(k string) string {
					if k == "SVC_DATABASE_URL" {
						return tt.url
					}
					return ""
				},
				LookPath: func(string) (string, error) { return "", exec.ErrNotFound },
			})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("startPostgres = %v; want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("startPostgres: %v", err)
			}
			if p.URL != tt.url || p.Provider != "env" {
				t.Errorf("startPostgres = %q (%s); want %q (env)", p.URL, p.Provider, tt.url)
			}
			if err := p.Stop(context.Background()); err != nil {
				t.Errorf("Stop: %v", err)
			}
			if err := pgPing(context.Background(), tt.url); err != nil {
				t.Errorf("after Stop, the database is unreachable: %v", err)
			}
		})
	}
}

func TestPostgresPortBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	fake := pgFakeRuntimeInstall(t, "docker", "")
	tests := []struct {
		name     string
		lookPath func(string) (string, error)
	}{
		{"local", pgTestLocalLookPath},
		{"docker", fake.lookPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "local" {
				pgTestNeedLocal(t)
			}
			project := t.TempDir()
			t.Cleanup(func() { pgTestRemoveRootCluster(project) }) // the record made before the port check
			_, err := startPostgres(context.Background(), pgOptions{
				ProjectDir: project,
				Port:       port,
				Getenv:     func(string) string { return "" },
				LookPath:   tt.lookPath,
				BinGlob:    pgTestGlobFor(tt.name),
			})
			var busy *portBusyError
			if !errors.As(err, &busy) || busy.Port != port || busy.Service != "postgres" {
				t.Fatalf("startPostgres = %v; want *portBusyError for port %d", err, port)
			}
			if !strings.Contains(err.Error(), "SVC_DEV_PORT_OFFSET") {
				t.Errorf("error %q does not mention SVC_DEV_PORT_OFFSET", err)
			}
		})
	}
	for _, call := range fake.calls(t) {
		if call[0] == "run" {
			t.Errorf("the runtime was asked to run a container on a busy port: %q", call)
		}
	}
}

// pgTestGlobFor is the BinGlob for a provider under test: the real one for
// "local", none otherwise.
func pgTestGlobFor(provider string) string {
	if provider == "local" {
		return pgServerBinGlob
	}
	return "/nonexistent/svc-test/*/bin"
}

// pgTestNeedLocal fails (or skips, see pgTestUnavailable) a test that needs
// the local server binaries when they are missing.
func pgTestNeedLocal(t *testing.T) {
	t.Helper()
	if _, ok := pgFindServerBinaries(exec.LookPath, pgServerBinGlob); !ok {
		pgTestUnavailable(t, errors.New("this test needs the PostgreSQL server binaries (initdb, pg_ctl)"))
	}
}

// pgTestQuery returns the single text value of query on url.
func pgTestQuery(t *testing.T, url, query string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, query).Scan(&s); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return s
}

// pgTestExec runs sql, which may hold several statements, on url.
func pgTestExec(t *testing.T, url, sql string) {
	t.Helper()
	if err := pgTestExecError(t, url, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// pgTestLocalCluster returns the pgLocal that startPostgres will use for
// project and options that make startPostgres use it on a free port with
// getenv, and makes sure that a failed test leaves no server running and,
// as root, no data directory outside the project.
func pgTestLocalCluster(t testing.TB, project string, getenv func(string) string) (*pgLocal, pgOptions) {
	t.Helper()
	runAs, _, err := pgServerUser()
	if err != nil {
		t.Fatal(err)
	}
	port, err := pgTestFreePort()
	if err != nil {
		t.Fatal(err)
	}
	bins, _ := pgFindServerBinaries(exec.LookPath, pgServerBinGlob)
	dataDir, err := pgLocalDataDir(project, runAs)
	if err != nil {
		t.Fatal(err)
	}
	l := &pgLocal{bins: bins, dataDir: dataDir, runAs: runAs}
	t.Cleanup(func() {
		l.run(context.Background(), io.Discard, bins.pgCtl, "stop", "-m", "immediate", "-D", l.dataDir)
		pgTestRemoveRootCluster(project)
	})
	return l, pgOptions{ProjectDir: project, Port: port, Getenv: getenv, LookPath: pgTestLocalLookPath, NoSync: true}
}

func TestPostgresLocalProvider(t *testing.T) {
	pgTestNeedLocal(t)
	project := t.TempDir()
	l, o := pgTestLocalCluster(t, project, func(string) string { return "" })
	dataDir, port := l.dataDir, o.Port
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	boot := func(t *testing.T, log io.Writer) *pgService {
		t.Helper()
		o.Log = log
		p, err := startPostgres(ctx, o)
		if err != nil {
			t.Fatalf("startPostgres: %v", err)
		}
		if p.Provider != "local" || p.DataDir != dataDir {
			t.Fatalf("startPostgres = %s in %q; want local in %q", p.Provider, p.DataDir, dataDir)
		}
		if got := pgTestQuery(t, p.URL, "SELECT current_database()"); got != pgDatabase {
			t.Fatalf("current_database() = %q; want %q", got, pgDatabase)
		}
		return p
	}
	stop := func(t *testing.T, p *pgService) {
		t.Helper()
		if err := p.Stop(ctx); err != nil {
			t.Fatalf("Stop: %v", err)
		}
		if err := pgCheckPort(port); err != nil {
			t.Fatalf("after Stop: %v", err)
		}
	}

	var log syncBuffer
	p := boot(t, &log)
	pgTestExec(t, p.URL, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('yes')")
	_, err := startPostgres(ctx, pgOptions{ProjectDir: project, Port: port, Getenv: func(string) string { return "" }, LookPath: pgTestLocalLookPath})
	if !errors.Is(err, errPostgresInUse) {
		t.Errorf("a second session's startPostgres = %v; want errPostgresInUse", err)
	}
	if got := pgTestQuery(t, p.URL, "SELECT v FROM kept"); got != "yes" {
		t.Errorf("after a second session tried to start, kept = %q; want %q", got, "yes")
	}
	stop(t, p)
	if !strings.Contains(log.String(), "ready to accept connections") {
		t.Errorf("verbose log lacks the server's start line; got:\n%s", log.String())
	}
	if fi, err := os.Stat(filepath.Join(project, ".svc", "postgres.log")); err != nil || fi.Size() == 0 {
		t.Errorf("server log .svc/postgres.log missing or empty: %v", err)
	}

	t.Run("restart keeps data", func(t *testing.T) {
		p := boot(t, io.Discard)
		if got := pgTestQuery(t, p.URL, "SELECT v FROM kept"); got != "yes" {
			t.Errorf("kept = %q; want %q", got, "yes")
		}
		pgTestKillServer(t, dataDir)
		p.lock.Close() // the session dies with its server
	})
	t.Run("after SIGKILL with a stale postmaster.pid", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); err != nil {
			t.Fatalf("want a stale postmaster.pid: %v", err)
		}
		p := boot(t, io.Discard)
		if got := pgTestQuery(t, p.URL, "SELECT v FROM kept"); got != "yes" {
			t.Errorf("kept = %q; want %q", got, "yes")
		}
		p.lock.Close() // svc is killed, its server keeps running
	})
	t.Run("server left running by a killed session", func(t *testing.T) {
		p := boot(t, io.Discard)
		if got := pgTestQuery(t, p.URL, "SELECT v FROM kept"); got != "yes" {
			t.Errorf("kept = %q; want %q", got, "yes")
		}
		stop(t, p)
	})
}

// pgTestSentinels are secrets a test puts into svc's environment that no
// child process may be given.
var pgTestSentinels = map[string]string{
	"OPENAI_API_KEY":        "sk-sentinel-openai",
	"ANTHROPIC_API_KEY":     "sk-ant-sentinel-anthropic",
	"AWS_SECRET_ACCESS_KEY": "sentinel-aws-secret",
	"DATABASE_URL":          "postgres://sentinel:sentinel@db.invalid/sentinel",
	"PGPASSWORD":            "sentinel-pgpassword",
	"SVC_SENTINEL":          "sentinel-svc",
}

// pgTestSetSentinels puts pgTestSentinels into the test process's
// environment, where the old code passed everything on to its children, and
// returns a Getenv that reads that environment, but for SVC_DATABASE_URL, so
// that a managed provider is used.
func pgTestSetSentinels(t *testing.T) func(string) string {
	t.Helper()
	for k, v := range pgTestSentinels {
		t.Setenv(k, v)
	}
	return func(k string) string {
		if k == "SVC_DATABASE_URL" {
			return ""
		}
		return os.Getenv(k)
	}
}

// pgTestCheckEnv fails the test when env, a list of KEY=value, holds one of
// pgTestSentinels.
func pgTestCheckEnv(t testing.TB, what string, env []string) {
	t.Helper()
	if len(env) == 0 {
		t.Errorf("%s: empty environment; want at least PATH", what)
	}
	for _, kv := range env {
		for k, v := range pgTestSentinels {
			if strings.Contains(kv, v) {
				t.Errorf("%s: environment entry %q carries svc's %s", what, kv, k)
			}
		}
	}
}

// pgTestPostmasterEnv returns the environment of the postmaster running
// the cluster in dataDir, from /proc.
func pgTestPostmasterEnv(t testing.TB, dataDir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _, _ := strings.Cut(string(b), "\n")
	environ, err := os.ReadFile(filepath.Join("/proc", pid, "environ"))
	if err != nil {
		t.Fatalf("read the postmaster's environment: %v", err)
	}
	return strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")
}

// pgTestCheckPasswordOnly fails the test unless the URL of p logs in as the
// project's role with the password in the project's .svc/postgres-app.password
// and the cluster (whose files l describes) admits only passwords: no trust
// in pg_hba.conf, connections without a password or with a wrong one
// refused.
func pgTestCheckPasswordOnly(t *testing.T, p *pgService, l *pgLocal, project string) {
	t.Helper()
	u, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	password, ok := u.User.Password()
	if !ok || password == "" {
		t.Fatalf("URL %s carries no password", redactURL(p.URL))
	}
	path := filepath.Join(project, ".svc", pgAppPasswordFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != privateFileMode {
		t.Errorf("%s mode = %o; want %o", path, fi.Mode().Perm(), privateFileMode)
	}
	if b, _ := os.ReadFile(path); strings.TrimSpace(string(b)) != password {
		t.Errorf("%s does not hold the URL's password", path)
	}
	if trusts, err := l.trusts(); err != nil || trusts {
		t.Errorf("pg_hba.conf trusts = %v (%v); want no trust line", trusts, err)
	}
	for _, tt := range []struct{ name, password string }{{"no password", ""}, {"wrong password", password + "x"}} {
		cfg, err := pgx.ParseConfig(p.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Password = tt.password // also overrides PGPASSWORD and ~/.pgpass
		ctx, cancel := context.WithTimeout(context.Background(), pgConnectTimeout)
		conn, err := pgx.ConnectConfig(ctx, cfg)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			t.Errorf("connected with %s; want refused", tt.name)
		}
	}
	if got := pgTestQuery(t, p.URL, "SELECT current_user"); got != pgAppRole {
		t.Errorf("current_user = %q; want %q", got, pgAppRole)
	}
}

// TestPostgresLocalSecrets checks what the local cluster exposes: the
// postmaster's environment holds none of svc's secrets, connections need
// the password kept 0600 in .svc, and a cluster made by an earlier version
// with trust authentication and no password is converted on boot.
func TestPostgresLocalSecrets(t *testing.T) {
	pgTestNeedLocal(t)
	project := t.TempDir()
	l, o := pgTestLocalCluster(t, project, pgTestSetSentinels(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	boot := func() *pgService {
		t.Helper()
		p, err := startPostgres(ctx, o)
		if err != nil {
			t.Fatalf("startPostgres: %v", err)
		}
		return p
	}

	p := boot()
	pgTestCheckEnv(t, "postmaster", pgTestPostmasterEnv(t, l.dataDir))
	pgTestCheckPasswordOnly(t, p, l, project)
	pgTestExec(t, p.URL, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('yes')")

	// Make it the cluster of an earlier version: trust, no password.
	admin, err := pgTestSuperuserURL(p, filepath.Join(project, ".svc", pgPasswordFile), pgDatabase)
	if err != nil {
		t.Fatal(err)
	}
	pgTestExec(t, admin, "ALTER ROLE postgres PASSWORD NULL")
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	hba := filepath.Join(l.dataDir, "pg_hba.conf")
	trust := "local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\n"
	if err := os.WriteFile(hba, []byte(trust), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.chown(hba); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(project, ".svc", pgPasswordFile)); err != nil {
		t.Fatal(err)
	}

	upgraded := boot()
	defer upgraded.Stop(ctx)
	again, err := pgTestSuperuserURL(upgraded, filepath.Join(project, ".svc", pgPasswordFile), pgDatabase)
	if err != nil {
		t.Fatal(err)
	}
	if again == admin {
		t.Errorf("the converted cluster's superuser has the old password; want a newly minted one")
	}
	pgTestQuery(t, again, "SELECT 1") // the new superuser password is the cluster's
	pgTestCheckPasswordOnly(t, upgraded, l, project)
	if got := pgTestQuery(t, upgraded.URL, "SELECT v FROM kept"); got != "yes" {
		t.Errorf("after the conversion kept = %q; want %q", got, "yes")
	}
}

// TestPostgresRootMovesProjectCluster: as root, earlier versions kept the
// cluster in .svc/postgres when the postgres user could reach it; now that
// .svc is private, the cluster is moved to pgFallbackRoot with its data.
func TestPostgresRootMovesProjectCluster(t *testing.T) {
	pgTestNeedLocal(t)
	if os.Geteuid() != 0 {
		t.Skip("only a root session keeps its cluster outside the project")
	}
	project := t.TempDir()
	l, o := pgTestLocalCluster(t, project, func(string) string { return "" })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := startPostgres(ctx, o)
	if err != nil {
		t.Fatalf("startPostgres: %v", err)
	}
	pgTestExec(t, p.URL, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('yes')")
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(project, ".svc", "postgres")
	if err := os.Rename(l.dataDir, legacy); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(legacy) }) // owned by postgres, if the move failed

	p, err = startPostgres(ctx, o)
	if err != nil {
		t.Fatalf("startPostgres with the cluster in .svc/postgres: %v", err)
	}
	defer p.Stop(ctx)
	if got := pgTestQuery(t, p.URL, "SELECT v FROM kept"); got != "yes" {
		t.Errorf("kept = %q; want %q", got, "yes")
	}
	if _, err := os.Stat(legacy); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still exists (%v); want it moved to %s", legacy, err, l.dataDir)
	}
	fi, err := os.Stat(pgFallbackRoot)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != privateDirMode || st.Uid != l.runAs.Uid {
		t.Errorf("%s mode %o owner %d; want %o owned by the postgres user (%d)", pgFallbackRoot, fi.Mode().Perm(), st.Uid, privateDirMode, l.runAs.Uid)
	}
}

// pgTestKillServer kills the postmaster of dataDir and its children with
// SIGKILL, as a crash would, and waits until they are gone.
func pgTestKillServer(t *testing.T, dataDir string) {
	t.Helper()
	pid := pgTestPostmasterPid(t, dataDir)
	// pg_ctl starts the postmaster in a session of its own: its process
	// group holds the server's processes.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -KILL -%d: %v", pid, err)
	}
	for i := 0; syscall.Kill(-pid, 0) == nil; i++ {
		if i == 100 {
			t.Fatalf("postgres processes of group %d still exist 10s after SIGKILL (is PID 1 reaping orphans?)", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestPostgresContainerProvider(t *testing.T) {
	for _, runtime := range []string{"docker", "podman"} {
		t.Run(runtime, func(t *testing.T) {
			testPostgresURL(t) // the shared server must be up
			if pgTestShared.local == nil {
				t.Skip("the stand-in runtime forwards to the tests' own cluster, which SVC_DATABASE_URL replaces")
			}
			u, err := url.Parse(pgTestShared.adminURL)
			if err != nil {
				t.Fatal(err)
			}
			fake := pgFakeRuntimeInstall(t, runtime, u.Host)
			project := t.TempDir()
			// The stand-in forwards to the shared cluster, so the container's
			// passwords are that cluster's, as if the volume had been made
			// with them (the role's is set again at each boot).
			sharedPassword, _ := u.User.Password()
			sharedApp, err := url.Parse(pgTestShared.local.URL)
			if err != nil {
				t.Fatal(err)
			}
			sharedAppPassword, _ := sharedApp.User.Password()
			for file, password := range map[string]string{pgContainerPasswordFile: sharedPassword, pgContainerAppPasswordFile: sharedAppPassword} {
				if err := writeFileAtomic(filepath.Join(project, ".svc", file), []byte(password+"\n"), privateFileMode); err != nil {
					t.Fatal(err)
				}
			}
			getenv := pgTestSetSentinels(t)
			name := "svc-pg-" + pgProjectHash(project)
			volume := filepath.Join(project, ".svc", "postgres-container")
			runArgs := func(port int) []string {
				return []string{"run", "-d", "--name", name, "-p", fmt.Sprintf("127.0.0.1:%d:5432", port),
					"-e", "POSTGRES_PASSWORD", "-e", "POSTGRES_DB=svc",
					"-v", volume + ":/var/lib/postgresql/data", "docker.io/library/postgres:16"}
			}
			inspect := []string{"inspect", "--format", pgContainerInspectFormat, name}
			port, err := pgTestFreePort()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			seen := 0
			boot := func(port int, want ...[]string) *pgService {
				t.Helper()
				p, err := startPostgres(ctx, pgOptions{
					ProjectDir:   project,
					Port:         port,
					Getenv:       getenv,
					LookPath:     fake.lookPath,
					BinGlob:      pgTestGlobFor(runtime),
					ReadyTimeout: 30 * time.Second,
				})
				if err != nil {
					t.Fatalf("startPostgres: %v", err)
				}
				if p.Provider != runtime || p.DataDir != volume {
					t.Errorf("startPostgres = %s in %q; want %s in %q", p.Provider, p.DataDir, runtime, volume)
				}
				if got := pgTestQuery(t, p.URL, "SELECT current_database() || ' ' || current_user"); got != pgDatabase+" "+pgAppRole {
					t.Errorf("current_database() current_user = %q; want %q", got, pgDatabase+" "+pgAppRole)
				}
				calls := fake.calls(t)
				if got := calls[seen:]; !reflect.DeepEqual(got, want) {
					t.Errorf("runtime calls = %q; want %q", got, want)
				}
				seen = len(calls)
				return p
			}
			leaveStopped := func() { // as after a reboot
				t.Helper()
				fake.invoke(t, "stop", name)
				seen = len(fake.calls(t))
			}

			// Each session but the last is killed: it releases its lock and
			// leaves its container running.
			first := boot(port, inspect, runArgs(port))
			first.lock.Close()
			runEnv := fake.lastEnv(t) // of the run call
			pgTestCheckEnv(t, runtime+" run", runEnv)
			if !slices.Contains(runEnv, "POSTGRES_PASSWORD="+sharedPassword) {
				t.Errorf("%s run environment lacks POSTGRES_PASSWORD: %q", runtime, runEnv)
			}
			for _, kv := range runEnv {
				if strings.HasPrefix(kv, "POSTGRES_HOST_AUTH_METHOD=") {
					t.Errorf("%s run environment has %s", runtime, kv)
				}
			}
			again := boot(port, inspect) // reused as is
			again.lock.Close()
			if again.URL != first.URL {
				t.Errorf("second boot URL %q; want the first's %q (same password)", again.URL, first.URL)
			}
			leaveStopped()
			boot(port, inspect, []string{"start", name}).lock.Close()
			leaveStopped()
			// A stopped container publishing another port is replaced.
			other, err := pgTestFreePort()
			if err != nil {
				t.Fatal(err)
			}
			p := boot(other, inspect, []string{"rm", "-f", name}, runArgs(other))
			if err := p.Stop(ctx); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if got, want := fake.calls(t)[seen:], [][]string{{"stop", name}, {"rm", name}}; !reflect.DeepEqual(got, want) {
				t.Errorf("Stop runtime calls = %q; want %q", got, want)
			}
			if err := pgCheckPort(other); err != nil {
				t.Errorf("after Stop: %v", err)
			}
		})
	}
}

func TestPostgresContainerNotReady(t *testing.T) {
	fake := pgFakeRuntimeInstall(t, "docker", "") // runs containers that never listen
	project := t.TempDir()
	name := "svc-pg-" + pgProjectHash(project)
	port, err := pgTestFreePort()
	if err != nil {
		t.Fatal(err)
	}
	_, err = startPostgres(context.Background(), pgOptions{
		ProjectDir:   project,
		Port:         port,
		Getenv:       func(string) string { return "" },
		LookPath:     fake.lookPath,
		BinGlob:      pgTestGlobFor("docker"),
		ReadyTimeout: time.Second,
	})
	if err == nil {
		t.Fatal("startPostgres succeeded with a container that never listens")
	}
	for _, want := range []string{name, "not accepting connections after 1s", pgFakeRuntimeLogLine} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	calls := fake.calls(t)
	if last := calls[len(calls)-1]; !reflect.DeepEqual(last, []string{"rm", "-f", name}) {
		t.Errorf("last runtime call = %q; want the container removed", last)
	}
}

// The stand-in container runtime. A test writes a shell script named docker
// or podman that re-executes the test binary with pgFakeRuntimeDirEnv set;
// TestMain then runs pgFakeRuntime instead of the tests. It records each
// call, keeps one container's state in a file, and makes a "running"
// container publish its port by forwarding it, from a detached helper
// process, to a real PostgreSQL server (pgFakeRuntimeTargetEnv).

const (
	// pgFakeRuntimeDirEnv names the stand-in's state directory.
	pgFakeRuntimeDirEnv = "SVC_TEST_FAKE_RUNTIME_DIR"
	// pgFakeRuntimeTargetEnv is the host:port containers forward to; empty
	// means containers never listen.
	pgFakeRuntimeTargetEnv = "SVC_TEST_FAKE_RUNTIME_TARGET"
	// pgFakeForwardEnv makes the test binary a port forwarder to its value.
	pgFakeForwardEnv = "SVC_TEST_FAKE_FORWARD_TO"
	// pgFakeForwardLifetime bounds a forwarder that nobody stopped.
	pgFakeForwardLifetime = 2 * time.Minute
	// pgFakeRuntimeLogLine is what the stand-in's logs command prints.
	pgFakeRuntimeLogLine = "stand-in container log line"
	// pgFakeRuntimeEnvFile, in the stand-in's directory, holds the
	// environment of its last call as a JSON list of KEY=value.
	pgFakeRuntimeEnvFile = "env.json"
)

// pgFakeRuntimeMain plays the stand-in runtime or the forwarder when the
// environment asks for one, and reports whether it did.
func pgFakeRuntimeMain() (code int, ok bool) {
	if target := os.Getenv(pgFakeForwardEnv); target != "" {
		return pgFakeForward(target), true
	}
	if dir := os.Getenv(pgFakeRuntimeDirEnv); dir != "" {
		return pgFakeRuntime(dir, os.Getenv(pgFakeRuntimeTargetEnv), os.Args[1:], os.Stdout, os.Stderr), true
	}
	return 0, false
}

// pgFakeRuntimeHandle is a stand-in runtime installed for one test.
type pgFakeRuntimeHandle struct {
	dir, script string
	lookPath    func(string) (string, error)
}

// pgFakeRuntimeInstall writes the stand-in runtime as name, forwarding
// containers to target, and returns it with a LookPath that finds only it.
// Cleanup stops a forwarder the test left behind.
func pgFakeRuntimeInstall(t *testing.T, name, target string) *pgFakeRuntimeHandle {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, name)
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	body := fmt.Sprintf("#!/bin/sh\nexport %s=%s %s=%s\nexec %s \"$@\"\n",
		pgFakeRuntimeDirEnv, quote(dir), pgFakeRuntimeTargetEnv, quote(target), quote(exe))
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := pgFakeLoad(dir); err == nil && c != nil {
			c.stopForwarder()
		}
	})
	return &pgFakeRuntimeHandle{
		dir:    dir,
		script: script,
		lookPath: func(n string) (string, error) {
			if n == name {
				return script, nil
			}
			return "", exec.ErrNotFound
		},
	}
}

// invoke runs the stand-in as a user would.
func (h *pgFakeRuntimeHandle) invoke(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(h.script, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v\n%s", filepath.Base(h.script), args, err, out)
	}
}

// lastEnv returns the environment the stand-in's last call was given.
func (h *pgFakeRuntimeHandle) lastEnv(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, pgFakeRuntimeEnvFile))
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatalf("%s: %v", pgFakeRuntimeEnvFile, err)
	}
	return env
}

// calls returns the argument lists the stand-in was called with, in order.
func (h *pgFakeRuntimeHandle) calls(t *testing.T) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(h.dir, "calls.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var calls [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var args []string
		if err := json.Unmarshal(sc.Bytes(), &args); err != nil {
			t.Fatalf("calls.jsonl: %v", err)
		}
		calls = append(calls, args)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return calls
}

// pgFakeContainer is the stand-in's one container.
type pgFakeContainer struct {
	Name, HostIP, HostPort string
	Running                bool
	ForwarderPID           int
}

// pgFakeLoad reads the container state in dir; nil when there is none.
func pgFakeLoad(dir string) (*pgFakeContainer, error) {
	b, err := os.ReadFile(filepath.Join(dir, "container.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c pgFakeContainer
	return &c, json.Unmarshal(b, &c)
}

// save writes the container state to dir.
func (c *pgFakeContainer) save(dir string) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "container.json"), b, 0o600)
}

// start marks the container running and, with a target, binds its port and
// hands the listener to a detached forwarder.
func (c *pgFakeContainer) start(target string) error {
	c.Running = true
	if target == "" {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(c.HostIP, c.HostPort))
	if err != nil {
		return err
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		return err
	}
	defer f.Close()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), pgFakeForwardEnv+"="+target)
	cmd.ExtraFiles = []*os.File{f}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	c.ForwarderPID = cmd.Process.Pid
	return cmd.Process.Release()
}

// stopForwarder stops the forwarder and waits (bounded) until the port is free.
func (c *pgFakeContainer) stopForwarder() {
	c.Running = false
	if c.ForwarderPID == 0 {
		return
	}
	syscall.Kill(c.ForwarderPID, syscall.SIGKILL)
	c.ForwarderPID = 0
	addr := net.JoinHostPort(c.HostIP, c.HostPort)
	for i := 0; i < 100; i++ {
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pgFakeRuntime runs one command of the stand-in runtime and returns its
// exit code.
func pgFakeRuntime(dir, target string, args []string, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "Error: "+format+"\n", a...)
		return code
	}
	if len(args) == 0 {
		return fail(1, "no command")
	}
	line, _ := json.Marshal(args)
	log, err := os.OpenFile(filepath.Join(dir, "calls.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fail(1, "%v", err)
	}
	fmt.Fprintf(log, "%s\n", line)
	log.Close()
	if env, err := json.Marshal(os.Environ()); err != nil || os.WriteFile(filepath.Join(dir, pgFakeRuntimeEnvFile), env, 0o600) != nil {
		return fail(1, "record the environment: %v", err)
	}
	c, err := pgFakeLoad(dir)
	if err != nil {
		return fail(1, "%v", err)
	}
	name := args[len(args)-1]
	if args[0] != "run" && (c == nil || c.Name != name) {
		return fail(1, "No such container: %s", name)
	}
	switch args[0] {
	case "inspect":
		bindings, _ := json.Marshal(map[string][]map[string]string{"5432/tcp": {{"HostIp": c.HostIP, "HostPort": c.HostPort}}})
		fmt.Fprintf(stdout, "%t %s\n", c.Running, bindings)
	case "run":
		if c != nil {
			return fail(125, "Conflict. The container name %q is already in use", c.Name)
		}
		if os.Getenv("POSTGRES_PASSWORD") == "" {
			return fail(125, "POSTGRES_PASSWORD is not in the environment")
		}
		c = &pgFakeContainer{}
		for i := 1; i+1 < len(args); i++ {
			switch args[i] {
			case "--name":
				c.Name = args[i+1]
			case "-p":
				host, _ := strings.CutSuffix(args[i+1], ":5432")
				c.HostIP, c.HostPort, _ = net.SplitHostPort(host)
			}
		}
		if err := c.start(target); err != nil {
			return fail(125, "%v", err)
		}
		fmt.Fprintln(stdout, "0123456789ab")
	case "start":
		if err := c.start(target); err != nil {
			return fail(1, "%v", err)
		}
	case "stop":
		c.stopForwarder()
	case "rm":
		if c.Running && args[1] != "-f" {
			return fail(1, "cannot remove container %q: container is running", name)
		}
		c.stopForwarder()
		if err := os.Remove(filepath.Join(dir, "container.json")); err != nil {
			return fail(1, "%v", err)
		}
		return 0
	case "logs":
		fmt.Fprintln(stdout, pgFakeRuntimeLogLine)
		return 0
	default:
		return fail(1, "unknown command %q", args[0])
	}
	if err := c.save(dir); err != nil {
		return fail(1, "%v", err)
	}
	return 0
}

// pgFakeForward forwards connections on the listener inherited as fd 3 to
// target until killed or pgFakeForwardLifetime passes. It runs in a process
// of its own, which owns its goroutines.
func pgFakeForward(target string) int {
	ln, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	time.AfterFunc(pgFakeForwardLifetime, func() { ln.Close() })
	tcpForward(ln, target)
	return 0
}

// tcpForward copies each connection accepted on ln to and from a new
// connection to target, until ln is closed.
func tcpForward(ln net.Listener, target string) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			upstream, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer upstream.Close()
			go func() {
				io.Copy(upstream, conn)
				upstream.(*net.TCPConn).CloseWrite()
			}()
			io.Copy(conn, upstream)
		}()
	}
}
