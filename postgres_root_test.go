package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgTestRemoveRootCluster removes the cluster a root session keeps for
// projectDir outside it, and its record; it does nothing when there is none.
// Register it after the project's own removal, so that it runs before.
func pgTestRemoveRootCluster(projectDir string) {
	id, ok := pgProjectClusterID(projectDir)
	if !ok || !pgIsClusterID(id) {
		return
	}
	os.RemoveAll(filepath.Join(pgFallbackRoot, id))
	os.Remove(filepath.Join(pgFallbackRoot, id+pgClusterRecordExt))
}

// pgTestNeedRoot skips the test unless it runs as root with the server
// binaries: only a root session keeps its cluster outside the project.
func pgTestNeedRoot(t *testing.T) {
	t.Helper()
	pgTestNeedLocal(t)
	if os.Geteuid() != 0 {
		t.Skip("only a root session keeps its cluster under " + pgFallbackRoot + " (run the tests as root, as containers and CI do)")
	}
}

// pgTestTableExists reports whether the table exists in the database at url.
func pgTestTableExists(t *testing.T, url, table string) bool {
	t.Helper()
	return pgTestQuery(t, url, "SELECT (to_regclass('"+table+"') IS NOT NULL)::text") == "true"
}

// TestDevRootProjectMadeAgain runs, as root and with real processes, svc
// init, svc dev, Ctrl-C, rm -rf, svc init and svc dev at the same path: the
// second project boots on a cluster of its own (the first one's password
// went with its .svc). The first project's cluster, an orphan, is kept
// while recently used and removed by a boot once unused for pgOrphanGrace.
func TestDevRootProjectMadeAgain(t *testing.T) {
	pgTestNeedRoot(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "demo")
	var clusters []string
	t.Cleanup(func() {
		for _, c := range clusters {
			os.RemoveAll(c)
			os.Remove(c + pgClusterRecordExt)
		}
	})
	env := baseEnv()
	boot := func(what string) (*devProcess, string) {
		t.Helper()
		d := startDev(t, dir, env)
		if d.payload.Services.PostgresURL == "" {
			t.Fatalf("%s: no PostgreSQL URL in the payload", what)
		}
		id, _ := pgProjectClusterID(dir)
		if !pgIsClusterID(id) {
			t.Fatalf("%s: .svc/%s = %q; want a cluster id", what, pgClusterIDFile, id)
		}
		cluster := filepath.Join(pgFallbackRoot, id)
		clusters = append(clusters, cluster)
		return d, cluster
	}
	stop := func(what string, d *devProcess) {
		t.Helper()
		if code := d.interrupt(); code != 0 {
			t.Fatalf("%s: SIGINT exit = %d\n%s", what, code, d.stderr.String())
		}
	}
	initProject := func() {
		t.Helper()
		if _, stderr, code := cli(t, parent, env, "init", "demo"); code != 0 {
			t.Fatalf("svc init demo = %d\n%s", code, stderr)
		}
	}

	initProject()
	first, old := boot("first project")
	pgTestExec(t, first.payload.Services.PostgresURL, "CREATE TABLE first_project (v text)")
	stop("first project", first)

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	initProject()
	second, current := boot("the project made again")
	if current == old {
		t.Errorf("the project made again uses the first one's cluster %s", old)
	}
	if pgTestTableExists(t, second.payload.Services.PostgresURL, "first_project") {
		t.Errorf("the project made again sees the first project's table")
	}
	stop("the project made again", second)
	if _, err := os.Stat(filepath.Join(old, "PG_VERSION")); err != nil {
		t.Errorf("the orphan cluster, used %s ago, was removed (%v); want it kept for pgOrphanGrace", "seconds", err)
	}

	// Once the orphan has been unused for pgOrphanGrace, the next boot removes it.
	long := time.Now().Add(-pgOrphanGrace - time.Hour)
	if err := os.Chtimes(old+pgClusterRecordExt, long, long); err != nil {
		t.Fatal(err)
	}
	third, again := boot("a later boot")
	if again != current {
		t.Errorf("a later boot uses the cluster %s; want %s", again, current)
	}
	stop("a later boot", third)
	for _, p := range []string{old, old + pgClusterRecordExt} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s of the orphan cluster is still there (%v)", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(current, "PG_VERSION")); err != nil {
		t.Errorf("the project's own cluster: %v", err)
	}
}

// TestPostgresRootOrphanKept: the orphan cleanup keeps a cluster whose
// project still holds its id, one whose project cannot be told, and a
// running orphan; it removes a stopped, old orphan.
func TestPostgresRootOrphanKept(t *testing.T) {
	pgTestNeedRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	project, running := t.TempDir(), t.TempDir()
	l, o := pgTestLocalCluster(t, project, func(string) string { return "" })
	p, err := startPostgres(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(ctx)
	lr, or := pgTestLocalCluster(t, running, func(string) string { return "" })
	pr, err := startPostgres(ctx, or)
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Stop(ctx)
	long := time.Now().Add(-pgOrphanGrace - time.Hour)
	for _, c := range []string{l.dataDir, lr.dataDir} {
		if err := os.Chtimes(c+pgClusterRecordExt, long, long); err != nil {
			t.Fatal(err)
		}
	}
	bins, _ := pgFindServerBinaries(pgTestLocalLookPath, pgServerBinGlob)
	runAs, _, err := pgServerUser()
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	o.Log = &log
	sweep := func() { pgRemoveOrphanClusters(ctx, o, "", bins, runAs, nil, time.Now()) }

	sweep()
	if _, err := os.Stat(l.dataDir); err != nil {
		t.Fatalf("the cluster of a project that holds its id was removed: %v", err)
	}
	// Both projects removed: the running orphan stays, the stopped one goes.
	for _, dir := range []string{project, running} {
		if err := os.Remove(filepath.Join(dir, ".svc", pgClusterIDFile)); err != nil {
			t.Fatal(err)
		}
	}
	sweep()
	if _, err := os.Stat(lr.dataDir); err != nil {
		t.Errorf("a running orphan was removed: %v", err)
	}
	if _, err := os.Stat(l.dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the stopped, old orphan %s is still there (%v)", l.dataDir, err)
	}
	if want := "removed the PostgreSQL cluster " + l.dataDir + ": its project " + project + " is gone"; !strings.Contains(log.String(), want) {
		t.Errorf("the verbose log lacks %q:\n%s", want, log.String())
	}
	if !pgTestTableExists(t, pr.URL, "pg_class") {
		t.Errorf("the running orphan's server stopped answering")
	}
}

// TestPostgresPasswordRefused: when the password file no longer matches the
// cluster, the error says what happened and names the one command that
// fixes it, and that command does.
func TestPostgresPasswordRefused(t *testing.T) {
	pgTestNeedLocal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	project := t.TempDir()
	l, o := pgTestLocalCluster(t, project, func(string) string { return "" })
	p, err := startPostgres(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	p.Stop(ctx)
	passwordFile := filepath.Join(project, ".svc", pgPasswordFile)
	if err := os.WriteFile(passwordFile, []byte("another-password\n"), privateFileMode); err != nil {
		t.Fatal(err)
	}
	_, err = startPostgres(ctx, o)
	if err == nil {
		t.Fatal("startPostgres with a replaced password file succeeded")
	}
	fix := "rm -rf " + l.dataDir
	for _, want := range []string{"refused the password in " + passwordFile, "`" + fix + "`", "deletes that cluster"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if running, _ := l.running(ctx); running {
		t.Errorf("the server still runs after the refused boot")
	}
	if err := os.RemoveAll(l.dataDir); err != nil { // the command the error names
		t.Fatal(err)
	}
	p, err = startPostgres(ctx, o)
	if err != nil {
		t.Fatalf("after %s: %v", fix, err)
	}
	defer p.Stop(ctx)
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
}

// TestPostgresRootProjectIdentity: the cluster follows the project, not its
// path. A moved project keeps its data; a copy made with its .svc gets a
// cluster of its own; a project upgraded from a version that named the
// cluster by the path's hash adopts that cluster, while a project made
// again at that path (no password file) leaves it alone.
func TestPostgresRootProjectIdentity(t *testing.T) {
	pgTestNeedRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	parent := t.TempDir()
	original, copied, moved, fresh := filepath.Join(parent, "original"), filepath.Join(parent, "copied"), filepath.Join(parent, "moved"), filepath.Join(parent, "fresh")
	for _, dir := range []string{original, fresh} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	getenv := func(string) string { return "" }
	l, o := pgTestLocalCluster(t, original, getenv)
	boot := func(what string, o pgOptions) (*pgService, func()) {
		t.Helper()
		p, err := startPostgres(ctx, o)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return p, func() { p.Stop(ctx) }
	}
	p, stop := boot("original", o)
	pgTestExec(t, p.URL, "CREATE TABLE kept (v text)")
	stop()

	if out, err := exec.Command("cp", "-a", original, copied).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	lc, oc := pgTestLocalCluster(t, copied, getenv)
	if lc.dataDir == l.dataDir {
		t.Errorf("the copy's cluster is the original's, %s", l.dataDir)
	}
	p, stop = boot("copy", oc)
	if pgTestTableExists(t, p.URL, "kept") {
		t.Errorf("the copy sees the original's table")
	}
	stop()

	if err := os.Rename(original, moved); err != nil {
		t.Fatal(err)
	}
	o.ProjectDir = moved
	t.Cleanup(func() { pgTestRemoveRootCluster(moved) })
	p, stop = boot("moved", o)
	if p.DataDir != l.dataDir || !pgTestTableExists(t, p.URL, "kept") {
		t.Errorf("the moved project runs %s without its table; want %s with it", p.DataDir, l.dataDir)
	}
	stop()
	if got := pgClusterProject(filepath.Base(l.dataDir)); got != moved {
		t.Errorf("the cluster's record names %q; want %q", got, moved)
	}

	// An earlier version's cluster, named by the path's hash: adopted by its
	// project (which has the password file), with its data.
	legacy := filepath.Join(pgFallbackRoot, pgProjectHash(moved))
	t.Cleanup(func() { os.RemoveAll(legacy) })
	if err := os.Rename(l.dataDir, legacy); err != nil {
		t.Fatal(err)
	}
	os.Remove(l.dataDir + pgClusterRecordExt)
	if err := os.Remove(filepath.Join(moved, ".svc", pgClusterIDFile)); err != nil {
		t.Fatal(err)
	}
	p, stop = boot("upgraded", o)
	if !pgTestTableExists(t, p.URL, "kept") {
		t.Errorf("the upgraded project lost the table of its hash-named cluster")
	}
	stop()
	if _, err := os.Lstat(legacy); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the hash-named cluster %s is still there (%v); want it renamed to the project's id", legacy, err)
	}

	// A project made again at a path whose hash names a cluster: not its own.
	adopted, _ := pgProjectClusterID(moved)
	legacyFresh := filepath.Join(pgFallbackRoot, pgProjectHash(fresh))
	t.Cleanup(func() { os.RemoveAll(legacyFresh) })
	if err := os.Rename(filepath.Join(pgFallbackRoot, adopted), legacyFresh); err != nil {
		t.Fatal(err)
	}
	_, of := pgTestLocalCluster(t, fresh, getenv)
	p, stop = boot("made again", of)
	if p.DataDir == legacyFresh || pgTestTableExists(t, p.URL, "kept") {
		t.Errorf("the project made again runs the cluster of its path's hash")
	}
	stop()
	if _, err := os.Stat(filepath.Join(legacyFresh, "PG_VERSION")); err != nil {
		t.Errorf("the hash-named cluster was not left alone: %v", err)
	}
}
