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
//     minted once and set again at each boot, so a replaced file still works;
//   - the project database pgDatabase exists and is owned by that role, so it
//     may create schemas and trusted extensions (pgcrypto, uuid-ossp, citext:
//     PostgreSQL 13 and later) but nothing outside the database;
//   - PUBLIC may not connect to the cluster's other databases (the local
//     cluster's pg_hba.conf also admits the role to the project database
//     only; the container image's admits every role everywhere);
//   - the schemas of the project database, and the tables, sequences, views,
//     materialized views, foreign tables, routines and types in them, that
//     the superuser owns are the role's: clusters made by earlier versions
//     handed out the superuser, which owns all they created. The move is one
//     transaction; objects that belong to an extension stay (so do the
//     extensions), and a boot with nothing to move only reads the catalogs.

import (
	"context"
	"errors"
	"fmt"
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
)

// pgAppRoleAttributes are the attributes pgAppRole gets at every boot: it
// logs in and may do nothing a superuser grants beyond its own database.
const pgAppRoleAttributes = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT CONNECTION LIMIT -1"

// pgOwnershipMovesSQL lists, as statements, what the superuser ($2) owns in
// the current database and must become pgAppRole's ($1): its schemas (not
// the system's), and in them its tables, views, materialized views,
// sequences and foreign tables, its types (enums, domains, ranges,
// composites) and its routines. Objects of extensions are left out; so are
// what follows another object: indexes, TOAST tables and sequences linked
// to a column follow their table, a table's row type its table, array and
// multirange types their element or range. Schemas come first, then types,
// relations and routines. The session's search_path is pg_catalog, so the
// names come qualified.
const pgOwnershipMovesSQL = `
WITH super AS (SELECT oid FROM pg_roles WHERE rolname = $2::text),
app AS (SELECT $1::text AS name),
user_ns AS (
	SELECT oid, nspname, nspowner FROM pg_namespace
	WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname !~ '^pg_(toast|temp_|toast_temp_)'
),
ext AS (SELECT classid, objid FROM pg_depend WHERE deptype = 'e')
SELECT stmt FROM (
	SELECT 1 AS ord, format('ALTER SCHEMA %I OWNER TO %I', n.nspname, (SELECT name FROM app)) AS stmt
	FROM user_ns n
	WHERE n.nspowner = (SELECT oid FROM super)
	  AND NOT EXISTS (SELECT 1 FROM ext WHERE classid = 'pg_namespace'::regclass AND objid = n.oid)
	UNION ALL
	SELECT 2, format('ALTER %s %s OWNER TO %I', CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, t.oid::regtype, (SELECT name FROM app))
	FROM pg_type t JOIN user_ns n ON n.oid = t.typnamespace
	WHERE t.typowner = (SELECT oid FROM super)
	  AND t.typtype <> 'm'
	  AND NOT EXISTS (SELECT 1 FROM pg_type e WHERE e.oid = t.typelem AND e.typarray = t.oid)
	  AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')
	  AND NOT EXISTS (SELECT 1 FROM ext WHERE classid = 'pg_type'::regclass AND objid = t.oid)
	UNION ALL
	SELECT 3, format('ALTER %s %s OWNER TO %I',
		CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE' WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END,
		c.oid::regclass, (SELECT name FROM app))
	FROM pg_class c JOIN user_ns n ON n.oid = c.relnamespace
	WHERE c.relowner = (SELECT oid FROM super)
	  AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f')
	  AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
	      AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
	  AND NOT EXISTS (SELECT 1 FROM ext WHERE classid = 'pg_class'::regclass AND objid = c.oid)
	UNION ALL
	SELECT 4, format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, (SELECT name FROM app))
	FROM pg_proc p JOIN user_ns n ON n.oid = p.pronamespace
	WHERE p.proowner = (SELECT oid FROM super)
	  AND NOT EXISTS (SELECT 1 FROM ext WHERE classid = 'pg_proc'::regclass AND objid = p.oid)
) moves ORDER BY ord`

// pgProvisionApp makes the cluster on 127.0.0.1:port, reached as the
// superuser with superPassword, ready for the URL pgAppURL returns (see the
// comment at the top of this file).
func pgProvisionApp(ctx context.Context, superPassword string, port int, appPassword string) error {
	if err := pgProvisionCluster(ctx, pgURL(pgSuperuser, superPassword, port, "postgres"), appPassword); err != nil {
		return err
	}
	if err := pgMoveOwnership(ctx, pgURL(pgSuperuser, superPassword, port, pgDatabase)); err != nil {
		return fmt.Errorf("give the database %q to the role %q: %w", pgDatabase, pgAppRole, err)
	}
	return nil
}

// pgAppURL is the URL svc hands out: the project database as pgAppRole.
func pgAppURL(appPassword string, port int) string {
	return pgURL(pgAppRole, appPassword, port, pgDatabase)
}

// pgProvisionCluster, connected as the superuser through adminURL, makes
// pgAppRole as it must be, creates the project database owned by it when
// missing, and takes PUBLIC's CONNECT on the other databases.
func pgProvisionCluster(ctx context.Context, adminURL, appPassword string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("set up the role %q: %w", pgAppRole, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	role := pgx.Identifier{pgAppRole}.Sanitize()
	if err := pgEnsureRole(ctx, conn, role, appPassword); err != nil {
		return fmt.Errorf("set up the role %q: %w", pgAppRole, err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", pgDatabase).Scan(&exists); err != nil {
		return fmt.Errorf("create database %q: %w", pgDatabase, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{pgDatabase}.Sanitize()+" OWNER "+role); err != nil {
			return fmt.Errorf("create database %q: %w", pgDatabase, err)
		}
	}
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database
		WHERE datname <> $1 AND datallowconn AND has_database_privilege($2::name, oid, 'CONNECT')`, pgDatabase, pgAppRole)
	if err != nil {
		return fmt.Errorf("keep the role %q out of the other databases: %w", pgAppRole, err)
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("keep the role %q out of the other databases: %w", pgAppRole, err)
	}
	for _, db := range others {
		_, err := conn.Exec(ctx, "REVOKE CONNECT ON DATABASE "+pgx.Identifier{db}.Sanitize()+" FROM PUBLIC")
		if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgUndefinedDatabase {
			continue // dropped meanwhile
		}
		if err != nil {
			return fmt.Errorf("keep the role %q out of the database %q: %w", pgAppRole, db, err)
		}
	}
	return nil
}

// pgEnsureRole creates pgAppRole (role, quoted) when missing, and gives it
// pgAppRoleAttributes, password and no membership in other roles.
func pgEnsureRole(ctx context.Context, conn *pgx.Conn, role, password string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", pgAppRole).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE ROLE "+role); err != nil {
			return err
		}
	}
	if err := pgSetPassword(ctx, conn, role, pgAppRoleAttributes, password); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid
		WHERE m.member = (SELECT oid FROM pg_roles WHERE rolname = $1)`, pgAppRole)
	if err != nil {
		return err
	}
	granted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, g := range granted {
		if _, err := conn.Exec(ctx, "REVOKE "+pgx.Identifier{g}.Sanitize()+" FROM "+role); err != nil {
			return err
		}
	}
	return nil
}

// pgMoveOwnership, connected to the project database as the superuser
// through dbURL, gives pgAppRole the database and what the superuser owns
// in it (pgOwnershipMovesSQL), in one transaction.
func pgMoveOwnership(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
			return err
		}
		var owned bool
		if err := tx.QueryRow(ctx, "SELECT datdba = (SELECT oid FROM pg_roles WHERE rolname = $1) FROM pg_database WHERE datname = current_database()",
			pgAppRole).Scan(&owned); err != nil {
			return err
		}
		if !owned {
			if _, err := tx.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{pgDatabase}.Sanitize()+" OWNER TO "+pgx.Identifier{pgAppRole}.Sanitize()); err != nil {
				return err
			}
		}
		rows, err := tx.Query(ctx, pgOwnershipMovesSQL, pgAppRole, pgSuperuser)
		if err != nil {
			return err
		}
		moves, err := pgx.CollectRows(rows, pgx.RowTo[string])
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
