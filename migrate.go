package main

// Migrations for `svc dev` (SPEC §1 boot step 2, DESIGN §6): the platform's
// own migrations, embedded in the binary, then the user's .svc/migrations/*.sql
// in lexical order. Each file is applied once, in its own transaction together
// with its row in svc.svc_migrations, so a file is either fully applied and
// recorded or not at all. A file must therefore not contain transaction
// control (BEGIN, COMMIT) or statements that cannot run in a transaction
// (CREATE INDEX CONCURRENTLY).

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// migratePlatformFS holds the platform migrations. It is a package variable
// because go:embed only fills package variables; nothing writes it.
//
//go:embed platform_migrations/*.sql
var migratePlatformFS embed.FS

const (
	// migratePlatformDir is the directory of migratePlatformFS holding the files.
	migratePlatformDir = "platform_migrations"
	// migratePlatformPrefix prefixes the tracked names of platform migrations;
	// user migrations are tracked by their bare file name, which has no "/".
	migratePlatformPrefix = "platform/"
	// migrateLockKey is the advisory lock that serialises concurrent boots on
	// one database ("svc_migr" in ASCII).
	migrateLockKey int64 = 0x7376635f6d696772
	// migrateBootstrapSQL creates what the runner itself needs.
	migrateBootstrapSQL = `CREATE SCHEMA IF NOT EXISTS svc;
CREATE TABLE IF NOT EXISTS svc.svc_migrations (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`
)

// errMigrationEdited reports that an applied migration's file has changed.
var errMigrationEdited = errors.New("was edited after it was applied; add a new migration instead")

// migrationError reports a migration that could not be checked or applied.
// Err is errMigrationEdited or the database error (a *pgconn.PgError when
// the server rejected the SQL).
type migrationError struct {
	Op   string // "check" or "apply"
	File string // file path; platform files are "platform/<file>"
	Line int    // line of the error in the file; 0 when unknown
	Err  error
}

// Error names the file, the line when known, and the database's message
// with its detail and hint.
func (e *migrationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s migration %q: ", e.Op, e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	b.WriteString(e.Err.Error())
	var pgErr *pgconn.PgError
	if errors.As(e.Err, &pgErr) {
		if pgErr.Detail != "" {
			b.WriteString("; detail: " + pgErr.Detail)
		}
		if pgErr.Hint != "" {
			b.WriteString("; hint: " + pgErr.Hint)
		}
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *migrationError) Unwrap() error { return e.Err }

// migrateFile is one migration to apply.
type migrateFile struct {
	name     string // tracked name
	path     string // shown in errors
	sql      string
	checksum string // hex SHA-256 of the file
}

// applyMigrations applies the platform migrations and then userDir/*.sql (a
// missing userDir has none) to the database at databaseURL, each file once,
// and returns the tracked names of the files it applied, in order. It stops
// at the first failure, returning what it applied before it and a
// *migrationError; files after it are not run. An applied file whose content
// changed fails before anything is applied. Concurrent calls on one database
// take turns.
func applyMigrations(ctx context.Context, databaseURL string, userDir string, log io.Writer) (applied []string, err error) {
	if log == nil {
		log = io.Discard
	}
	files, err := migrateLoad(userDir)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) // also releases the advisory lock
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockKey); err != nil {
		return nil, fmt.Errorf("apply migrations: lock: %w", err)
	}
	if _, err := conn.Exec(ctx, migrateBootstrapSQL); err != nil {
		return nil, fmt.Errorf("apply migrations: create svc.svc_migrations: %w", err)
	}
	done, err := migrateApplied(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	for _, f := range files {
		if sum, ok := done[f.name]; ok && sum != f.checksum {
			return nil, &migrationError{Op: "check", File: f.path, Err: errMigrationEdited}
		}
	}
	for _, f := range files {
		if _, ok := done[f.name]; ok {
			continue
		}
		if err := migrateApply(ctx, conn, f); err != nil {
			return applied, err
		}
		applied = append(applied, f.name)
		fmt.Fprintf(log, "applied migration %s\n", f.path)
	}
	return applied, nil
}

// migrateLoad reads the platform migrations and then the user's, each group
// in lexical order of file name.
func migrateLoad(userDir string) ([]migrateFile, error) {
	var files []migrateFile
	platform, err := fs.ReadDir(migratePlatformFS, migratePlatformDir)
	if err != nil {
		return nil, err
	}
	for _, e := range platform {
		b, err := migratePlatformFS.ReadFile(path.Join(migratePlatformDir, e.Name()))
		if err != nil {
			return nil, err
		}
		name := migratePlatformPrefix + e.Name()
		files = append(files, migrateNewFile(name, name, b))
	}
	userFiles, err := os.ReadDir(userDir) // sorted by file name
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range userFiles {
		if e.IsDir() || filepath.Ext(e.Name()) != ".sql" {
			continue
		}
		p := filepath.Join(userDir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		files = append(files, migrateNewFile(e.Name(), p, b))
	}
	return files, nil
}

// migrateNewFile describes a migration file with its checksum.
func migrateNewFile(name, shown string, content []byte) migrateFile {
	sum := sha256.Sum256(content)
	return migrateFile{name: name, path: shown, sql: string(content), checksum: hex.EncodeToString(sum[:])}
}

// migrateApplied returns the checksums of the applied migrations by name.
func migrateApplied(ctx context.Context, conn *pgx.Conn) (map[string]string, error) {
	rows, err := conn.Query(ctx, "SELECT name, checksum FROM svc.svc_migrations")
	if err != nil {
		return nil, fmt.Errorf("read svc.svc_migrations: %w", err)
	}
	done := make(map[string]string)
	var name, sum string
	_, err = pgx.ForEachRow(rows, []any{&name, &sum}, func() error {
		done[name] = sum
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read svc.svc_migrations: %w", err)
	}
	return done, nil
}

// migrateApply runs one file and records it in one transaction. The file
// goes through the simple query protocol (Exec without arguments), which
// accepts several statements.
func migrateApply(ctx context.Context, conn *pgx.Conn, f migrateFile) error {
	fail := func(err error) error {
		e := &migrationError{Op: "apply", File: f.path, Err: err}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			e.Line = migrateLine(f.sql, pgErr.Position)
		}
		return e
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // no-op after Commit
	if _, err := tx.Exec(ctx, f.sql); err != nil {
		return fail(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO svc.svc_migrations (name, checksum) VALUES ($1, $2)", f.name, f.checksum); err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return nil
}

// migrateLine converts a PostgreSQL error position (1-based, in characters
// of the query text) to a 1-based line number; 0 when there is no position.
func migrateLine(sql string, position int32) int {
	if position <= 0 {
		return 0
	}
	line, n := 1, int32(1)
	for _, r := range sql {
		if n >= position {
			break
		}
		if r == '\n' {
			line++
		}
		n++
	}
	return line
}
