package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// pgTestExecError runs sql, which may hold several statements, on dbURL
// and returns the server's error, nil when it succeeded.
func pgTestExecError(t *testing.T, dbURL, sql string) *pgconn.PgError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("%s: %v", sql, err)
	}
	return pgErr
}

// pgTestWithDatabase returns dbURL with its database replaced by db.
func pgTestWithDatabase(t *testing.T, dbURL, db string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}

// TestDevHandsOutProjectRole runs svc dev on its own cluster (as root,
// under pgFallbackRoot) and uses the URL it hands out as an attacker who
// learnt it would: it is not a superuser, so COPY ... PROGRAM is refused,
// and it reaches no other database. The project still works through it: a
// user migration creates a trusted extension, auto-migrate makes the
// starter's table, a run started over the API writes its row, and the user
// creates tables of their own.
func TestDevHandsOutProjectRole(t *testing.T) {
	pgTestNeedLocal(t)
	dir := projectDir(t)
	writeFile(t, dir, ".svc/migrations/0000_pgcrypto.sql", "CREATE EXTENSION IF NOT EXISTS pgcrypto;\n")
	d := startDev(t, dir, baseEnv("OPENAI_API_KEY=sk-test"))
	dbURL := d.payload.Services.PostgresURL
	stdout, stderr, code := cli(t, dir, baseEnv(), "--json", "env")
	var env struct {
		Data devEnvOutput `json:"data"`
	}
	if err := json.Unmarshal([]byte(stdout), &env); err != nil || code != 0 || env.Data.Env["DATABASE_URL"] != dbURL {
		t.Fatalf("svc env --json = exit %d %q %q; want DATABASE_URL the payload's", code, stdout, stderr)
	}

	if got := pgTestQuery(t, dbURL, "SELECT current_user || ' super=' || rolsuper || ' createdb=' || rolcreatedb || ' createrole=' || rolcreaterole FROM pg_roles WHERE rolname = current_user"); got != pgAppRole+" super=false createdb=false createrole=false" {
		t.Errorf("the URL logs in as %q; want %q, no superuser", got, pgAppRole)
	}
	for _, sql := range []string{
		"COPY (SELECT 1) TO PROGRAM 'true'",
		"CREATE TABLE copied (v text); COPY copied FROM PROGRAM 'id'",
		"SELECT pg_read_file('/etc/passwd')",
		"CREATE DATABASE other",
		"CREATE ROLE other LOGIN SUPERUSER",
	} {
		if pgErr := pgTestExecError(t, dbURL, sql); pgErr == nil || pgErr.Code != "42501" {
			t.Errorf("%s through the URL handed out = %v; want permission denied (42501)", sql, pgErr)
		}
	}
	for _, db := range []string{"postgres", "template1"} {
		ctx, cancel := context.WithTimeout(context.Background(), pgConnectTimeout)
		conn, err := pgx.Connect(ctx, pgTestWithDatabase(t, dbURL, db))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			t.Errorf("the URL handed out connects to the database %q; want refused", db)
		}
	}

	// The project works through it.
	if got := pgTestQuery(t, dbURL, "SELECT extowner::regrole::text || ' ' || encode(digest('svc', 'sha256'), 'hex') FROM pg_extension WHERE extname = 'pgcrypto'"); got != pgAppRole+" 348c658682ae8701d3e9d21f191872491cf15e6acbb1681770b1cb787c1cf7ff" {
		t.Errorf("pgcrypto, created by a user migration: %q", got)
	}
	pgTestExec(t, dbURL, "CREATE TABLE mine (v text); INSERT INTO mine VALUES ('yes')")
	if got := pgTestQuery(t, dbURL, "SELECT v FROM mine"); got != "yes" {
		t.Errorf("mine = %q; want yes", got)
	}
	var rc startReceipt
	if st := httpJSON(t, "POST", d.url("/api/workflows/greet/start"), map[string]string{"name": "Role"}, &rc); st != 202 {
		t.Fatalf("start greet = %d", st)
	}
	var got struct{ Run runRecord }
	httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID+"?wait=20s"), nil, &got)
	if got.Run.Status != runCompleted {
		t.Fatalf("greet run = %s %+v; want completed", got.Run.Status, got.Run.Error)
	}
	var output any
	if err := json.Unmarshal(got.Run.Output, &output); err != nil {
		t.Fatal(err)
	}
	scaffoldDataPath(t, dir, baseEnv(), output) // the row auto-migrate's table holds, read through svc env's URL
	if code := d.interrupt(); code != 0 {
		t.Errorf("SIGINT exit = %d\n%s", code, d.stderr.String())
	}
}

// pgTestOldLayoutSQL gives, as the superuser, what earlier versions left:
// the database, its schemas and every object in them owned by the
// superuser (public too, as PostgreSQL 14 and earlier made it), and an
// extension the superuser created.
const pgTestOldLayoutSQL = `
ALTER SCHEMA public OWNER TO postgres;
CREATE EXTENSION pgcrypto;
CREATE SCHEMA legacy;
CREATE TYPE legacy.mood AS ENUM ('ok', 'meh');
CREATE DOMAIN legacy.short AS text CHECK (length(VALUE) < 20);
CREATE TYPE legacy.pair AS (a int, b int);
CREATE TABLE legacy.notes (id serial PRIMARY KEY, body legacy.short NOT NULL, mood legacy.mood NOT NULL DEFAULT 'ok');
INSERT INTO legacy.notes (body) VALUES ('first');
CREATE SEQUENCE legacy.counter;
CREATE VIEW legacy.bodies AS SELECT body FROM legacy.notes;
CREATE MATERIALIZED VIEW legacy.counted AS SELECT count(*) AS n FROM legacy.notes;
CREATE FUNCTION legacy.shout(t text) RETURNS text LANGUAGE sql AS $$ SELECT upper(t) $$;
CREATE PROCEDURE legacy.add(b text) LANGUAGE sql AS $$ INSERT INTO legacy.notes (body) VALUES (b) $$;
CREATE TABLE public.kept (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text);
INSERT INTO public.kept (v) VALUES ('yes');
CREATE OPERATOR legacy.=== (LEFTARG = int, RIGHTARG = int, FUNCTION = int4eq);
CREATE COLLATION legacy.bytes FROM "C";
CREATE TEXT SEARCH DICTIONARY legacy.dict (TEMPLATE = simple);
CREATE TEXT SEARCH CONFIGURATION legacy.search (COPY = simple);
CREATE STATISTICS legacy.stats ON id, body FROM legacy.notes;
SELECT lo_from_bytea(0, 'blob');
ALTER DATABASE svc OWNER TO postgres;
`

// pgTestNotOwnedSQL lists what in the database, its schemas public, legacy
// and svc, and the objects in them (but those of extensions), is not owned
// by the project's role.
const pgTestNotOwnedSQL = `
WITH objs (what, owner, oid, classid) AS (
	SELECT 'database', datdba, oid, 'pg_database'::regclass FROM pg_database WHERE datname = current_database()
	UNION ALL SELECT 'schema ' || nspname, nspowner, oid, 'pg_namespace'::regclass FROM pg_namespace WHERE nspname IN ('public', 'legacy', 'svc')
	UNION ALL SELECT 'relation ' || oid::regclass, relowner, oid, 'pg_class'::regclass FROM pg_class WHERE relnamespace::regnamespace::text IN ('public', 'legacy', 'svc')
	UNION ALL SELECT 'type ' || oid::regtype, typowner, oid, 'pg_type'::regclass FROM pg_type t WHERE typnamespace::regnamespace::text IN ('public', 'legacy', 'svc')
		AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.oid = t.typelem AND e.typarray = t.oid) -- an array type follows its element
	UNION ALL SELECT 'routine ' || oid::regprocedure, proowner, oid, 'pg_proc'::regclass FROM pg_proc WHERE pronamespace::regnamespace::text IN ('public', 'legacy', 'svc')
	UNION ALL SELECT 'operator ' || oid::regoperator, oprowner, oid, 'pg_operator'::regclass FROM pg_operator WHERE oprnamespace::regnamespace::text IN ('public', 'legacy', 'svc')
	UNION ALL SELECT 'collation ' || collname, collowner, oid, 'pg_collation'::regclass FROM pg_collation WHERE collnamespace::regnamespace::text IN ('public', 'legacy', 'svc')
	UNION ALL SELECT 'text search configuration ' || oid::regconfig, cfgowner, oid, 'pg_ts_config'::regclass FROM pg_ts_config WHERE cfgnamespace::regnamespace::text IN ('public', 'legacy', 'svc')
	UNION ALL SELECT 'text search dictionary ' || oid::regdictionary, dictowner, oid, 'pg_ts_dict'::regclass FROM pg_ts_dict WHERE dictnamespace::regnamespace::text IN ('public', 'legacy', 'svc')
	UNION ALL SELECT 'statistics ' || stxname, stxowner, oid, 'pg_statistic_ext'::regclass FROM pg_statistic_ext WHERE stxnamespace::regnamespace::text IN ('public', 'legacy', 'svc')
	UNION ALL SELECT 'large object ' || oid, lomowner, oid, 'pg_largeobject_metadata'::regclass FROM pg_largeobject_metadata
)
SELECT coalesce(string_agg(what || ' (' || owner::regrole || ')', ', ' ORDER BY what), '') FROM objs o
WHERE owner::regrole::text <> 'svc_app'
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = o.classid AND d.objid = o.oid AND d.deptype = 'e')`

// TestPostgresRoleTakesOverOldCluster: a cluster made by an earlier
// version, where the superuser owns the database and all in it and every
// role reaches every database, is given to the project's role at boot: its
// data (the runtime's own tables too) stays readable and writable through
// the URL svc hands out, extensions keep their objects, and the next boot,
// with nothing left to move, works as well.
func TestPostgresRoleTakesOverOldCluster(t *testing.T) {
	pgTestNeedLocal(t)
	project := t.TempDir()
	l, o := pgTestLocalCluster(t, project, func(string) string { return "" })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	migrations := filepath.Join(project, "migrations") // none of the user's
	boot := func(what string) (*pgService, string) {
		t.Helper()
		p, err := startPostgres(ctx, o)
		if err != nil {
			t.Fatalf("%s: startPostgres: %v", what, err)
		}
		admin, err := pgTestSuperuserURL(p, filepath.Join(project, ".svc", pgPasswordFile), pgDatabase)
		if err != nil {
			t.Fatal(err)
		}
		return p, admin
	}

	// Make the cluster of an earlier version.
	p, admin := boot("first boot")
	if _, err := applyMigrations(ctx, admin, migrations, io.Discard); err != nil { // the runtime's tables, made by the superuser
		t.Fatal(err)
	}
	pgTestExec(t, admin, "REASSIGN OWNED BY svc_app TO postgres; DROP OWNED BY svc_app")
	pgTestExec(t, pgTestWithDatabase(t, admin, "postgres"), "DROP ROLE svc_app; GRANT CONNECT ON DATABASE postgres, template1 TO PUBLIC")
	pgTestExec(t, admin, pgTestOldLayoutSQL)
	if got := pgTestQuery(t, admin, pgTestNotOwnedSQL); got == "" {
		t.Fatal("the old layout left nothing owned by the superuser")
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	oldHBA := "host all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n"
	hba := filepath.Join(l.dataDir, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte(oldHBA), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := l.chown(hba); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(project, ".svc", pgAppPasswordFile)); err != nil {
		t.Fatal(err)
	}

	secret := "" // the role's SCRAM secret, which a boot with the same password file leaves as it is
	for _, what := range []string{"the boot that takes over", "a boot with nothing to move"} {
		p, admin := boot(what)
		got := pgTestQuery(t, admin, "SELECT rolpassword FROM pg_authid WHERE rolname = 'svc_app'")
		if secret != "" && got != secret {
			t.Errorf("%s: the role's password was set again; want it left as it was", what)
		}
		secret = got
		if got := pgTestQuery(t, admin, pgTestNotOwnedSQL); got != "" {
			t.Errorf("%s: not owned by %s: %s", what, pgAppRole, got)
		}
		if got := pgTestQuery(t, admin, "SELECT proowner::regrole::text FROM pg_proc WHERE proname = 'digest' LIMIT 1"); got != pgSuperuser {
			t.Errorf("%s: pgcrypto's digest is owned by %s; want it left to %s, with its extension", what, got, pgSuperuser)
		}
		if b, err := os.ReadFile(hba); err != nil || string(b) != pgHBA {
			t.Errorf("%s: pg_hba.conf = %q (%v); want pgHBA", what, b, err)
		}
		pgTestExec(t, p.URL, `INSERT INTO legacy.notes (body, mood) VALUES ('second', 'meh');
CALL legacy.add('third');
REFRESH MATERIALIZED VIEW legacy.counted;
INSERT INTO kept (v) VALUES ('more');
UPDATE kept SET v = v || '!' WHERE id = 1;
CREATE TABLE legacy.added (v legacy.pair, w text COLLATE legacy.bytes);
SELECT to_tsvector('legacy.search', 'words');
ALTER TEXT SEARCH DICTIONARY legacy.dict (StopWords = english);
ALTER STATISTICS legacy.stats SET STATISTICS 10;
DROP TABLE legacy.added`)
		want := fmt.Sprintf("first,second,third | n=3 | SECOND | 1 | yes!,more | true | blob | %s", pgAppRole)
		if got := pgTestQuery(t, p.URL, `SELECT (SELECT string_agg(body, ',' ORDER BY body) FROM legacy.bodies) || ' | n=' || (SELECT n FROM legacy.counted)
			|| ' | ' || legacy.shout('second') || ' | ' || nextval('legacy.counter') || ' | ' || (SELECT string_agg(v, ',' ORDER BY id) FROM kept)
			|| ' | ' || (1 OPERATOR(legacy.===) 1) || ' | ' || (SELECT convert_from(lo_get(oid), 'UTF8') FROM pg_largeobject_metadata)
			|| ' | ' || current_user`); got != want {
			t.Errorf("%s: through the URL handed out = %q; want %q", what, got, want)
		}
		pgTestExec(t, p.URL, "DELETE FROM legacy.notes WHERE id > 1; DELETE FROM kept WHERE id > 1; UPDATE kept SET v = 'yes'; ALTER SEQUENCE legacy.counter RESTART")
		if _, err := applyMigrations(ctx, p.URL, migrations, io.Discard); err != nil {
			t.Errorf("%s: the platform migrations through the URL handed out: %v", what, err)
		}
		pgTestExec(t, p.URL, "INSERT INTO svc.kv (key, value) VALUES ('svc-role-test', '1'); DELETE FROM svc.kv WHERE key = 'svc-role-test'")
		if got := pgTestQuery(t, admin, "SELECT has_database_privilege('svc_app', 'postgres', 'CONNECT')::text"); got != "false" {
			t.Errorf("%s: the project's role may connect to the database postgres", what)
		}
		if err := p.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// A replaced password file: the role gets that password.
	if err := writeFileAtomic(filepath.Join(project, ".svc", pgAppPasswordFile), []byte("replaced-password\n"), privateFileMode); err != nil {
		t.Fatal(err)
	}
	p, _ = boot("a boot with a replaced password file")
	defer p.Stop(ctx)
	if u, err := url.Parse(p.URL); err != nil || u.User.String() != pgAppRole+":replaced-password" {
		t.Errorf("the URL handed out does not carry the replaced password")
	}
	if got := pgTestQuery(t, p.URL, "SELECT v FROM kept"); got != "yes" {
		t.Errorf("with the replaced password file, kept = %q; want yes", got)
	}
}

// TestPostgresRoleCannotBrickBoot is issue 36, item 8 as the project's own
// role did it: ALTER DATABASE svc SET local_preload_libraries (a library
// that does not exist: no backend of the database starts) and
// default_transaction_read_only (the boot's CREATE SCHEMA fails), and the
// same on the role. The next boot resets them, says which, and serves.
func TestPostgresRoleCannotBrickBoot(t *testing.T) {
	pgTestNeedLocal(t)
	project := t.TempDir()
	_, o := pgTestLocalCluster(t, project, func(string) string { return "" })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p, err := startPostgres(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	pgTestExec(t, p.URL, "ALTER DATABASE svc SET default_transaction_read_only = on; ALTER ROLE svc_app SET statement_timeout = '1ms'; "+
		"ALTER ROLE svc_app IN DATABASE svc SET lock_timeout = '1ms'; ALTER DATABASE svc SET timezone = 'Europe/Paris'; ALTER DATABASE svc SET local_preload_libraries = 'x'")
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	p, err = startPostgres(ctx, o)
	if err != nil {
		t.Fatalf("the boot after the role's settings: %v", err)
	}
	defer p.Stop(context.Background())
	got := strings.Join(p.Undid, "; ")
	for _, want := range []string{"database svc: local_preload_libraries=x", "database svc: default_transaction_read_only=on", "role svc_app: statement_timeout=1ms", "role svc_app in database svc: lock_timeout=1ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("the boot reset %q; want %q among them", got, want)
		}
	}
	if strings.Contains(got, "timezone") {
		t.Errorf("the boot reset a harmless setting: %s", got)
	}
	if v := pgTestQuery(t, p.URL, "SELECT current_setting('default_transaction_read_only') || ' ' || current_setting('timezone')"); v != "off Europe/Paris" {
		t.Errorf("after the boot the project's role sees %q; want read-only off, its time zone kept", v)
	}
	if _, err := applyMigrations(ctx, p.URL, filepath.Join(project, "migrations"), io.Discard); err != nil {
		t.Errorf("the runtime's migrations after the boot: %v", err)
	}
}
