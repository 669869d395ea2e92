package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// amTestProject returns a project directory whose src/schema.ts is schema.
func amTestProject(t *testing.T, schema string) string {
	t.Helper()
	dir := t.TempDir()
	amTestWriteSchema(t, dir, schema)
	return dir
}

// amTestWriteSchema replaces src/schema.ts of dir.
func amTestWriteSchema(t *testing.T, dir, schema string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, amSchemaFile), []byte(schema), 0o644); err != nil {
		t.Fatal(err)
	}
}

// amTestRun runs autoMigrate with a bounded context and fails on error.
func amTestRun(t *testing.T, dir, url string) autoMigrateResult {
	t.Helper()
	res, err := amTestTry(dir, url)
	if err != nil {
		t.Fatalf("autoMigrate: %v", err)
	}
	return res
}

// amTestTry runs autoMigrate with a bounded context.
func amTestTry(dir, url string) (autoMigrateResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return autoMigrate(ctx, dir, url, io.Discard)
}

// amTestConn connects to url for one query or statement.
func amTestConn(t *testing.T, url string) (context.Context, *pgx.Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return ctx, conn
}

// amTestQuery returns the first column of every row of a query, as text.
func amTestQuery(t *testing.T, url, sql string, args ...any) []string {
	t.Helper()
	ctx, conn := amTestConn(t, url)
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// amTestExec runs one statement.
func amTestExec(t *testing.T, url, sql string) {
	t.Helper()
	ctx, conn := amTestConn(t, url)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// amTestColumns describes the columns of a public table, one
// "name type [not null] [default …]" string each.
func amTestColumns(t *testing.T, url, table string) []string {
	t.Helper()
	return amTestQuery(t, url, `SELECT a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
	|| CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
	|| COALESCE(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = ('public.' || quote_ident($1))::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`, table)
}

// amTestConstraints lists the constraints of a public table as
// "name: definition".
func amTestConstraints(t *testing.T, url, table string) []string {
	t.Helper()
	return amTestQuery(t, url, `SELECT conname || ': ' || pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = ('public.' || quote_ident($1))::regclass ORDER BY conname`, table)
}

// amTestIndexes lists the index definitions of a public table.
func amTestIndexes(t *testing.T, url, table string) []string {
	t.Helper()
	return amTestQuery(t, url, `SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1 ORDER BY indexname`, table)
}

// amTestFiles lists the .sql files of a directory of the project.
func amTestFiles(t *testing.T, dir, sub string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, sub, "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// amTestHas fails unless list holds want.
func amTestHas(t *testing.T, what string, list []string, want string) {
	t.Helper()
	if !slices.Contains(list, want) {
		t.Errorf("%s = %q; want it to hold %q", what, list, want)
	}
}

const amTestCreateSchema = `import { pgTable, serial, integer, bigint, text, varchar, boolean, timestamp, date,
  jsonb, uuid, numeric, real, doublePrecision, index, uniqueIndex } from "drizzle-orm/pg-core";
import { sql } from "drizzle-orm";

export const users = pgTable("users", {
  id: serial("id").primaryKey(),
  email: varchar("email", { length: 255 }).notNull().unique(),
  name: text("name").notNull().default("anon"),
  active: boolean("active").default(true),
  createdAt: timestamp("created_at", { withTimezone: true, mode: "date" }).notNull().defaultNow(),
}, (t) => [index("users_lower_email_idx").on(sql` + "`lower(${t.email})`" + `)]);

export const posts = pgTable("posts", {
  id: uuid("id").primaryKey().defaultRandom(),
  authorId: integer("author_id").notNull().references(() => users.id, { onDelete: "cascade" }),
  body: jsonb("body").$type<{ text: string }>().default({ text: "" }),
  price: numeric("price", { precision: 10, scale: 2 }),
  views: bigint("views", { mode: "number" }).default(sql` + "`0`" + `),
  ratio: real("ratio"),
  score: doublePrecision("score"),
  day: date("day"),
}, (t) => [index("posts_author_idx").on(t.authorId)]);

export const tags = pgTable("tags", {
  postId: uuid("post_id").notNull().references(() => posts.id),
  label: text("label").notNull(),
}, (t) => ({
  pk: primaryKey({ columns: [t.postId, t.label] }),
  byLabel: uniqueIndex("tags_label_uidx").on(t.label),
}));
import { primaryKey } from "drizzle-orm/pg-core";
`

// TestAutoMigrateCreate creates three tables from nothing: keys, foreign
// keys, defaults, unique constraints and indexes land as declared, and a
// second run finds nothing to do.
func TestAutoMigrateCreate(t *testing.T) {
	url := testPostgresURL(t)
	dir := amTestProject(t, amTestCreateSchema)
	res := amTestRun(t, dir, url)
	if !res.Applied || res.Pending || len(res.Destructive) > 0 {
		t.Fatalf("autoMigrate = %+v; want applied, not pending", res)
	}
	if ok, _ := regexp.MatchString(`^\.svc/migrations/\d{14}_create_posts_tags_users\.sql$`, res.File); !ok {
		t.Errorf("File = %q; want .svc/migrations/<timestamp>_create_posts_tags_users.sql", res.File)
	}
	amTestHas(t, "applied migrations", amTestQuery(t, url, "SELECT name FROM svc.svc_migrations"), filepath.Base(res.File))

	users := amTestColumns(t, url, "users")
	for _, want := range []string{
		"id integer not null default nextval('users_id_seq'::regclass)",
		"email character varying(255) not null",
		"name text not null default 'anon'::text",
		"active boolean default true",
		"created_at timestamp with time zone not null default now()",
	} {
		amTestHas(t, "users columns", users, want)
	}
	posts := amTestColumns(t, url, "posts")
	for _, want := range []string{
		"id uuid not null default gen_random_uuid()",
		"author_id integer not null",
		`body jsonb default '{"text": ""}'::jsonb`,
		"price numeric(10,2)",
		"views bigint default 0",
		"ratio real",
		"score double precision",
		"day date",
	} {
		amTestHas(t, "posts columns", posts, want)
	}
	amTestHas(t, "users constraints", amTestConstraints(t, url, "users"), "users_email_unique: UNIQUE (email)")
	amTestHas(t, "users constraints", amTestConstraints(t, url, "users"), "users_pkey: PRIMARY KEY (id)")
	amTestHas(t, "posts constraints", amTestConstraints(t, url, "posts"),
		"posts_author_id_users_id_fk: FOREIGN KEY (author_id) REFERENCES users(id) ON DELETE CASCADE")
	amTestHas(t, "tags constraints", amTestConstraints(t, url, "tags"), "tags_pkey: PRIMARY KEY (post_id, label)")
	amTestHas(t, "posts indexes", amTestIndexes(t, url, "posts"), "CREATE INDEX posts_author_idx ON public.posts USING btree (author_id)")
	amTestHas(t, "tags indexes", amTestIndexes(t, url, "tags"), "CREATE UNIQUE INDEX tags_label_uidx ON public.tags USING btree (label)")
	amTestHas(t, "users indexes", amTestIndexes(t, url, "users"), "CREATE INDEX users_lower_email_idx ON public.users USING btree (lower((email)::text))")

	// The defaults and the cascade work.
	amTestExec(t, url, "INSERT INTO users (email) VALUES ('a@example.com')")
	amTestExec(t, url, "INSERT INTO posts (author_id) SELECT id FROM users")
	amTestExec(t, url, "DELETE FROM users")
	if n := amTestQuery(t, url, "SELECT count(*)::text FROM posts"); n[0] != "0" {
		t.Errorf("posts after deleting their author = %s; want 0 (ON DELETE CASCADE)", n[0])
	}

	if again := amTestRun(t, dir, url); again.File != "" || again.Applied || again.Pending {
		t.Errorf("second autoMigrate = %+v; want nothing to do", again)
	}
	if files := amTestFiles(t, dir, ".svc/migrations"); len(files) != 1 {
		t.Errorf("migration files = %q; want just the first", files)
	}
}

// amTestStep is one edit of src/schema.ts in TestAutoMigrateEvolve and what
// auto-migrate must do about it.
type amTestStep struct {
	name    string
	schema  string                              // the users and posts tables' bodies, see amTestEvolveSchema
	before  func(t *testing.T, url string)      // runs before autoMigrate
	want    string                              // "applied", "pending" or "none"
	file    string                              // regexp the File must match
	risk    string                              // a substring of Destructive
	check   func(t *testing.T, dir, url string) // after autoMigrate
	moveOut bool                                // move the pending file to .svc/migrations afterwards
}

// amTestEvolveSchema is a schema.ts with the users and posts tables.
func amTestEvolveSchema(users, posts string) string {
	return `import { pgTable, serial, integer, text, varchar, index } from "drizzle-orm/pg-core";
export const users = pgTable("users", ` + users + `);
export const posts = pgTable("posts", ` + posts + `);
`
}

// TestAutoMigrateEvolve edits one project's schema.ts step by step against
// one database: additive edits are applied, destructive and ambiguous ones
// are written pending and leave the database alone, and a pending file
// moved to .svc/migrations is applied by the next run.
func TestAutoMigrateEvolve(t *testing.T) {
	url := testPostgresURL(t)
	const (
		users0 = `{ id: serial("id").primaryKey(), email: text("email").notNull() }`
		users1 = `{ id: serial("id").primaryKey(), email: text("email").notNull(), name: text("name") }`
		users2 = `{ id: serial("id").primaryKey(), email: text("email").notNull(), name: text("name") }, (t) => [index().on(t.email)]`
		users3 = `{ id: serial("id").primaryKey(), email: text("email").notNull() }, (t) => [index().on(t.email)]`
		users4 = `{ id: serial("id").primaryKey(), email: text("email").notNull(), fullName: text("full_name") }, (t) => [index().on(t.email)]`
		users5 = `{ id: serial("id").primaryKey(), email: text("email").notNull(), fullName: text("full_name"), age: integer("age").notNull() }, (t) => [index().on(t.email)]`
		posts0 = `{ id: serial("id").primaryKey(), title: varchar("title", { length: 20 }) }`
		posts1 = `{ id: serial("id").primaryKey(), title: varchar("title", { length: 20 }), authorId: integer("author_id") }`
		posts2 = `{ id: serial("id").primaryKey(), title: varchar("title", { length: 20 }), authorId: integer("author_id").references(() => users.id, { onDelete: "set null" }) }`
		posts3 = `{ id: serial("id").primaryKey(), title: varchar("title", { length: 80 }), authorId: integer("author_id").references(() => users.id, { onDelete: "set null" }) }`
	)
	steps := []amTestStep{
		{name: "create", schema: amTestEvolveSchema(users0, posts0), want: "applied", file: `_create_posts_users\.sql$`},
		{name: "unchanged", schema: amTestEvolveSchema(users0, posts0), want: "none"},
		{name: "add column", schema: amTestEvolveSchema(users1, posts0), want: "applied", file: `_add_users_name\.sql$`,
			check: func(t *testing.T, dir, url string) {
				amTestHas(t, "users columns", amTestColumns(t, url, "users"), "name text")
			}},
		{name: "add index", schema: amTestEvolveSchema(users2, posts0), want: "applied", file: `_add_index_users_email\.sql$`,
			check: func(t *testing.T, dir, url string) {
				amTestHas(t, "users indexes", amTestIndexes(t, url, "users"), "CREATE INDEX users_email_index ON public.users USING btree (email)")
			}},
		{name: "add plain column", schema: amTestEvolveSchema(users2, posts1), want: "applied", file: `_add_posts_author_id\.sql$`},
		{name: "foreign key added later", schema: amTestEvolveSchema(users2, posts2), want: "applied", file: `_add_fk_posts_author_id_users_id_fk\.sql$`,
			check: func(t *testing.T, dir, url string) {
				amTestHas(t, "posts constraints", amTestConstraints(t, url, "posts"),
					"posts_author_id_users_id_fk: FOREIGN KEY (author_id) REFERENCES users(id) ON DELETE SET NULL")
			}},
		{name: "widen varchar", schema: amTestEvolveSchema(users2, posts3), want: "applied", file: `_alter_posts_title\.sql$`,
			check: func(t *testing.T, dir, url string) {
				amTestHas(t, "posts columns", amTestColumns(t, url, "posts"), "title character varying(80)")
			}},
		{name: "drop column refused", schema: amTestEvolveSchema(users3, posts3), want: "pending", file: `^\.svc/migrations/pending/\d{14}_drop_users_name\.sql$`, risk: "drops column users.name",
			before: func(t *testing.T, url string) {
				amTestExec(t, url, "INSERT INTO users (email, name) VALUES ('a@example.com', 'Ada')")
			},
			check: func(t *testing.T, dir, url string) {
				amTestHas(t, "users columns", amTestColumns(t, url, "users"), "name text")
				b, err := os.ReadFile(filepath.Join(dir, ".svc/migrations/pending", filepath.Base(amTestFiles(t, dir, ".svc/migrations/pending")[0])))
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(string(b), "-- REVIEW: drops column users.name") || !strings.Contains(string(b), `ALTER TABLE "public"."users" DROP COLUMN "name";`) {
					t.Errorf("pending file:\n%s\nwant the commented DROP COLUMN", b)
				}
			}},
		{name: "same refusal reuses the pending file", schema: amTestEvolveSchema(users3, posts3), want: "pending", file: `_drop_users_name\.sql$`, risk: "drops column users.name",
			check: func(t *testing.T, dir, url string) {
				if files := amTestFiles(t, dir, ".svc/migrations/pending"); len(files) != 1 {
					t.Errorf("pending files = %q; want one", files)
				}
			}},
		{name: "rename looks ambiguous", schema: amTestEvolveSchema(users4, posts3), want: "pending", file: `_rename_users_name\.sql$`, risk: "column users.name looks renamed to users.full_name",
			check: func(t *testing.T, dir, url string) {
				amTestHas(t, "users columns", amTestColumns(t, url, "users"), "name text")
			},
			moveOut: true},
		{name: "moved pending file is applied", schema: amTestEvolveSchema(users4, posts3), want: "none",
			check: func(t *testing.T, dir, url string) {
				cols := amTestColumns(t, url, "users")
				amTestHas(t, "users columns", cols, "full_name text")
				if got := amTestQuery(t, url, "SELECT full_name FROM users"); len(got) != 1 || got[0] != "Ada" {
					t.Errorf("full_name = %q; want the renamed column's data [Ada]", got)
				}
			}},
		{name: "not null without default on rows", schema: amTestEvolveSchema(users5, posts3), want: "pending", file: `_add_users_age\.sql$`, risk: "adds NOT NULL column users.age without a default"},
	}
	dir := t.TempDir()
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			amTestWriteSchema(t, dir, st.schema)
			if st.before != nil {
				st.before(t, url)
			}
			var applied []string
			if st.want == "pending" {
				applied = amTestQuery(t, url, "SELECT count(*)::text FROM svc.svc_migrations")
			}
			res := amTestRun(t, dir, url)
			switch st.want {
			case "applied":
				if !res.Applied || res.Pending {
					t.Fatalf("autoMigrate = %+v; want applied", res)
				}
			case "pending":
				if res.Applied || !res.Pending || !strings.Contains(res.Summary, "move it to .svc/migrations/") {
					t.Fatalf("autoMigrate = %+v; want pending with what to do", res)
				}
				if !slices.ContainsFunc(res.Destructive, func(s string) bool { return strings.Contains(s, st.risk) }) {
					t.Errorf("Destructive = %q; want one containing %q", res.Destructive, st.risk)
				}
				if now := amTestQuery(t, url, "SELECT count(*)::text FROM svc.svc_migrations"); now[0] != applied[0] {
					t.Errorf("applied migrations went from %s to %s; want nothing applied", applied[0], now[0])
				}
			case "none":
				if res.File != "" || res.Applied || res.Pending {
					t.Fatalf("autoMigrate = %+v; want nothing to do", res)
				}
			}
			if st.file != "" {
				if ok, _ := regexp.MatchString(st.file, res.File); !ok {
					t.Errorf("File = %q; want it to match %q", res.File, st.file)
				}
			}
			if st.check != nil {
				st.check(t, dir, url)
			}
			if st.moveOut {
				if err := os.Rename(filepath.Join(dir, res.File), filepath.Join(dir, ".svc/migrations", filepath.Base(res.File))); err != nil {
					t.Fatal(err)
				}
				// The other pending file is stale now.
				for _, f := range amTestFiles(t, dir, ".svc/migrations/pending") {
					os.Remove(f)
				}
			}
		})
	}
}

// TestAutoMigrateErrors: a schema.ts that does not evaluate is a
// *compileError at file:line, and no schema.ts means nothing to do.
func TestAutoMigrateErrors(t *testing.T) {
	url := testPostgresURL(t)
	tests := []struct {
		name     string
		schema   string
		wantLine int
		wantMsg  string
	}{
		{"syntax error", "import { pgTable, serial } from \"drizzle-orm/pg-core\";\n\nexport const users = pgTable(\"users\", {\n  id: serial(\"id\").primaryKey(,\n});\n", 4, ""},
		{"unsupported builder", "import { pgTable, pgEnum } from \"drizzle-orm/pg-core\";\n\nexport const mood = pgEnum(\"mood\", [\"sad\", \"ok\"]);\n", 1, "pgEnum"},
		{"bad option", "import { pgTable, varchar } from \"drizzle-orm/pg-core\";\nexport const users = pgTable(\"users\", {\n  name: varchar(\"name\", { length: -1 }),\n});\n", 3, "varchar length"},
		{"unexported target", "import { pgTable, serial, integer } from \"drizzle-orm/pg-core\";\nconst users = pgTable(\"users\", { id: serial(\"id\").primaryKey() });\nexport const posts = pgTable(\"posts\", { authorId: integer(\"author_id\").references(() => users.id) });\n", 0, "does not export"},
		{"reference to a non-column", "import { pgTable, integer } from \"drizzle-orm/pg-core\";\nexport const posts = pgTable(\"posts\", { authorId: integer(\"author_id\").references(() => 42) });\n", 0, "a reference must name a column"},
		{"rejected by PostgreSQL", "import { pgTable, integer } from \"drizzle-orm/pg-core\";\nexport const t = pgTable(\"t\", { n: integer(\"n\").default(\"many\") });\n", 0, "PostgreSQL rejects the schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := amTestProject(t, tt.schema)
			res, err := amTestTry(dir, url)
			var ce *compileError
			if !errors.As(err, &ce) {
				t.Fatalf("autoMigrate = %+v, %v; want a *compileError", res, err)
			}
			if ce.File != amSchemaFile || ce.Line != tt.wantLine || !strings.Contains(ce.Message, tt.wantMsg) {
				t.Errorf("compileError = %q (file %q line %d); want %s:%d containing %q", ce.Error(), ce.File, ce.Line, amSchemaFile, tt.wantLine, tt.wantMsg)
			}
			if _, err := os.Stat(filepath.Join(dir, ".svc/migrations")); err == nil {
				if files := amTestFiles(t, dir, ".svc/migrations"); len(files) > 0 {
					t.Errorf("migration files = %q; want none", files)
				}
			}
		})
	}
	t.Run("no schema.ts", func(t *testing.T) {
		res, err := amTestTry(t.TempDir(), url)
		if err != nil || res.File != "" || res.Applied || res.Pending {
			t.Errorf("autoMigrate = %+v, %v; want the zero result", res, err)
		}
	})
}

// TestAutoMigrateWidens checks which type changes keep every value.
func TestAutoMigrateWidens(t *testing.T) {
	tests := []struct {
		from, to string
		want     bool
	}{
		{"character varying(20)", "character varying(80)", true},
		{"character varying(80)", "character varying(20)", false},
		{"character varying(20)", "text", true},
		{"character varying(20)", "character varying", true},
		{"character varying", "character varying(20)", false},
		{"text", "character varying(20)", false},
		{"smallint", "integer", true},
		{"integer", "bigint", true},
		{"bigint", "integer", false},
		{"integer", "text", false},
		{"text", "integer", false},
	}
	for _, tt := range tests {
		if got := amWidens(tt.from, tt.to); got != tt.want {
			t.Errorf("amWidens(%q, %q) = %v; want %v", tt.from, tt.to, got, tt.want)
		}
	}
}

// TestAutoMigrateSummary checks the names given to migration files.
func TestAutoMigrateSummary(t *testing.T) {
	tests := []struct {
		name  string
		slugs []string
		want  string
	}{
		{"creates", []string{"create_users", "", "create_posts", ""}, "create_users_posts"},
		{"one change", []string{"add_users_email"}, "add_users_email"},
		{"same change twice", []string{"alter_users_email", "alter_users_email"}, "alter_users_email"},
		{"several", []string{"add_users_email", "drop_users_name"}, "add_users_email_and_more"},
		{"odd characters", []string{"add_Users_e-mail"}, "add_users_e_mail"},
		{"long", []string{"create_" + strings.Repeat("x", 70)}, "create_" + strings.Repeat("x", 53)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var changes []amChange
			for _, s := range tt.slugs {
				changes = append(changes, amChange{Slug: s})
			}
			if got := amSummary(changes); got != tt.want {
				t.Errorf("amSummary(%q) = %q; want %q", tt.slugs, got, tt.want)
			}
		})
	}
}

// TestAutoMigrateNextStamp: a new file sorts after every timestamped file.
func TestAutoMigrateNextStamp(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2025, 3, 4, 5, 6, 7, 800, time.UTC)
	tests := []struct {
		name  string
		files []string
		want  string
	}{
		{"empty", nil, "20250304050607"},
		{"older files", []string{"20240101000000_create_users.sql", "0001_hand_written.sql"}, "20250304050607"},
		{"same second", []string{"20250304050607_create_users.sql"}, "20250304050608"},
		{"later file", []string{"20250304050610_add_users_name.sql"}, "20250304050611"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := filepath.Join(dir, tt.name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.files {
				if err := os.WriteFile(filepath.Join(d, f), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := amNextStamp(now, d, filepath.Join(d, "missing"))
			if err != nil || got != tt.want {
				t.Errorf("amNextStamp = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestAutoMigrateApplyFails: an additive migration that the database
// refuses (a unique constraint over duplicates) is moved to pending, so the
// next boot is not stopped by it.
func TestAutoMigrateApplyFails(t *testing.T) {
	url := testPostgresURL(t)
	const head = `import { pgTable, text } from "drizzle-orm/pg-core";
export const users = pgTable("users", { email: text("email")`
	dir := amTestProject(t, head+` });`)
	amTestRun(t, dir, url)
	amTestExec(t, url, "INSERT INTO users (email) VALUES ('a@example.com'), ('a@example.com')")
	amTestWriteSchema(t, dir, head+`.unique() });`)
	res, err := amTestTry(dir, url)
	if err == nil || !strings.Contains(err.Error(), "moved to .svc/migrations/pending/") {
		t.Fatalf("autoMigrate = %+v, %v; want an error saying the file was moved to pending", res, err)
	}
	if files := amTestFiles(t, dir, ".svc/migrations"); len(files) != 1 {
		t.Errorf("migration files = %q; want only the first", files)
	}
	if files := amTestFiles(t, dir, ".svc/migrations/pending"); len(files) != 1 || !strings.HasSuffix(files[0], "_add_unique_users_email_unique.sql") {
		t.Errorf("pending files = %q; want the refused migration", files)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := applyMigrations(ctx, url, filepath.Join(dir, ".svc/migrations"), io.Discard); err != nil {
		t.Errorf("applyMigrations after the refusal: %v", err)
	}
}

// TestAutoMigrateTimeout: a schema.ts that never finishes, at the top level
// or in a table's extras, is stopped when the context ends and reported as
// a *compileError; no database is needed to get there.
func TestAutoMigrateTimeout(t *testing.T) {
	tests := []struct{ name, schema string }{
		{"top level", "while (true) {}\n"},
		{"extras", "import { pgTable, text } from \"drizzle-orm/pg-core\";\nexport const t = pgTable(\"t\", { a: text() }, () => { for (;;) {} });\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := amTestProject(t, tt.schema)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := autoMigrate(ctx, dir, "postgres://unused.invalid/db", io.Discard)
			var ce *compileError
			if !errors.As(err, &ce) || !strings.Contains(ce.Message, "evaluation stopped") {
				t.Errorf("autoMigrate = %v; want a *compileError saying the evaluation stopped", err)
			}
		})
	}
}
