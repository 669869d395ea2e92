package main

// The project's own role on the clusters svc manages (see postgres.go).
//
// svc hands user code, the runtime and clients (DATABASE_URL, `svc env`, the
// dev payload) a URL, and whoever learns it must not be able to do more than
// read and write the project's data: a superuser runs programs as the OS
// account of the server (COPY ... FROM PROGRAM). So at every boot, connected
// as the superuser, whose password never leaves postgres.go, pgProvisionApp
// makes sure that:
//
//   - the login role pgAppRole exists with no attribute beyond LOGIN
//     (NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS), is a
//     member of no other role, and has the password kept 0600 in .svc
//     (pgAppPasswordFile, or pgContainerAppPasswordFile for the container),
//     minted once; the password is set again when the role's SCRAM secret
//     is not that of the file, so a replaced file still works;
//   - the project database pgDatabase exists and is owned by that role, so it
//     may create schemas and trusted extensions (pgcrypto, uuid-ossp, citext:
//     PostgreSQL 13 and later) but nothing outside the database;
//   - PUBLIC may not connect to the cluster's other databases (the local
//     cluster's pg_hba.conf also admits the role to the project database
//     only; the container image's admits every role everywhere);
//   - what the superuser owns in the project database is the role's
//     (pgOwnershipMovesSQL): clusters made by earlier versions handed out
//     the superuser, which owns all they created. The move is one
//     transaction; objects that belong to an extension stay (so do the
//     extensions, which the role then may not drop or update).
//
// An ordinary boot, with all in place, takes one connection and only reads
// the catalogs.

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// pgAppRole is the role that owns the project database and that every
	// URL svc hands out logs in as.
	pgAppRole = "svc_app"
	// pgAppPasswordFile, under .svc, holds pgAppRole's password on the local
	// cluster.
	pgAppPasswordFile = "postgres-app.password"
	// pgContainerAppPasswordFile, under .svc, holds pgAppRole's password on
	// the container's cluster.
	pgContainerAppPasswordFile = "postgres-container-app.password"
	// pgUndefinedDatabase is the SQLSTATE of a database that does not exist.
	pgUndefinedDatabase = "3D000"
	// pgSCRAMMaxIterations bounds the iterations of a SCRAM secret that
	// pgSCRAMMatches computes (PostgreSQL's default is 4096).
	pgSCRAMMaxIterations = 1 << 20
)

// pgAppRoleAttributes are the attributes of pgAppRole, given again at boot
// when they differ (pgAppRoleStateSQL): it logs in, with no expiry, and may
// do nothing a superuser grants beyond its own database.
const pgAppRoleAttributes = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT CONNECTION LIMIT -1 VALID UNTIL 'infinity'"

// pgOwnershipMovesSQL lists, as statements, what must become pgAppRole's
// ($1) in the current database: the database itself, and what the
// superuser ($2) owns there: its schemas (not the system's), the objects
// in them of pgSchemaObjectKinds, and its large objects. Objects of
// extensions are left out. The database comes first, then schemas, then
// the kinds in their order. The session's search_path is pg_catalog, so
// the names come qualified.
var pgOwnershipMovesSQL = pgOwnershipMovesQuery()

// pgSchemaObjectKinds are the kinds of objects in a schema whose owner
// moves: each kind's catalog, the ALTER keyword (an SQL expression, x
// being the catalog's row, n its schema's), the object's name for that
// ALTER, the owner and schema columns, and what else keeps a row out. What
// follows another object is left out: indexes, TOAST tables and sequences
// linked to a column follow their table, a table's row type its table,
// array and multirange types their element or range.
var pgSchemaObjectKinds = []struct{ catalog, alter, name, owner, namespace, filter string }{
	{"pg_type", "CASE x.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END", "x.oid::regtype", "typowner", "typnamespace",
		`x.typtype <> 'm' AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.oid = x.typelem AND e.typarray = x.oid)
		AND (x.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = x.typrelid) = 'c')`},
	{"pg_class", "CASE x.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END",
		"x.oid::regclass", "relowner", "relnamespace",
		`x.relkind IN ('r', 'p', 'v', 'm', 'S', 'f') AND NOT (x.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d
		WHERE d.classid = 'pg_class'::regclass AND d.objid = x.oid AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))`},
	{"pg_proc", "'ROUTINE'", "x.oid::regprocedure", "proowner", "pronamespace", ""},
	{"pg_operator", "'OPERATOR'", "x.oid::regoperator", "oprowner", "oprnamespace", ""},
	{"pg_collation", "'COLLATION'", "format('%I.%I', n.nspname, x.collname)", "collowner", "collnamespace", ""},
	{"pg_ts_config", "'TEXT SEARCH CONFIGURATION'", "x.oid::regconfig", "cfgowner", "cfgnamespace", ""},
	{"pg_ts_dict", "'TEXT SEARCH DICTIONARY'", "x.oid::regdictionary", "dictowner", "dictnamespace", ""},
	{"pg_statistic_ext", "'STATISTICS'", "format('%I.%I', n.nspname, x.stxname)", "stxowner", "stxnamespace", ""},
}

// pgOwnershipMovesQuery builds pgOwnershipMovesSQL.
func pgOwnershipMovesQuery() string {
	var b strings.Builder
	b.WriteString(`WITH super AS (SELECT oid FROM pg_roles WHERE rolname = $2::text),
user_ns AS (
	SELECT oid, nspname, nspowner FROM pg_namespace
	WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname !~ '^pg_(toast|temp_|toast_temp_)'
),
ext AS (SELECT classid, objid FROM pg_depend WHERE deptype = 'e')
SELECT stmt FROM (
	SELECT 0 AS ord, format('ALTER DATABASE %I OWNER TO %I', datname, $1::text) AS stmt
	FROM pg_database
	WHERE datname = current_database() AND datdba <> (SELECT oid FROM pg_roles WHERE rolname = $1::text)
	UNION ALL
	SELECT 1, format('ALTER SCHEMA %I OWNER TO %I', n.nspname, $1::text)
	FROM user_ns n
	WHERE n.nspowner = (SELECT oid FROM super)
	  AND NOT EXISTS (SELECT 1 FROM ext WHERE classid = 'pg_namespace'::regclass AND objid = n.oid)
	UNION ALL
	SELECT 1000, format('ALTER LARGE OBJECT %s OWNER TO %I', l.oid, $1::text)
	FROM pg_largeobject_metadata l
	WHERE l.lomowner = (SELECT oid FROM super)`)
	for i, k := range pgSchemaObjectKinds {
		fmt.Fprintf(&b, `
	UNION ALL
	SELECT %d, format('ALTER %%s %%s OWNER TO %%I', %s, %s, $1::text)
	FROM %s x JOIN user_ns n ON n.oid = x.%s
	WHERE x.%s = (SELECT oid FROM super)
	  AND NOT EXISTS (SELECT 1 FROM ext WHERE classid = '%s'::regclass AND objid = x.oid)`,
			i+2, k.alter, k.name, k.catalog, k.namespace, k.owner, k.catalog)
		if k.filter != "" {
			b.WriteString("\n\t  AND " + k.filter)
		}
	}
	b.WriteString("\n) moves ORDER BY ord")
	return b.String()
}

// pgProvisionApp makes the cluster on 127.0.0.1:port, reached as the
// superuser with superPassword, ready for the URL pgAppURL returns (see the
// comment at the top of this file).
func pgProvisionApp(ctx context.Context, superPassword string, port int, appPassword string) ([]string, error) {
	undid, err := pgUndoBootBreakers(ctx, pgURL(pgSuperuser, superPassword, port, "postgres"))
	if err != nil {
		return nil, fmt.Errorf("undo the settings that stop a boot: %w", err)
	}
	return undid, pgProvisionAppRole(ctx, superPassword, port, appPassword)
}

// pgBootBreakers are the settings that, set on the project database or on
// pgAppRole (which owns that database and may set them there), stop a
// backend from starting (a preloaded library that does not exist) or the
// boot's own work (a read-only default, a timeout of a millisecond, a
// search_path, a tablespace or role of its own): issue 36, item 8.
var pgBootBreakers = map[string]bool{
	"local_preload_libraries": true, "session_preload_libraries": true,
	"default_transaction_read_only": true, "transaction_read_only": true,
	"statement_timeout": true, "lock_timeout": true, "idle_in_transaction_session_timeout": true,
	"idle_session_timeout": true, "transaction_timeout": true,
	"search_path": true, "default_tablespace": true, "temp_tablespaces": true,
	"role": true, "session_authorization": true,
}

// pgUndoBootBreakers, connected as the superuser to the maintenance
// database (the project database may refuse connections under such a
// setting), resets every one of pgBootBreakers set on the project
// database, on pgAppRole anywhere, or on any role in the project database,
// and returns what it reset (`ALTER DATABASE svc SET
// local_preload_libraries = x` in the form "database svc:
// local_preload_libraries=x"), for the caller to log.
func pgUndoBootBreakers(ctx context.Context, adminURL string) ([]string, error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT coalesce(d.datname, ''), coalesce(r.rolname, ''), c
		FROM pg_db_role_setting s
		LEFT JOIN pg_database d ON d.oid = s.setdatabase
		LEFT JOIN pg_roles r ON r.oid = s.setrole,
		unnest(s.setconfig) AS c
		WHERE d.datname = $1 OR r.rolname = $2`, pgDatabase, pgAppRole)
	if err != nil {
		return nil, err
	}
	type found struct{ db, role, setting string }
	var all []found
	for rows.Next() {
		var f found
		if err := rows.Scan(&f.db, &f.role, &f.setting); err != nil {
			return nil, err
		}
		all = append(all, f)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var undid []string
	for _, f := range all {
		name, _, _ := strings.Cut(f.setting, "=")
		if !pgBootBreakers[strings.ToLower(name)] {
			continue
		}
		var stmt, where string
		switch {
		case f.role == "":
			stmt, where = "ALTER DATABASE "+pgx.Identifier{f.db}.Sanitize(), "database "+f.db
		case f.db == "":
			stmt, where = "ALTER ROLE "+pgx.Identifier{f.role}.Sanitize(), "role "+f.role
		default:
			stmt, where = "ALTER ROLE "+pgx.Identifier{f.role}.Sanitize()+" IN DATABASE "+pgx.Identifier{f.db}.Sanitize(), "role "+f.role+" in database "+f.db
		}
		if _, err := conn.Exec(ctx, stmt+" RESET "+pgx.Identifier{strings.ToLower(name)}.Sanitize()); err != nil {
			return undid, fmt.Errorf("reset %s of %s: %w", name, where, err)
		}
		undid = append(undid, where+": "+f.setting)
	}
	return undid, nil
}

// logUndid logs each setting this boot reset (pgUndoBootBreakers).
func (p *pgService) logUndid(log *slog.Logger) {
	for _, u := range p.Undid {
		log.Warn("PostgreSQL: reset a setting that stops a boot (the project's role may set it; svc sets none)", "setting", u)
	}
}

// pgProvisionAppRole is pgProvisionApp once no setting stops the boot.
func pgProvisionAppRole(ctx context.Context, superPassword string, port int, appPassword string) error {
	cfg, err := pgx.ParseConfig(pgURL(pgSuperuser, superPassword, port, pgDatabase))
	if err != nil {
		return err
	}
	cfg.RuntimeParams["search_path"] = "pg_catalog" // names in statements come qualified
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgUndefinedDatabase {
		if err := pgCreateDatabase(ctx, pgURL(pgSuperuser, superPassword, port, "postgres"), appPassword); err != nil {
			return err
		}
		conn, err = pgx.ConnectConfig(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("set up the role %q: %w", pgAppRole, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := pgEnsureRole(ctx, conn, appPassword); err != nil {
		return fmt.Errorf("set up the role %q: %w", pgAppRole, err)
	}
	if err := pgRevokeOtherDatabases(ctx, conn); err != nil {
		return fmt.Errorf("keep the role %q out of the other databases: %w", pgAppRole, err)
	}
	if err := pgMoveOwnership(ctx, conn); err != nil {
		return fmt.Errorf("give the database %q to the role %q: %w", pgDatabase, pgAppRole, err)
	}
	return nil
}

// pgAppURL is the URL svc hands out: the project database as pgAppRole.
func pgAppURL(appPassword string, port int) string {
	return pgURL(pgAppRole, appPassword, port, pgDatabase)
}

// pgCreateDatabase, connected as the superuser through adminURL, creates
// the project database owned by pgAppRole, and that role first.
func pgCreateDatabase(ctx context.Context, adminURL, appPassword string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err == nil {
		defer conn.Close(context.WithoutCancel(ctx))
		err = pgEnsureRole(ctx, conn, appPassword)
	}
	if err == nil {
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{pgDatabase}.Sanitize()+" OWNER "+pgx.Identifier{pgAppRole}.Sanitize())
	}
	if err != nil {
		return fmt.Errorf("create database %q: %w", pgDatabase, err)
	}
	return nil
}

// pgAppRoleStateSQL tells whether pgAppRole ($1) exists, whether it has
// exactly pgAppRoleAttributes, its SCRAM secret and the roles it is a
// member of.
const pgAppRoleStateSQL = `
SELECT NOT rolsuper AND rolinherit AND NOT rolcreaterole AND NOT rolcreatedb AND rolcanlogin
	AND NOT rolreplication AND NOT rolbypassrls AND rolconnlimit = -1 AND (rolvaliduntil IS NULL OR rolvaliduntil = 'infinity'),
	coalesce(rolpassword, ''),
	ARRAY(SELECT roleid::regrole::text FROM pg_auth_members WHERE member = a.oid)
FROM pg_authid a WHERE rolname = $1`

// pgEnsureRole creates pgAppRole when missing and makes sure it has
// pgAppRoleAttributes, password and no membership in other roles, writing
// only what differs.
func pgEnsureRole(ctx context.Context, conn *pgx.Conn, password string) error {
	role := pgx.Identifier{pgAppRole}.Sanitize()
	var attrsOK bool
	var secret string
	var granted []string
	err := conn.QueryRow(ctx, pgAppRoleStateSQL, pgAppRole).Scan(&attrsOK, &secret, &granted)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = conn.Exec(ctx, "CREATE ROLE "+role)
	}
	if err != nil {
		return err
	}
	if !attrsOK || !pgSCRAMMatches(secret, password) {
		if err := pgSetPassword(ctx, conn, role, pgAppRoleAttributes, password); err != nil {
			return err
		}
	}
	for _, g := range granted {
		if _, err := conn.Exec(ctx, "REVOKE "+g+" FROM "+role); err != nil { // g is quoted by regrole
			return err
		}
	}
	return nil
}

// pgSCRAMMatches reports whether secret, a SCRAM-SHA-256 secret as pg_authid
// keeps it ("SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>",
// RFC 5802 and RFC 7677), is the one of password.
func pgSCRAMMatches(secret, password string) bool {
	rest, ok := strings.CutPrefix(secret, "SCRAM-SHA-256$")
	params, keys, ok2 := strings.Cut(rest, "$")
	iterations, salt64, ok3 := strings.Cut(params, ":")
	stored64, _, ok4 := strings.Cut(keys, ":")
	if !ok || !ok2 || !ok3 || !ok4 {
		return false
	}
	n, err := strconv.Atoi(iterations)
	if err != nil || n < 1 || n > pgSCRAMMaxIterations {
		return false
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil {
		return false
	}
	stored, err := base64.StdEncoding.DecodeString(stored64)
	if err != nil {
		return false
	}
	salted, err := pbkdf2.Key(sha256.New, password, salt, n, sha256.Size)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, salted)
	mac.Write([]byte("Client Key"))
	storedKey := sha256.Sum256(mac.Sum(nil))
	return hmac.Equal(storedKey[:], stored)
}

// pgRevokeOtherDatabases takes PUBLIC's CONNECT on the databases other than
// the project's that pgAppRole may connect to.
func pgRevokeOtherDatabases(ctx context.Context, conn *pgx.Conn) error {
	rows, _ := conn.Query(ctx, `SELECT datname FROM pg_database
		WHERE datname <> $1 AND datallowconn AND has_database_privilege($2::name, oid, 'CONNECT')`, pgDatabase, pgAppRole)
	others, err := pgx.CollectRows(rows, pgx.RowTo[string]) // with the query's error
	if err != nil {
		return err
	}
	for _, db := range others {
		_, err := conn.Exec(ctx, "REVOKE CONNECT ON DATABASE "+pgx.Identifier{db}.Sanitize()+" FROM PUBLIC")
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgUndefinedDatabase {
			continue // dropped meanwhile
		}
		if err != nil {
			return fmt.Errorf("database %q: %w", db, err)
		}
	}
	return nil
}

// pgMoveOwnership, connected to the project database as the superuser with
// search_path pg_catalog, gives pgAppRole what the superuser owns there
// (pgOwnershipMovesSQL), in one transaction.
func pgMoveOwnership(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, pgOwnershipMovesSQL, pgAppRole, pgSuperuser)
		moves, err := pgx.CollectRows(rows, pgx.RowTo[string]) // with the query's error
		if err != nil {
			return err
		}
		for _, stmt := range moves {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return nil
	})
}

// pgSetPassword gives role (quoted) the attributes attrs (none when "")
// and password, hashed with pgAuthMethod. ALTER ROLE takes no parameters, so
// the password is quoted as a literal (standard_conforming_strings is on in
// every supported PostgreSQL).
func pgSetPassword(ctx context.Context, conn *pgx.Conn, role, attrs, password string) error {
	if _, err := conn.Exec(ctx, "SET password_encryption = '"+pgAuthMethod+"'"); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "ALTER ROLE "+role+" WITH "+attrs+" PASSWORD '"+strings.ReplaceAll(password, "'", "''")+"'")
	return err
}
