package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// migrateTestWrite writes files (name → content) into dir.
func migrateTestWrite(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// migrateTestExists reports whether the table exists in the database at url.
func migrateTestExists(t *testing.T, url, table string) bool {
	t.Helper()
	return pgTestQuery(t, url, "SELECT (to_regclass('"+table+"') IS NOT NULL)::text") == "true"
}

// migrateTestTracked returns the names in svc.svc_migrations, by name.
func migrateTestTracked(t *testing.T, url string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT name FROM svc.svc_migrations ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// migrateTestPlatform is the tracked names of the platform migrations.
func migrateTestPlatform(t *testing.T) []string {
	t.Helper()
	files, err := migrateLoad("")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.name)
	}
	return names
}

func TestMigrateAppliesOnceInOrder(t *testing.T) {
	url := testPostgresURL(t)
	dir := t.TempDir()
	migrateTestWrite(t, dir, map[string]string{
		"0001_users.sql": "CREATE TABLE users (id int PRIMARY KEY);\nINSERT INTO users VALUES (1);\n",
		// Several statements, relying on the file before it.
		"0002_orders.sql": `CREATE TABLE orders (id int PRIMARY KEY, user_id int REFERENCES users);
INSERT INTO orders SELECT 10, id FROM users;
CREATE INDEX orders_user ON orders (user_id);
CREATE FUNCTION order_count() RETURNS bigint LANGUAGE sql AS $$ SELECT count(*) FROM orders; $$;
`,
		"notes.txt": "not a migration",
	})
	if err := os.Mkdir(filepath.Join(dir, "old.sql"), 0o755); err != nil { // a directory, not a migration
		t.Fatal(err)
	}
	ctx := context.Background()
	var log bytes.Buffer

	applied, err := applyMigrations(ctx, url, dir, &log)
	if err != nil {
		t.Fatalf("first boot: %v", err)
	}
	want := append(migrateTestPlatform(t), "0001_users.sql", "0002_orders.sql")
	if !reflect.DeepEqual(applied, want) {
		t.Errorf("first boot applied %q; want %q", applied, want)
	}
	if got := pgTestQuery(t, url, "SELECT order_count()::text"); got != "1" {
		t.Errorf("order_count() = %s; want 1", got)
	}
	for _, table := range []string{"svc.secrets", "svc.kv"} {
		if !migrateTestExists(t, url, table) {
			t.Errorf("platform table %s missing", table)
		}
	}
	if !strings.Contains(log.String(), "applied migration "+filepath.Join(dir, "0002_orders.sql")) {
		t.Errorf("log %q does not report 0002_orders.sql", log.String())
	}

	applied, err = applyMigrations(ctx, url, dir, nil)
	if err != nil || len(applied) != 0 {
		t.Errorf("second boot applied %q, %v; want nothing", applied, err)
	}

	migrateTestWrite(t, dir, map[string]string{"0003_more.sql": "ALTER TABLE users ADD COLUMN email text;"})
	applied, err = applyMigrations(ctx, url, dir, nil)
	if err != nil || !reflect.DeepEqual(applied, []string{"0003_more.sql"}) {
		t.Errorf("third boot applied %q, %v; want [0003_more.sql]", applied, err)
	}
	wantTracked := append(migrateTestPlatform(t), "0001_users.sql", "0002_orders.sql", "0003_more.sql")
	slices.Sort(wantTracked)
	if got := migrateTestTracked(t, url); !reflect.DeepEqual(got, wantTracked) {
		t.Errorf("svc.svc_migrations = %q; want %q", got, wantTracked)
	}
}

func TestMigrateWithoutUserDir(t *testing.T) {
	url := testPostgresURL(t)
	applied, err := applyMigrations(context.Background(), url, filepath.Join(t.TempDir(), "missing"), nil)
	if err != nil || !reflect.DeepEqual(applied, migrateTestPlatform(t)) {
		t.Errorf("applyMigrations = %q, %v; want only the platform migrations", applied, err)
	}
}

func TestMigrateEditedFile(t *testing.T) {
	url := testPostgresURL(t)
	dir := t.TempDir()
	migrateTestWrite(t, dir, map[string]string{"0001_users.sql": "CREATE TABLE users (id int);"})
	ctx := context.Background()
	if _, err := applyMigrations(ctx, url, dir, nil); err != nil {
		t.Fatal(err)
	}
	migrateTestWrite(t, dir, map[string]string{
		"0001_users.sql": "CREATE TABLE users (id int, name text);",
		"0002_next.sql":  "CREATE TABLE next (id int);",
	})
	applied, err := applyMigrations(ctx, url, dir, nil)
	if !errors.Is(err, errMigrationEdited) {
		t.Fatalf("applyMigrations = %q, %v; want errMigrationEdited", applied, err)
	}
	for _, want := range []string{filepath.Join(dir, "0001_users.sql"), "was edited after it was applied; add a new migration instead"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if len(applied) != 0 || migrateTestExists(t, url, "next") {
		t.Errorf("a migration after the edited one was applied: %q", applied)
	}
}

func TestMigrateFailureRollsBack(t *testing.T) {
	tests := []struct {
		name     string
		bad      string
		wantLine int
		wantMsg  string
	}{
		{"syntax error", "CREATE TABLE half (id int);\nINSERT INTO half VALUES (1);\nCREATE TABLEX broken (id int);\n",
			3, `syntax error at or near "TABLEX"`},
		{"missing table", "CREATE TABLE half (id int);\n\n-- then\nINSERT INTO nosuch VALUES (1);\n",
			4, `relation "nosuch" does not exist`},
		{"error without position", "CREATE TABLE half (id int);\nSELECT 1/0;\n",
			0, "division by zero"},
		{"error with detail", "CREATE TABLE half (id int PRIMARY KEY);\nINSERT INTO half VALUES (1), (1);\n",
			0, "detail: Key (id)=(1) already exists."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := testPostgresURL(t)
			dir := t.TempDir()
			migrateTestWrite(t, dir, map[string]string{
				"0001_users.sql": "CREATE TABLE users (id int);",
				"0002_bad.sql":   tt.bad,
				"0003_later.sql": "CREATE TABLE later (id int);",
			})
			ctx := context.Background()
			applied, err := applyMigrations(ctx, url, dir, nil)
			if want := append(migrateTestPlatform(t), "0001_users.sql"); !reflect.DeepEqual(applied, want) {
				t.Errorf("applied %q; want %q", applied, want)
			}
			var merr *migrationError
			if !errors.As(err, &merr) {
				t.Fatalf("applyMigrations error = %v; want *migrationError", err)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				t.Errorf("error %v does not wrap a *pgconn.PgError", err)
			}
			if merr.File != filepath.Join(dir, "0002_bad.sql") || merr.Line != tt.wantLine {
				t.Errorf("error at %q line %d; want %q line %d", merr.File, merr.Line, filepath.Join(dir, "0002_bad.sql"), tt.wantLine)
			}
			for _, want := range []string{"0002_bad.sql", tt.wantMsg} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if migrateTestExists(t, url, "half") {
				t.Error("table half from the failed file's first statement exists; want it rolled back")
			}
			if !migrateTestExists(t, url, "users") || migrateTestExists(t, url, "later") {
				t.Error("want the file before the failure applied and the file after it not run")
			}

			migrateTestWrite(t, dir, map[string]string{"0002_bad.sql": "CREATE TABLE half (id int);"})
			applied, err = applyMigrations(ctx, url, dir, nil)
			if err != nil || !reflect.DeepEqual(applied, []string{"0002_bad.sql", "0003_later.sql"}) {
				t.Errorf("after the fix applied %q, %v; want [0002_bad.sql 0003_later.sql]", applied, err)
			}
		})
	}
}

func TestMigrateConcurrentBoots(t *testing.T) {
	url := testPostgresURL(t)
	dir := t.TempDir()
	migrateTestWrite(t, dir, map[string]string{
		"0001_a.sql": "CREATE TABLE a (id int);",
		"0002_b.sql": "CREATE TABLE b (id int);",
	})
	const boots = 4
	results := make([][]string, boots)
	errs := make([]error, boots)
	var wg sync.WaitGroup
	for i := range boots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = applyMigrations(context.Background(), url, dir, nil)
		}()
	}
	wg.Wait()
	var all []string
	for i := range boots {
		if errs[i] != nil {
			t.Errorf("boot %d: %v", i, errs[i])
		}
		all = append(all, results[i]...)
	}
	slices.Sort(all)
	want := append(migrateTestPlatform(t), "0001_a.sql", "0002_b.sql")
	slices.Sort(want)
	if !reflect.DeepEqual(all, want) {
		t.Errorf("concurrent boots applied %q in total; want each file once: %q", all, want)
	}
}

func TestMigrateLine(t *testing.T) {
	tests := []struct {
		sql      string
		position int32
		want     int
	}{
		{"SELECT 1", 0, 0},
		{"SELECT 1", 1, 1},
		{"a\nb", 2, 1}, // the newline itself
		{"a\nb", 3, 2},
		{"é\nx", 3, 2}, // positions count characters, not bytes
		{"a\n\n\nb", 5, 4},
	}
	for _, tt := range tests {
		if got := migrateLine(tt.sql, tt.position); got != tt.want {
			t.Errorf("migrateLine(%q, %d) = %d; want %d", tt.sql, tt.position, got, tt.want)
		}
	}
}
