package main

// TestMain, and the PostgreSQL server shared by the package's tests.

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// testLong runs the tests that need minutes (the container image build,
// the replicas' crash loop): the README's test command leaves them out to
// stay within minutes, and .ci/run runs them after it (issue 38, item E).
var testLong = flag.Bool("long", false, "also run the tests that need minutes (the container image, the replicas' crash loop); .ci/run passes it")

// needsLong skips t unless -long was given.
func needsLong(t *testing.T, what string) {
	t.Helper()
	if !*testLong {
		t.Skipf("%s: minutes of work, run with -long (.ci/run does)", what)
	}
}

// pgTestShared is the PostgreSQL server shared by the package's tests. It is
// a package variable because testPostgresURL(t) has no other way to reach
// it, and TestMain must stop it after the last test.
var pgTestShared pgTestServer

// pgTestServer starts the shared server on first use: SVC_DATABASE_URL when
// set, else a cluster of the local server binaries in a temporary project.
type pgTestServer struct {
	once       sync.Once
	adminURL   string     // a postgres:// URL whose user may CREATE DATABASE
	local      *pgService // the cluster the tests started; nil with SVC_DATABASE_URL
	projectDir string     // the temporary project holding local
	err        error
}

// TestMain runs the tests and then stops the shared server. When the test
// binary is re-executed as the stand-in container runtime (see
// postgres_test.go) or as the benchmarks' bare proxy (bench_floor_test.go),
// it plays that part instead.
func TestMain(m *testing.M) {
	if code, ok := pgFakeRuntimeMain(); ok {
		os.Exit(code)
	}
	if code, ok := benchProxyMain(); ok {
		os.Exit(code)
	}
	code := m.Run()
	if err := pgTestShared.close(); err != nil {
		fmt.Fprintf(os.Stderr, "stop the shared test PostgreSQL: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// testPostgresURL returns the URL of a new, empty database on the shared test
// server, dropped when the test ends. Without PostgreSQL the test fails with
// what to do, or is skipped when SVC_SKIP_POSTGRES_TESTS=1.
func testPostgresURL(t testing.TB) string {
	t.Helper()
	pgTestShared.once.Do(pgTestShared.start)
	if pgTestShared.err != nil {
		pgTestUnavailable(t, pgTestShared.err)
	}
	u, err := url.Parse(pgTestShared.adminURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("testPostgresURL: SVC_DATABASE_URL must be a postgres:// URL for the tests")
	}
	name := "t_" + strings.ToLower(rand.Text())
	pgTestAdminExec(t, "CREATE DATABASE "+name)
	t.Cleanup(func() {
		pgTestAdminExec(t, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u.Path = "/" + name
	return u.String()
}

// pgTestUnavailable fails the test because PostgreSQL is missing, or skips
// it when SVC_SKIP_POSTGRES_TESTS=1: CI must not pass by skipping.
func pgTestUnavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("SVC_SKIP_POSTGRES_TESTS") == "1" {
		t.Skipf("SVC_SKIP_POSTGRES_TESTS=1: %v", err)
	}
	t.Fatalf("%v\n(set SVC_DATABASE_URL to a server the tests may create databases on, install the PostgreSQL server binaries, or set SVC_SKIP_POSTGRES_TESTS=1 to skip)", err)
}

// pgTestAdminExec runs one statement on the shared server's admin database.
func pgTestAdminExec(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgTestShared.adminURL)
	if err != nil {
		t.Fatalf("connect to the shared test server: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// start gets the shared server: SVC_DATABASE_URL, else a local cluster of a
// temporary project (in /var/lib/svc/postgres when the tests run as root).
func (s *pgTestServer) start() {
	if u := os.Getenv("SVC_DATABASE_URL"); u != "" {
		s.adminURL = u
		return
	}
	if _, ok := pgFindServerBinaries(exec.LookPath, pgServerBinGlob); !ok {
		s.err = errors.New("no PostgreSQL for the tests: SVC_DATABASE_URL is unset and initdb/pg_ctl were not found")
		return
	}
	dir, err := os.MkdirTemp("", "svc-pgtest-")
	if err != nil {
		s.err = fmt.Errorf("shared test PostgreSQL: %w", err)
		return
	}
	s.projectDir = dir
	port, err := pgTestFreePort()
	if err != nil {
		s.err = fmt.Errorf("shared test PostgreSQL: %w", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := startPostgres(ctx, pgOptions{
		ProjectDir: dir,
		Port:       port,
		Getenv:     func(string) string { return "" },
		LookPath:   pgTestLocalLookPath,
		Log:        io.Discard,
		NoSync:     true,
	})
	if err != nil {
		s.err = fmt.Errorf("shared test PostgreSQL: %w", err)
		return
	}
	s.local = p
	if s.adminURL, err = pgTestSuperuserURL(p, filepath.Join(dir, ".svc", pgPasswordFile), "postgres"); err != nil {
		s.err = fmt.Errorf("shared test PostgreSQL: %w", err)
	}
}

// pgTestSuperuserURL returns the URL of database db on the cluster of p as
// the superuser, whose password is kept in passwordFile: what svc hands
// out logs in as the project's role.
func pgTestSuperuserURL(p *pgService, passwordFile, db string) (string, error) {
	u, err := url.Parse(p.URL)
	if err != nil {
		return "", err
	}
	password, err := pgReadToken(passwordFile, "the superuser password")
	if err != nil || password == "" {
		return "", fmt.Errorf("no superuser password in %s (%v)", passwordFile, err)
	}
	u.User = url.UserPassword(pgSuperuser, password)
	u.Path = "/" + db
	return u.String(), nil
}

// close stops the cluster the tests started and removes its data directory
// (outside the project, with its record, when the tests run as root) and
// its project.
func (s *pgTestServer) close() error {
	var err error
	if s.local != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = errors.Join(s.local.Stop(ctx), os.RemoveAll(s.local.DataDir))
	}
	if s.projectDir != "" {
		pgTestRemoveRootCluster(s.projectDir) // its record, as root
		err = errors.Join(err, os.RemoveAll(s.projectDir))
	}
	return err
}

// pgTestLocalLookPath finds the local server binaries but no container
// runtime, so startPostgres can only use the local provider.
func pgTestLocalLookPath(name string) (string, error) {
	if name == "docker" || name == "podman" {
		return "", exec.ErrNotFound
	}
	return exec.LookPath(name)
}

// pgTestFreePort returns a port on 127.0.0.1 that was free a moment ago.
func pgTestFreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
