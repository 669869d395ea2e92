package main

// Auto-migrate (SPEC §4.2 `--auto-migrate`, DESIGN §6): the user's
// src/schema.ts, written with the table builders of drizzle-orm/pg-core, is
// the source of truth for the tables of schema public.
//
// The schema is evaluated in-process against an embedded stand-in for
// drizzle-orm (js/drizzle_pg_core.js) that records plain table descriptions.
// To compare it with the live database without guessing how PostgreSQL
// spells types and defaults, the desired tables are first created in a
// throw-away schema inside a transaction that is rolled back (the shadow);
// both the shadow and public are then read from the catalog with the same
// queries, so equal definitions read back as equal text. The differences
// become SQL statements generated from the descriptions.
//
// Additive changes (create table, add column, add index, unique, primary or
// foreign key, loosen NOT NULL, set a default, widen a type) are written to
// .svc/migrations/<UTC timestamp>_<summary>.sql and applied by the migration
// runner (applyMigrations). Anything that may lose data or guesses (drop
// table or column, a column that looks renamed, a type change, NOT NULL
// tightening, a NOT NULL column without default added to a table with rows,
// dropping a key or an index) keeps the whole migration out of the runner's
// way: it is written to .svc/migrations/pending/ with every such statement
// commented, and nothing of it is applied.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dop251/goja"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// amCollectProgram is the function that describes the tables among a
// module's exports, compiled once. The exports are read in JS, not with
// Object.Get from Go, because they are getters: JS called through a function
// value reports an interrupt (the evaluation timeout) as an error instead of
// a panic.
var (
	amCollectProgram = goja.MustCompile("svc:automigrate_collect.js", `(function (exports) {
  const out = [];
  for (const k of Object.keys(exports)) {
    const v = exports[k];
    if (v !== null && typeof v === "object" && typeof v.__svc_table === "function") out.push(v.__svc_table());
  }
  return out;
})`, false)
)

const (
	// amSchemaFile is the project-relative path of the user's schema.
	amSchemaFile = "src/schema.ts"
	// amShadowSchema holds the desired tables while they are read back; it
	// only ever exists inside a transaction that is rolled back.
	amShadowSchema = "svc_automigrate_shadow"
	// amLiveSchema is the schema auto-migrate manages.
	amLiveSchema = "public"
	// amEvalTimeout bounds the evaluation of src/schema.ts (a loop in it must
	// not hang the dev session).
	amEvalTimeout = 10 * time.Second
	// amMaxIdent is PostgreSQL's identifier limit in bytes (NAMEDATALEN-1).
	amMaxIdent = 63
	// amSummaryRisks is how many reasons for review a pending result's
	// Summary names; Destructive holds them all.
	amSummaryRisks = 3
	// amStampLayout is the UTC timestamp that prefixes migration file names.
	amStampLayout = "20060102150405"
)

// autoMigrateResult is what one autoMigrate call did. The zero value means
// that there was nothing to do.
type autoMigrateResult struct {
	File        string   // project-relative path of the migration written (or reused, when pending); "" when nothing changed
	Applied     bool     // File was applied
	Pending     bool     // File is under .svc/migrations/pending and was not applied
	Summary     string   // one line for the log: what was applied, or what to do with the pending file
	Destructive []string // what kept the migration pending, one line each
}

// amTable is one table of src/schema.ts as the stand-in describes it; names
// of keys and indexes left out by the schema are filled in by amNameDefaults.
type amTable struct {
	Name        string         `json:"name"`
	Columns     []amColumn     `json:"columns"`
	PrimaryKey  *amKey         `json:"primaryKey"`
	Uniques     []amUnique     `json:"uniques"`
	ForeignKeys []amForeignKey `json:"foreignKeys"`
	Indexes     []amIndex      `json:"indexes"`
}

// amColumn is a column: its SQL type as written in CREATE TABLE ("serial",
// "varchar(255)"…) and its default as SQL text (nil for none).
type amColumn struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	NotNull bool    `json:"notNull"`
	Default *string `json:"default"`
}

// amKey is a primary key.
type amKey struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
}

// amUnique is a unique constraint.
type amUnique struct {
	Name             string   `json:"name"`
	Columns          []string `json:"columns"`
	NullsNotDistinct bool     `json:"nullsNotDistinct"`
}

// amForeignKey is a foreign key; the actions are SQL ("cascade", "no action"…).
type amForeignKey struct {
	Name           string   `json:"name"`
	Columns        []string `json:"columns"`
	ForeignTable   string   `json:"foreignTable"`
	ForeignColumns []string `json:"foreignColumns"`
	OnDelete       string   `json:"onDelete"`
	OnUpdate       string   `json:"onUpdate"`
}

// amIndex is an index; Columns are SQL (a quoted name, maybe with an order,
// or an expression) and ColumnNames the plain column names ("" for an
// expression), used for default names.
type amIndex struct {
	Name        string   `json:"name"`
	Unique      bool     `json:"unique"`
	Method      string   `json:"method"`
	Where       string   `json:"where"`
	Columns     []string `json:"columns"`
	ColumnNames []string `json:"columnNames"`
}

// amDBTable is a table as read back from the catalog, in PostgreSQL's own
// spelling (format_type, pg_get_expr, pg_get_constraintdef, pg_get_indexdef).
type amDBTable struct {
	Columns     []amDBColumn
	Constraints []amDBConstraint
	Indexes     []amDBIndex
}

// amDBColumn is a column read back from the catalog; Default is "" for none.
type amDBColumn struct {
	Name    string
	Type    string
	NotNull bool
	Default string
}

// amDBConstraint is a primary key ("p"), unique ("u") or foreign key ("f")
// constraint; constraints are compared by Type and Def, not by name.
type amDBConstraint struct {
	Name string
	Type string
	Def  string
}

// amDBIndex is an index that backs no constraint; Def is its definition from
// the access method on ("UNIQUE btree (email)"), without names.
type amDBIndex struct {
	Name string
	Def  string
}

// amPhase orders the statements of a migration so each one finds what it
// needs: drops of what depends on columns and tables come first, keys and
// indexes are added once their columns exist, foreign keys last.
type amPhase int

const (
	amDropForeignKeys amPhase = iota
	amDropIndexes
	amDropTables
	amCreateTables
	amAlterColumns
	amAddKeys
	amAddIndexes
	amAddForeignKeys
)

// amChange is one statement of a migration.
type amChange struct {
	Phase amPhase
	SQL   string // one statement, with its semicolon
	What  string // for people: "add column users.email"
	Slug  string // for the file name ("add_users_email"); "" for parts of a created table
	Risk  string // why it needs review; "" when additive
}

// autoMigrate evaluates src/schema.ts under dir (no file → zero result, nil
// error), diffs it against the database at databaseURL and writes and
// applies a migration; see the file comment for what is applied and what is
// left pending. Files already in .svc/migrations are applied first, so a
// pending file moved there by the user counts before the diff. A schema that
// fails to evaluate, or that PostgreSQL rejects, is a *compileError and
// changes nothing. Callers serialise calls for one project.
func autoMigrate(ctx context.Context, dir, databaseURL string, log io.Writer) (autoMigrateResult, error) {
	if log == nil {
		log = io.Discard
	}
	if _, err := os.Stat(filepath.Join(dir, amSchemaFile)); errors.Is(err, fs.ErrNotExist) {
		return autoMigrateResult{}, nil
	}
	tables, err := amLoadSchema(ctx, dir, log)
	if err != nil {
		return autoMigrateResult{}, err
	}
	migrationsDir := filepath.Join(dir, ".svc", "migrations")
	if _, err := applyMigrations(ctx, databaseURL, migrationsDir, log); err != nil {
		return autoMigrateResult{}, fmt.Errorf("auto-migrate: %w", err)
	}
	changes, err := amPlan(ctx, databaseURL, tables)
	if err != nil {
		return autoMigrateResult{}, err
	}
	if len(changes) == 0 {
		return autoMigrateResult{}, nil
	}
	res, err := amWrite(dir, changes, time.Now())
	if err != nil {
		return autoMigrateResult{}, fmt.Errorf("auto-migrate: %w", err)
	}
	if res.Pending {
		fmt.Fprintln(log, res.Summary)
		return res, nil
	}
	if _, err := applyMigrations(ctx, databaseURL, migrationsDir, log); err != nil {
		// Keep the failed file out of the runner's way, so the next boot is
		// not stopped by it.
		pending := filepath.Join(migrationsDir, "pending", filepath.Base(res.File))
		mvErr := os.MkdirAll(filepath.Dir(pending), privateDirMode)
		if mvErr == nil {
			mvErr = os.Rename(filepath.Join(dir, res.File), pending)
		}
		if mvErr != nil {
			return autoMigrateResult{}, fmt.Errorf("auto-migrate: %w (and moving %s aside: %v)", err, res.File, mvErr)
		}
		rel, _ := filepath.Rel(dir, pending)
		return autoMigrateResult{}, fmt.Errorf("auto-migrate: %w (nothing of it was applied; it was moved to %s)", err, rel)
	}
	res.Applied = true
	fmt.Fprintln(log, res.Summary)
	return res, nil
}

// amLoadSchema bundles src/schema.ts (drizzle-orm resolves to the built-in
// stand-in: bundleDrizzlePlugin), evaluates it and returns its exported tables, sorted by name, with default
// names filled in. Every failure is a *compileError.
func amLoadSchema(ctx context.Context, dir string, log io.Writer) ([]amTable, error) {
	m, err := bundleModule(dir, amSchemaFile)
	if err != nil {
		return nil, asCompileError(amSchemaFile, err)
	}
	ctx, cancel := context.WithTimeout(ctx, amEvalTimeout)
	defer cancel()
	stopInterrupt := func() bool { return false }
	defer func() { stopInterrupt() }()
	vm, exports, err := newModuleVM(m, vmOptions{
		Log: slog.New(slog.NewTextHandler(log, nil)),
		Setup: func(vm *goja.Runtime) {
			stopInterrupt = context.AfterFunc(ctx, func() { vm.Interrupt("evaluation stopped: " + context.Cause(ctx).Error()) })
		},
	})
	if err != nil {
		return nil, asCompileError(amSchemaFile, err)
	}
	collectFn, err := vm.RunProgram(amCollectProgram)
	if err != nil {
		return nil, fmt.Errorf("auto-migrate: %w", err)
	}
	collect, _ := goja.AssertFunction(collectFn)
	descs, err := collect(goja.Undefined(), exports)
	if err != nil {
		return nil, jsError(amSchemaFile, err)
	}
	var described []amTable
	if err := exportJSON(vm, descs, &described); err != nil {
		return nil, &compileError{File: amSchemaFile, Message: "read the tables: " + err.Error()}
	}
	byName := map[string]amTable{}
	for _, t := range described {
		if prev, ok := byName[t.Name]; ok && !reflect.DeepEqual(prev, t) {
			return nil, &compileError{File: amSchemaFile, Message: fmt.Sprintf("two different tables are named %q", t.Name)}
		}
		byName[t.Name] = t
	}
	tables := make([]amTable, 0, len(byName))
	for _, t := range byName {
		tables = append(tables, t)
	}
	slices.SortFunc(tables, func(a, b amTable) int { return cmp.Compare(a.Name, b.Name) })
	if err := amNameDefaults(tables); err != nil {
		return nil, &compileError{File: amSchemaFile, Message: err.Error()}
	}
	return tables, nil
}

// amNameDefaults checks the names of tables and columns and names the keys
// and indexes the schema left unnamed, as drizzle-kit does
// ("users_email_unique", "posts_author_id_users_id_fk", "users_email_index";
// a primary key is "<table>_pkey"), cut to PostgreSQL's 63 bytes.
func amNameDefaults(tables []amTable) error {
	exported := map[string]bool{}
	for _, t := range tables {
		exported[t.Name] = true
	}
	for i := range tables {
		t := &tables[i]
		if len(t.Name) > amMaxIdent {
			return fmt.Errorf("table name %q is longer than %d bytes", t.Name, amMaxIdent)
		}
		seen := map[string]bool{}
		for _, c := range t.Columns {
			if len(c.Name) > amMaxIdent || c.Name == "" {
				return fmt.Errorf("table %q: column name %q must be 1 to %d bytes", t.Name, c.Name, amMaxIdent)
			}
			if seen[c.Name] {
				return fmt.Errorf("table %q: two columns are named %q", t.Name, c.Name)
			}
			seen[c.Name] = true
		}
		if t.PrimaryKey != nil && t.PrimaryKey.Name == "" {
			t.PrimaryKey.Name = amCut(t.Name + "_pkey")
		}
		for j := range t.Uniques {
			u := &t.Uniques[j]
			if u.Name == "" {
				u.Name = amCut(t.Name + "_" + strings.Join(u.Columns, "_") + "_unique")
			}
		}
		for j := range t.ForeignKeys {
			fk := &t.ForeignKeys[j]
			if !exported[fk.ForeignTable] {
				return fmt.Errorf("table %q: a foreign key references table %q, which src/schema.ts does not export", t.Name, fk.ForeignTable)
			}
			if fk.Name == "" {
				fk.Name = amCut(t.Name + "_" + strings.Join(fk.Columns, "_") + "_" + fk.ForeignTable + "_" + strings.Join(fk.ForeignColumns, "_") + "_fk")
			}
		}
		for j := range t.Indexes {
			x := &t.Indexes[j]
			if x.Name == "" {
				if slices.Contains(x.ColumnNames, "") {
					return fmt.Errorf("table %q: an index on an expression needs a name: index(\"name\")", t.Name)
				}
				x.Name = amCut(t.Name + "_" + strings.Join(x.ColumnNames, "_") + "_index")
			}
		}
	}
	return nil
}

// amCut cuts a generated name to PostgreSQL's identifier limit, on a rune
// boundary, as the server would.
func amCut(name string) string {
	return truncateBytes(name, amMaxIdent)
}

// amPlan reads the desired tables back through the shadow schema and the
// live tables of public, in one transaction that is rolled back, and
// returns the changes from live to desired in the order to run them.
func amPlan(ctx context.Context, databaseURL string, tables []amTable) ([]amChange, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("auto-migrate: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("auto-migrate: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // the shadow must never persist
	if _, err := tx.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{amShadowSchema}.Sanitize()); err != nil {
		return nil, fmt.Errorf("auto-migrate: create the shadow schema: %w", err)
	}
	for _, stmt := range amCreateAll(amShadowSchema, tables) {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				return nil, &compileError{File: amSchemaFile, Message: fmt.Sprintf("PostgreSQL rejects the schema: %s (in: %s)", pgErr.Message,
					strings.ReplaceAll(stmt, amQuote(amShadowSchema)+".", ""))}
			}
			return nil, fmt.Errorf("auto-migrate: build the shadow schema: %w", err)
		}
	}
	desired, err := amReadCatalog(ctx, tx, amShadowSchema)
	if err != nil {
		return nil, fmt.Errorf("auto-migrate: read the desired tables: %w", err)
	}
	live, err := amReadCatalog(ctx, tx, amLiveSchema)
	if err != nil {
		return nil, fmt.Errorf("auto-migrate: read the live tables: %w", err)
	}
	hasRows := func(table string) (bool, error) {
		var ok bool
		err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{amLiveSchema, table}.Sanitize()+")").Scan(&ok)
		return ok, err
	}
	changes, err := amDiff(tables, desired, live, hasRows)
	if err != nil {
		return nil, fmt.Errorf("auto-migrate: %w", err)
	}
	return changes, nil
}

// amReadCatalog reads the ordinary tables of schema (those of extensions
// left out) with PostgreSQL's own spelling. It sets the transaction's
// search_path to schema, so names inside definitions (sequences in
// defaults, referenced tables) come out unqualified in every schema.
func amReadCatalog(ctx context.Context, tx pgx.Tx, schema string) (map[string]amDBTable, error) {
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", pgx.Identifier{schema}.Sanitize()); err != nil {
		return nil, err
	}
	const tablesSQL = `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype = 'e')`
	const columnsSQL = `SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
  CASE WHEN a.attidentity <> '' THEN 'GENERATED AS IDENTITY' ELSE COALESCE(pg_get_expr(d.adbin, d.adrelid), '') END
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
ORDER BY c.relname, a.attnum`
	const constraintsSQL = `SELECT c.relname, k.conname, k.contype::text, pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND k.contype IN ('p', 'u', 'f')
ORDER BY c.relname, k.conname`
	const indexesSQL = `SELECT c.relname, i.relname, pg_get_indexdef(x.indexrelid)
FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1
  AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid AND k.conrelid = x.indrelid AND k.contype IN ('p', 'u', 'x'))
ORDER BY c.relname, i.relname`
	out := map[string]amDBTable{}
	var table, name, typ, def string
	var notNull bool
	steps := []struct {
		sql  string
		dest []any
		add  func()
	}{
		{tablesSQL, []any{&table}, func() { out[table] = amDBTable{} }},
		{columnsSQL, []any{&table, &name, &typ, &notNull, &def}, func() {
			t, ok := out[table]
			if ok {
				t.Columns = append(t.Columns, amDBColumn{Name: name, Type: typ, NotNull: notNull, Default: def})
				out[table] = t
			}
		}},
		{constraintsSQL, []any{&table, &name, &typ, &def}, func() {
			t, ok := out[table]
			if ok {
				t.Constraints = append(t.Constraints, amDBConstraint{Name: name, Type: typ, Def: def})
				out[table] = t
			}
		}},
		{indexesSQL, []any{&table, &name, &def}, func() {
			t, ok := out[table]
			if ok {
				t.Indexes = append(t.Indexes, amDBIndex{Name: name, Def: amIndexDef(def)})
				out[table] = t
			}
		}},
	}
	for _, s := range steps {
		rows, err := tx.Query(ctx, s.sql, schema)
		if err != nil {
			return nil, err
		}
		if _, err := pgx.ForEachRow(rows, s.dest, func() error { s.add(); return nil }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// amIndexDef reduces a pg_get_indexdef text ("CREATE UNIQUE INDEX n ON t
// USING btree (a)") to what defines the index ("UNIQUE btree (a)").
func amIndexDef(def string) string {
	_, rest, ok := strings.Cut(def, " USING ")
	if !ok {
		return def
	}
	if strings.HasPrefix(def, "CREATE UNIQUE ") {
		return "UNIQUE " + rest
	}
	return rest
}

// amCreateAll returns the statements that create tables in schema from
// nothing: the tables with their keys, then their indexes, then the foreign
// keys (last, so tables may reference each other in any order).
func amCreateAll(schema string, tables []amTable) []string {
	var create, indexes, fks []string
	for _, t := range tables {
		create = append(create, amCreateTableSQL(schema, t))
		for _, x := range t.Indexes {
			indexes = append(indexes, amIndexSQL(schema, t.Name, x))
		}
		for _, fk := range t.ForeignKeys {
			fks = append(fks, amAddConstraintSQL(schema, t.Name, fk.Name, amForeignKeySQL(schema, fk)))
		}
	}
	return slices.Concat(create, indexes, fks)
}

// amQuote quotes identifiers: amQuote("a") is "a" and amQuote(s, t) is "s"."t".
func amQuote(names ...string) string { return pgx.Identifier(names).Sanitize() }

// amQuoteList quotes and joins column names: "a", "b".
func amQuoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = amQuote(n)
	}
	return strings.Join(q, ", ")
}

// amColumnSQL is a column definition: "email" varchar(255) NOT NULL DEFAULT 'x'.
func amColumnSQL(c amColumn) string {
	s := amQuote(c.Name) + " " + c.Type
	if c.NotNull {
		s += " NOT NULL"
	}
	if c.Default != nil {
		s += " DEFAULT " + *c.Default
	}
	return s
}

// amCreateTableSQL creates a table with its columns, primary key and unique
// constraints.
func amCreateTableSQL(schema string, t amTable) string {
	var lines []string
	for _, c := range t.Columns {
		lines = append(lines, amColumnSQL(c))
	}
	if t.PrimaryKey != nil {
		lines = append(lines, "CONSTRAINT "+amQuote(t.PrimaryKey.Name)+" "+amPrimaryKeySQL(*t.PrimaryKey))
	}
	for _, u := range t.Uniques {
		lines = append(lines, "CONSTRAINT "+amQuote(u.Name)+" "+amUniqueSQL(u))
	}
	return "CREATE TABLE " + amQuote(schema, t.Name) + " (\n\t" + strings.Join(lines, ",\n\t") + "\n);"
}

// amPrimaryKeySQL is the body of a primary key constraint.
func amPrimaryKeySQL(k amKey) string { return "PRIMARY KEY (" + amQuoteList(k.Columns) + ")" }

// amUniqueSQL is the body of a unique constraint.
func amUniqueSQL(u amUnique) string {
	s := "UNIQUE "
	if u.NullsNotDistinct {
		s += "NULLS NOT DISTINCT "
	}
	return s + "(" + amQuoteList(u.Columns) + ")"
}

// amForeignKeySQL is the body of a foreign key constraint referencing a
// table of schema.
func amForeignKeySQL(schema string, fk amForeignKey) string {
	return fmt.Sprintf("FOREIGN KEY (%s) REFERENCES %s (%s) ON DELETE %s ON UPDATE %s",
		amQuoteList(fk.Columns), amQuote(schema, fk.ForeignTable), amQuoteList(fk.ForeignColumns), fk.OnDelete, fk.OnUpdate)
}

// amAddConstraintSQL adds a named constraint to a table.
func amAddConstraintSQL(schema, table, name, body string) string {
	return "ALTER TABLE " + amQuote(schema, table) + " ADD CONSTRAINT " + amQuote(name) + " " + body + ";"
}

// amIndexSQL creates an index.
func amIndexSQL(schema, table string, x amIndex) string {
	s := "CREATE "
	if x.Unique {
		s += "UNIQUE "
	}
	s += "INDEX " + amQuote(x.Name) + " ON " + amQuote(schema, table) + " USING " + x.Method + " (" + strings.Join(x.Columns, ", ") + ")"
	if x.Where != "" {
		s += " WHERE " + x.Where
	}
	return s + ";"
}

// amDiff returns the changes that turn the live tables into the desired
// ones, ordered by phase. want are the descriptions (SQL is generated from
// them), desired the same tables read back from the shadow, live those of
// public; hasRows reports whether a live table holds rows.
func amDiff(want []amTable, desired, live map[string]amDBTable, hasRows func(table string) (bool, error)) ([]amChange, error) {
	var changes []amChange
	for _, t := range want {
		l, ok := live[t.Name]
		if !ok {
			changes = append(changes, amChange{Phase: amCreateTables, SQL: amCreateTableSQL(amLiveSchema, t), What: "create table " + t.Name, Slug: "create_" + t.Name})
			for _, x := range t.Indexes {
				changes = append(changes, amChange{Phase: amAddIndexes, SQL: amIndexSQL(amLiveSchema, t.Name, x), What: "create index " + x.Name})
			}
			for _, fk := range t.ForeignKeys {
				changes = append(changes, amChange{Phase: amAddForeignKeys, SQL: amAddConstraintSQL(amLiveSchema, t.Name, fk.Name, amForeignKeySQL(amLiveSchema, fk)), What: "add foreign key " + fk.Name})
			}
			continue
		}
		tc, err := amDiffTable(t, desired[t.Name], l, hasRows)
		if err != nil {
			return nil, err
		}
		changes = append(changes, tc...)
	}
	// Tables are dropped in one statement, so those that reference each
	// other need no order.
	var drop, quoted []string
	for _, name := range slices.Sorted(maps.Keys(live)) {
		if !slices.ContainsFunc(want, func(t amTable) bool { return t.Name == name }) {
			drop = append(drop, name)
			quoted = append(quoted, amQuote(amLiveSchema, name))
		}
	}
	if len(drop) > 0 {
		names := strings.Join(drop, ", ")
		changes = append(changes, amChange{
			Phase: amDropTables, SQL: "DROP TABLE " + strings.Join(quoted, ", ") + ";",
			What: "drop table " + names, Slug: "drop_table_" + strings.Join(drop, "_"),
			Risk: "drops table " + names + " and all rows (not in src/schema.ts)",
		})
	}
	slices.SortStableFunc(changes, func(a, b amChange) int { return cmp.Compare(a.Phase, b.Phase) })
	return changes, nil
}

// amDiffTable compares a table that exists: columns (added, dropped, looking
// renamed, altered), constraints (by definition) and indexes (by name and
// definition).
func amDiffTable(t amTable, desired, live amDBTable, hasRows func(string) (bool, error)) ([]amChange, error) {
	var changes []amChange
	table := amQuote(amLiveSchema, t.Name)
	liveCols := map[string]amDBColumn{}
	for _, c := range live.Columns {
		liveCols[c.Name] = c
	}
	wantCols := map[string]amColumn{}
	for _, c := range t.Columns {
		wantCols[c.Name] = c
	}
	var dropped []amDBColumn
	for _, c := range live.Columns {
		if _, ok := wantCols[c.Name]; !ok {
			dropped = append(dropped, c)
		}
	}
	for _, d := range desired.Columns {
		w := wantCols[d.Name]
		l, ok := liveCols[d.Name]
		if !ok {
			// A dropped column of the same type looks like this one renamed.
			i := slices.IndexFunc(dropped, func(c amDBColumn) bool { return c.Type == d.Type })
			if i < 0 {
				c, err := amAddColumn(t.Name, w, d, hasRows)
				if err != nil {
					return nil, err
				}
				changes = append(changes, c)
				continue
			}
			l = dropped[i]
			dropped = slices.Delete(dropped, i, i+1)
			changes = append(changes, amChange{
				Phase: amAlterColumns,
				SQL:   "ALTER TABLE " + table + " RENAME COLUMN " + amQuote(l.Name) + " TO " + amQuote(d.Name) + ";",
				What:  fmt.Sprintf("rename column %s.%s to %s", t.Name, l.Name, d.Name),
				Slug:  "rename_" + t.Name + "_" + l.Name,
				Risk: fmt.Sprintf("column %s.%s looks renamed to %s.%s; this renames it and keeps its data. If %s is a new column, replace this statement with DROP COLUMN %s (its data is lost) and ADD COLUMN %s",
					t.Name, l.Name, t.Name, d.Name, d.Name, amQuote(l.Name), amColumnSQL(w)),
			})
		}
		changes = append(changes, amAlterColumn(t.Name, w, d, l)...)
	}
	for _, l := range dropped {
		changes = append(changes, amChange{
			Phase: amAlterColumns, SQL: "ALTER TABLE " + table + " DROP COLUMN " + amQuote(l.Name) + ";",
			What: "drop column " + t.Name + "." + l.Name, Slug: "drop_" + t.Name + "_" + l.Name,
			Risk: "drops column " + t.Name + "." + l.Name + " and its data (it is not in src/schema.ts)",
		})
	}
	changes = append(changes, amDiffConstraints(t, desired, live)...)
	changes = append(changes, amDiffIndexes(t, desired, live)...)
	return changes, nil
}

// amAddColumn adds a column; a NOT NULL column without a default cannot be
// added to a table that holds rows, so that one needs review.
func amAddColumn(table string, w amColumn, d amDBColumn, hasRows func(string) (bool, error)) (amChange, error) {
	c := amChange{
		Phase: amAlterColumns,
		SQL:   "ALTER TABLE " + amQuote(amLiveSchema, table) + " ADD COLUMN " + amColumnSQL(w) + ";",
		What:  "add column " + table + "." + w.Name,
		Slug:  "add_" + table + "_" + w.Name,
	}
	if d.NotNull && d.Default == "" {
		rows, err := hasRows(table)
		if err != nil {
			return amChange{}, fmt.Errorf("check whether table %q has rows: %w", table, err)
		}
		if rows {
			c.Risk = fmt.Sprintf("adds NOT NULL column %s.%s without a default to a table that has rows, which fails; give it a default, or add it nullable, fill it, then make it NOT NULL", table, w.Name)
		}
	}
	return c, nil
}

// amAlterColumn compares a column that exists (d desired, l live; the
// names may differ after a rename) and alters its type, nullability and
// default. A default that changes along with the type is dropped before
// the type changes (the old one may not convert) and set after.
func amAlterColumn(table string, w amColumn, d, l amDBColumn) []amChange {
	var changes []amChange
	alter := "ALTER TABLE " + amQuote(amLiveSchema, table) + " ALTER COLUMN " + amQuote(d.Name)
	col := table + "." + d.Name
	defaultChange := func(sql, what string) amChange {
		c := amChange{Phase: amAlterColumns, SQL: sql, What: what, Slug: "alter_" + table + "_" + d.Name}
		// A sequence or identity default belongs to serial and identity
		// columns; swapping it is not a plain default change.
		if amSerialDefault(d.Default) || amSerialDefault(l.Default) {
			c.Risk = fmt.Sprintf("changes the generated default of %s from %q to %q", col, l.Default, d.Default)
		}
		return c
	}
	liveDefault := l.Default
	if d.Type != l.Type && l.Default != "" && d.Default != l.Default {
		changes = append(changes, defaultChange(alter+" DROP DEFAULT;", "drop the default of "+col))
		liveDefault = ""
	}
	if d.Type != l.Type {
		c := amChange{
			Phase: amAlterColumns,
			SQL:   alter + " SET DATA TYPE " + d.Type + " USING " + amQuote(d.Name) + "::" + d.Type + ";",
			What:  fmt.Sprintf("change the type of %s from %s to %s", col, l.Type, d.Type),
			Slug:  "alter_" + table + "_" + d.Name,
		}
		if !amWidens(l.Type, d.Type) {
			c.Risk = fmt.Sprintf("changes the type of %s from %s to %s, which may fail or lose data", col, l.Type, d.Type)
		}
		changes = append(changes, c)
	}
	switch {
	case d.NotNull && !l.NotNull:
		changes = append(changes, amChange{
			Phase: amAlterColumns, SQL: alter + " SET NOT NULL;", What: "make " + col + " NOT NULL", Slug: "alter_" + table + "_" + d.Name,
			Risk: "makes " + col + " NOT NULL, which fails while a row holds NULL there",
		})
	case !d.NotNull && l.NotNull:
		changes = append(changes, amChange{Phase: amAlterColumns, SQL: alter + " DROP NOT NULL;", What: "make " + col + " nullable", Slug: "alter_" + table + "_" + d.Name})
	}
	switch {
	case d.Default == liveDefault:
	case w.Default != nil:
		changes = append(changes, defaultChange(alter+" SET DEFAULT "+*w.Default+";", "set the default of "+col))
	default:
		changes = append(changes, defaultChange(alter+" DROP DEFAULT;", "drop the default of "+col))
	}
	return changes
}

// amSerialDefault reports whether a default comes from a sequence or an
// identity.
func amSerialDefault(def string) bool {
	return strings.Contains(def, "nextval(") || def == "GENERATED AS IDENTITY"
}

// amVarcharType matches format_type's spelling of varchar with a length.
var amVarcharType = regexp.MustCompile(`^character varying\((\d+)\)$`)

// amWidens reports whether changing a column from type from to type to
// keeps every value: a longer or unbounded varchar, text from varchar, a
// wider integer.
func amWidens(from, to string) bool {
	intRank := map[string]int{"smallint": 1, "integer": 2, "bigint": 3}
	if intRank[from] > 0 && intRank[to] > intRank[from] {
		return true
	}
	m := amVarcharType.FindStringSubmatch(from)
	if m == nil && from != "character varying" {
		return false
	}
	if to == "text" || to == "character varying" {
		return true
	}
	n := amVarcharType.FindStringSubmatch(to)
	if m == nil || n == nil {
		return false
	}
	a, _ := strconv.Atoi(m[1])
	b, _ := strconv.Atoi(n[1])
	return b > a
}

// amDiffConstraints compares primary keys, unique constraints and foreign
// keys by definition: a live one that is not desired is dropped (review),
// a desired one that is not live is added.
func amDiffConstraints(t amTable, desired, live amDBTable) []amChange {
	var changes []amChange
	table := amQuote(amLiveSchema, t.Name)
	bodies := map[string]string{} // desired constraint name → body SQL
	if t.PrimaryKey != nil {
		bodies[t.PrimaryKey.Name] = amPrimaryKeySQL(*t.PrimaryKey)
	}
	for _, u := range t.Uniques {
		bodies[u.Name] = amUniqueSQL(u)
	}
	for _, fk := range t.ForeignKeys {
		bodies[fk.Name] = amForeignKeySQL(amLiveSchema, fk)
	}
	kinds := map[string]string{"p": "primary key", "u": "unique constraint", "f": "foreign key"}
	same := func(a, b amDBConstraint) bool { return a.Type == b.Type && a.Def == b.Def }
	unmatched := slices.Clone(desired.Constraints)
	for _, l := range live.Constraints {
		if i := slices.IndexFunc(unmatched, func(d amDBConstraint) bool { return same(d, l) }); i >= 0 {
			unmatched = slices.Delete(unmatched, i, i+1)
			continue
		}
		phase := amDropIndexes
		if l.Type == "f" {
			phase = amDropForeignKeys
		}
		changes = append(changes, amChange{
			Phase: phase, SQL: "ALTER TABLE " + table + " DROP CONSTRAINT " + amQuote(l.Name) + ";",
			What: "drop " + kinds[l.Type] + " " + l.Name, Slug: "drop_" + l.Name,
			Risk: fmt.Sprintf("drops %s %s on %s (%s), which src/schema.ts no longer declares", kinds[l.Type], l.Name, t.Name, l.Def),
		})
	}
	for _, d := range unmatched {
		c := amChange{Phase: amAddKeys, SQL: amAddConstraintSQL(amLiveSchema, t.Name, d.Name, bodies[d.Name]), What: "add " + kinds[d.Type] + " " + d.Name}
		switch d.Type {
		case "p":
			c.Slug = "add_pk_" + t.Name
		case "u":
			c.Slug = "add_unique_" + d.Name
		case "f":
			c.Phase, c.Slug = amAddForeignKeys, "add_fk_"+d.Name
		}
		changes = append(changes, c)
	}
	return changes
}

// amDiffIndexes compares indexes by name and definition: a live index that
// is not desired, or is defined differently, is dropped (review) and the
// desired one created.
func amDiffIndexes(t amTable, desired, live amDBTable) []amChange {
	var changes []amChange
	want := map[string]amIndex{}
	for _, x := range t.Indexes {
		want[x.Name] = x
	}
	liveDefs := map[string]string{}
	for _, l := range live.Indexes {
		liveDefs[l.Name] = l.Def
		if i := slices.IndexFunc(desired.Indexes, func(d amDBIndex) bool { return d.Name == l.Name }); i >= 0 && desired.Indexes[i].Def == l.Def {
			continue
		}
		changes = append(changes, amChange{
			Phase: amDropIndexes, SQL: "DROP INDEX " + amQuote(amLiveSchema, l.Name) + ";",
			What: "drop index " + l.Name, Slug: "drop_index_" + l.Name,
			Risk: fmt.Sprintf("drops index %s on %s (%s), which src/schema.ts no longer declares as is", l.Name, t.Name, l.Def),
		})
	}
	for _, d := range desired.Indexes {
		if def, ok := liveDefs[d.Name]; ok && def == d.Def {
			continue
		}
		x := want[d.Name]
		slug := "add_index_" + t.Name + "_" + strings.Join(x.ColumnNames, "_")
		if slices.Contains(x.ColumnNames, "") {
			slug = "add_index_" + x.Name
		}
		changes = append(changes, amChange{Phase: amAddIndexes, SQL: amIndexSQL(amLiveSchema, t.Name, x), What: "create index " + x.Name, Slug: slug})
	}
	return changes
}

// amSlugChars matches what a file name summary may not hold.
var amSlugChars = regexp.MustCompile(`[^a-z0-9_]+`)

// amSummary names a migration after its changes: "create_users_posts" when
// it only creates tables, the one change's slug ("add_users_email"), or the
// first slug and "_and_more".
func amSummary(changes []amChange) string {
	var slugs []string
	creates := true
	for _, c := range changes {
		if c.Slug == "" || slices.Contains(slugs, c.Slug) {
			continue
		}
		slugs = append(slugs, c.Slug)
		creates = creates && strings.HasPrefix(c.Slug, "create_")
	}
	var s string
	switch {
	case len(slugs) == 0:
		s = "schema"
	case creates:
		for i := range slugs {
			slugs[i] = strings.TrimPrefix(slugs[i], "create_")
		}
		s = "create_" + strings.Join(slugs, "_")
	case len(slugs) == 1:
		s = slugs[0]
	default:
		s = slugs[0] + "_and_more"
	}
	s = strings.Trim(amSlugChars.ReplaceAllString(strings.ToLower(s), "_"), "_")
	if len(s) > 60 {
		s = strings.TrimRight(s[:60], "_")
	}
	return s
}

// amRender is the text of a migration file; a statement that needs review
// carries a comment saying why.
func amRender(changes []amChange, pending bool) string {
	var b strings.Builder
	b.WriteString("-- Generated by svc auto-migrate from " + amSchemaFile + ".\n")
	if pending {
		b.WriteString("-- NOT APPLIED: the statements marked REVIEW may lose data or guess what you meant.\n")
		b.WriteString("-- Review and edit this file, then move it to .svc/migrations/ to apply it on the next boot,\n")
		b.WriteString("-- or change " + amSchemaFile + " instead.\n")
	}
	for _, c := range changes {
		b.WriteString("\n")
		if c.Risk != "" {
			b.WriteString("-- REVIEW: " + c.Risk + "\n")
		}
		b.WriteString(c.SQL + "\n")
	}
	return b.String()
}

// amWrite writes the migration: to .svc/migrations when every change is
// additive, else to .svc/migrations/pending, where a file with the same
// text already written is reused instead of adding another.
func amWrite(dir string, changes []amChange, now time.Time) (autoMigrateResult, error) {
	applyDir := filepath.Join(dir, ".svc", "migrations")
	pendingDir := filepath.Join(applyDir, "pending")
	var res autoMigrateResult
	var whats []string
	for _, c := range changes {
		if c.Risk != "" {
			res.Destructive = append(res.Destructive, c.Risk)
		}
		if c.Slug != "" || c.Risk != "" {
			whats = append(whats, c.What)
		}
	}
	res.Pending = len(res.Destructive) > 0
	text := amRender(changes, res.Pending)
	target := applyDir
	if res.Pending {
		target = pendingDir
	}
	if err := os.MkdirAll(target, privateDirMode); err != nil {
		return autoMigrateResult{}, err
	}
	file := ""
	if res.Pending {
		existing, err := amFindSame(pendingDir, text)
		if err != nil {
			return autoMigrateResult{}, err
		}
		file = existing
	}
	if file == "" {
		stamp, err := amNextStamp(now, applyDir, pendingDir)
		if err != nil {
			return autoMigrateResult{}, err
		}
		file = filepath.Join(target, stamp+"_"+amSummary(changes)+".sql")
		if err := amWriteFile(file, text); err != nil {
			return autoMigrateResult{}, err
		}
	}
	rel, err := filepath.Rel(dir, file)
	if err != nil {
		return autoMigrateResult{}, err
	}
	res.File = filepath.ToSlash(rel)
	if res.Pending {
		why := res.Destructive
		if len(why) > amSummaryRisks {
			why = append(slices.Clip(why[:amSummaryRisks]), fmt.Sprintf("%d more in the file", len(res.Destructive)-amSummaryRisks))
		}
		res.Summary = fmt.Sprintf("auto-migrate: not applied (%s). Review %s; move it to .svc/migrations/ to apply it on the next boot, or edit %s",
			strings.Join(why, "; "), res.File, amSchemaFile)
	} else {
		res.Summary = fmt.Sprintf("auto-migrate applied %s: %s", res.File, strings.Join(whats, ", "))
	}
	return res, nil
}

// amFindSame returns the .sql file of dir whose text is text, or "".
func amFindSame(dir, text string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".sql" {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			return "", err
		}
		if string(b) == text {
			return p, nil
		}
	}
	return "", nil
}

// amNextStamp returns the UTC timestamp of now for a new migration's name,
// moved to one second after the latest timestamped .sql file of dirs when
// needed, so that the new file sorts last.
func amNextStamp(now time.Time, dirs ...string) (string, error) {
	next := now.UTC().Truncate(time.Second)
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		for _, e := range entries {
			name := e.Name()
			if len(name) < len(amStampLayout) || filepath.Ext(name) != ".sql" {
				continue
			}
			t, err := time.Parse(amStampLayout, name[:len(amStampLayout)])
			if err == nil && !next.After(t) {
				next = t.Add(time.Second)
			}
		}
	}
	return next.Format(amStampLayout), nil
}

// amWriteFile writes a file whole or not at all: a temporary file (not
// named *.sql, so the runner never sees it) synced and renamed into place.
func amWriteFile(path, text string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".automigrate-*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.WriteString(text); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
