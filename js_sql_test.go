package main

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
	"github.com/jackc/pgx/v5"
)

// sqlTestEnv runs steps with sql on a fresh database of their own.
type sqlTestEnv struct {
	url    string
	host   *sqlHost
	runner *stepRunner
}

// newSQLTestEnv returns an environment on a new database.
func newSQLTestEnv(t testing.TB) *sqlTestEnv {
	t.Helper()
	url := testPostgresURL(t)
	h, err := newSQLHost(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	p := newJSPlatform()
	p.sql = h
	return &sqlTestEnv{url: url, host: h, runner: newStepRunner(func() map[string]string { return nil }, p, discardLogger())}
}

// stepDef compiles body as the step s (it may await sql, imported) into a
// workflow definition whose steps time out after timeout.
func sqlStepDef(t testing.TB, body string, timeout time.Duration) *workflowDef {
	t.Helper()
	dir := t.TempDir()
	writeFile(t, dir, "s.ts", `import { sql } from "svc";
export async function s(): Promise<unknown> {
  "use step";
`+body+`
}`)
	m, err := bundleModule(dir, "s.ts")
	if err != nil {
		t.Fatal(err)
	}
	def := newWorkflowDef("t", "s.ts")
	def.Module, def.StepTimeout = m, timeout
	return def
}

// step runs body as a step and returns its JSON result, or its error.
func (e *sqlTestEnv) step(t testing.TB, body string) (string, error) {
	t.Helper()
	return e.run(t, sqlStepDef(t, body, 20*time.Second))
}

// run runs step s of def once.
func (e *sqlTestEnv) run(t testing.TB, def *workflowDef) (string, error) {
	t.Helper()
	res, finish, err := e.runner.start(def, "s", json.RawMessage("[]"), nil, otelUserTrace{})
	if finish != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err = finish(ctx)
	}
	return string(res), err
}

// mustStep runs body and fails the test on an error.
func (e *sqlTestEnv) mustStep(t testing.TB, body string) string {
	t.Helper()
	out, err := e.step(t, body)
	if err != nil {
		t.Fatalf("step failed: %v\n%s", err, body)
	}
	return out
}

// exec runs a statement from outside the VMs.
func (e *sqlTestEnv) exec(t testing.TB, q string) {
	t.Helper()
	if _, err := e.host.pool.Exec(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// count returns the number of rows of a query's first column (an integer).
func (e *sqlTestEnv) count(t testing.TB, q string) int {
	t.Helper()
	var n int
	if err := e.host.pool.QueryRow(context.Background(), q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func TestSQLTypesFromPostgres(t *testing.T) {
	e := newSQLTestEnv(t)
	out := e.mustStep(t, `
  const [r] = await sql`+"`"+`select 1::int2 as i2, 2::int4 as i4, 1.5::float4 as f4, 'NaN'::float8 as nan,
    9007199254740993::int8 as i8, 12345678901234567890.000000000001::numeric as num, true as b, 'héllo'::text as t,
    'x'::varchar as v, '6b5f4c3e-1d2a-4b8c-9e0f-a1b2c3d4e5f6'::uuid as u, '{"a":[1,{"b":null}]}'::jsonb as jb, '[1,2]'::json as j,
    '2024-02-29 12:34:56.789'::timestamp as ts, '2024-02-29 12:34:56.789+02'::timestamptz as tstz, 'infinity'::timestamp as inf,
    '2024-02-29'::date as d, '\\x00ff10'::bytea as by, array[1,null,3]::int4[] as a, array[['a','b"c'],['d,e',null]] as a2,
    array['2024-01-01T00:00:00Z'::timestamptz] as ats, array[1::int8] as a8, null::int4 as n, '1 day 2 hours'::interval as iv,
    inet '10.0.0.1/8' as ip`+"`"+`;
  const kind = (v: any): string => v === null ? "null" : v instanceof Date ? "Date:" + v.toISOString() :
    v instanceof Uint8Array ? "Uint8Array:" + Array.from(v).join(",") : Array.isArray(v) ? "[" + v.map(kind).join(";") + "]" :
    typeof v === "object" ? "object:" + JSON.stringify(v) : typeof v + ":" + String(v);
  const o: Record<string, string> = {};
  for (const k of Object.keys(r)) o[k] = kind(r[k]);
  return o;`)
	var got map[string]string
	json.Unmarshal([]byte(out), &got)
	want := map[string]string{
		"i2": "number:1", "i4": "number:2", "f4": "number:1.5", "nan": "number:NaN",
		"i8": "string:9007199254740993", "num": "string:12345678901234567890.000000000001", "b": "boolean:true",
		"t": "string:héllo", "v": "string:x", "u": "string:6b5f4c3e-1d2a-4b8c-9e0f-a1b2c3d4e5f6",
		"jb": `object:{"a":[1,{"b":null}]}`, "j": "[number:1;number:2]",
		"ts": "Date:2024-02-29T12:34:56.789Z", "tstz": "Date:2024-02-29T10:34:56.789Z", "inf": "string:infinity",
		"d": "string:2024-02-29", "by": "Uint8Array:0,255,16", "a": "[number:1;null;number:3]",
		"a2": `[[string:a;string:b"c];[string:d,e;null]]`, "ats": "[Date:2024-01-01T00:00:00.000Z]", "a8": "[string:1]",
		"n": "null", "iv": "string:1 day 02:00:00", "ip": "string:10.0.0.1/8",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q; want %q", k, got[k], w)
		}
	}
}

func TestSQLTypesToPostgres(t *testing.T) {
	e := newSQLTestEnv(t)
	e.exec(t, `create table v (i4 int4, i8 int8, f8 float8, num numeric, b bool, t text, u uuid, jb jsonb, ts timestamp,
		tstz timestamptz, d date, by bytea, ia int4[], ta text[], n text)`)
	e.mustStep(t, `
  const r = await sql`+"`"+`insert into v values (${42}, ${9007199254740993n}, ${0.1}, ${"12345678901234567890.5"}, ${true},
    ${"it's"}, ${"6b5f4c3e-1d2a-4b8c-9e0f-a1b2c3d4e5f6"}, ${{ a: [1, "x"], n: null }}, ${new Date(Date.UTC(2024, 1, 29, 1, 2, 3, 4))},
    ${new Date(Date.UTC(2024, 1, 29, 1, 2, 3, 4))}, ${"2024-02-29"}, ${new Uint8Array([0, 1, 255])}, ${[1, null, 3]},
    ${['a"b', "c,d", "\\"]}, ${undefined})`+"`"+`;
  if (r.rowCount !== 1 || r.command !== "INSERT" || r.length !== 0 || Object.keys(r).length !== 0) throw new Error("tag " + r.rowCount + r.command);
  await sql.query("insert into v (by, jb) values ($1, $2)", [new Uint8Array([7]).buffer, [1, 2]]);`)
	var (
		i4       int32
		i8       int64
		f8       float64
		num, txt string
		b        bool
		u        string
		jb       string
		ts, tstz time.Time
		d        time.Time
		by       []byte
		ia       []*int32
		ta       []string
		n        *string
	)
	err := e.host.pool.QueryRow(context.Background(), `select i4, i8, f8, num::text, b, t, u::text, jb::text, ts, tstz, d, by, ia, ta, n from v where i4 is not null`).
		Scan(&i4, &i8, &f8, &num, &b, &txt, &u, &jb, &ts, &tstz, &d, &by, &ia, &ta, &n)
	if err != nil {
		t.Fatal(err)
	}
	when := time.Date(2024, 2, 29, 1, 2, 3, 4e6, time.UTC)
	if i4 != 42 || i8 != 9007199254740993 || f8 != 0.1 || num != "12345678901234567890.5" || !b || txt != "it's" ||
		u != "6b5f4c3e-1d2a-4b8c-9e0f-a1b2c3d4e5f6" || jb != `{"a": [1, "x"], "n": null}` || !ts.Equal(when) || !tstz.Equal(when) ||
		d.Format(time.DateOnly) != "2024-02-29" || string(by) != "\x00\x01\xff" || n != nil {
		t.Errorf("stored = %v %v %v %v %v %q %v %s %v %v %v %v %v", i4, i8, f8, num, b, txt, u, jb, ts, tstz, d, by, n)
	}
	if len(ia) != 3 || *ia[0] != 1 || ia[1] != nil || *ia[2] != 3 || !reflect.DeepEqual(ta, []string{`a"b`, "c,d", `\`}) {
		t.Errorf("arrays = %v %q", ia, ta)
	}
	var by2 []byte
	var jb2 string
	if err := e.host.pool.QueryRow(context.Background(), `select by, jb::text from v where i4 is null`).Scan(&by2, &jb2); err != nil || string(by2) != "\x07" || jb2 != "[1, 2]" {
		t.Errorf("ArrayBuffer and JSON array params = %q %q %v", by2, jb2, err)
	}
	// A value of the wrong kind for the inferred type is PostgreSQL's error.
	_, err = e.step(t, "await sql`select * from v where i4 = ${1.5}`;")
	if err == nil || !strings.Contains(err.Error(), "integer") {
		t.Errorf("float for int4 = %v; want invalid input syntax for type integer", err)
	}
	for _, bad := range []string{"${() => 1}", "${Symbol('x')}", "${new Date(NaN)}"} {
		if _, err := e.step(t, "await sql`select ${0}::int, "+bad+"::text`;"); err == nil || !strings.Contains(err.Error(), "parameter $2") {
			t.Errorf("parameter %s = %v; want a TypeError naming $2", bad, err)
		}
	}
}

func TestSQLInjectionThroughValueIsInert(t *testing.T) {
	e := newSQLTestEnv(t)
	e.exec(t, `create table notes (body text)`)
	evil := `'; drop table notes; --`
	out := e.mustStep(t, `
  const evil = `+"`"+evil+"`"+`;
  await sql`+"`"+`insert into notes values (${evil})`+"`"+`;
  await sql.query("insert into notes values ($1)", [evil + "2"]);
  const rows = await sql<{ body: string }>`+"`"+`select body from notes where body like ${evil + "%"} order by body`+"`"+`;
  return rows.map((r) => r.body);`)
	if out != `["'; drop table notes; --","'; drop table notes; --2"]` {
		t.Errorf("stored = %s", out)
	}
	if n := e.count(t, `select count(*) from notes`); n != 2 {
		t.Errorf("notes rows = %d; want 2 (the table still there)", n)
	}
	// Text with two statements is refused, not run.
	if _, err := e.step(t, `await sql.query("select 1; drop table notes");`); err == nil || !strings.Contains(err.Error(), "multiple commands") {
		t.Errorf("two statements = %v; want refused", err)
	}
	if _, err := e.step(t, `await (sql as any)("select 1");`); err == nil || !strings.Contains(err.Error(), "tagged template") {
		t.Errorf("sql(string) = %v; want the tagged template guidance", err)
	}
}

func TestSQLTransactions(t *testing.T) {
	e := newSQLTestEnv(t)
	e.exec(t, `create table acct (id int primary key, n int not null)`)
	out := e.mustStep(t, `
  const v = await sql.begin(async (tx) => {
    await tx`+"`"+`insert into acct values (1, 10)`+"`"+`;
    tx`+"`"+`insert into acct values (2, 20)`+"`"+`; // not awaited: runs before COMMIT, in order
    const [r] = await tx.query<{ n: number }>("select count(*)::int as n from acct");
    return r.n;
  });
  return v;`)
	if out != "2" || e.count(t, `select count(*) from acct`) != 2 {
		t.Errorf("commit = %s, %d rows; want both rows seen inside, in order, and 2 rows after", out, e.count(t, `select count(*) from acct`))
	}
	out = e.mustStep(t, `
  let stale: any;
  try {
    await sql.begin(async (tx) => {
      stale = tx;
      await tx`+"`"+`insert into acct values (3, 30)`+"`"+`;
      await tx`+"`"+`update acct set n = n + 1`+"`"+`;
      throw new Error("changed my mind");
    });
    return "committed";
  } catch (err: any) {
    let after = "";
    try { await stale`+"`"+`select 1`+"`"+`; } catch (e2: any) { after = e2.message; }
    return err.message + " | " + after;
  }`)
	if !strings.HasPrefix(out, `"changed my mind | sql: this transaction has ended`) {
		t.Errorf("rollback = %s; want the callback's error, then the stale tx refused", out)
	}
	if n := e.count(t, `select count(*) from acct where id = 3 or n <> id * 10`); n != 0 {
		t.Errorf("after the failing transaction %d rows changed; want none", n)
	}
	// A failing statement the callback swallows: COMMIT rolls back and says so.
	_, err := e.step(t, `await sql.begin(async (tx) => { await tx`+"`"+`insert into acct values (4, 40)`+"`"+`; await tx`+"`"+`insert into acct values (1, 1)`+"`"+`.catch(() => {}); });`)
	if err == nil || !strings.Contains(err.Error(), "rolled back") || e.count(t, `select count(*) from acct where id = 4`) != 0 {
		t.Errorf("swallowed failure = %v; want rolled back", err)
	}
	if e.host.pool.Stat().AcquiredConns() != 0 {
		t.Errorf("acquired connections after the transactions = %d", e.host.pool.Stat().AcquiredConns())
	}
}

func TestSQLPostgresError(t *testing.T) {
	e := newSQLTestEnv(t)
	e.exec(t, `create table users (email text constraint users_email_key unique)`)
	out := e.mustStep(t, `
  await sql`+"`"+`insert into users values ('a@x')`+"`"+`;
  try { await sql`+"`"+`insert into users values (${"a@x"})`+"`"+`; } catch (e: any) {
    return { name: e.name, code: e.code, message: e.message, detail: e.detail, table: e.table, constraint: e.constraint, schema: e.schema, isError: e instanceof Error };
  }
  return null;`)
	want := `{"name":"PostgresError","code":"23505","message":"duplicate key value violates unique constraint \"users_email_key\"","detail":"Key (email)=(a@x) already exists.","table":"users","constraint":"users_email_key","schema":"public","isError":true}`
	if out != want {
		t.Errorf("error = %s\nwant %s", out, want)
	}
	out = e.mustStep(t, "try { await sql`selec 1`; } catch (e: any) { return [e.code, e.position]; }")
	if out != `["42601",1]` {
		t.Errorf("syntax error = %s; want code 42601 at position 1", out)
	}
	// Thrown from a step, it is the step's error (retries apply).
	_, err := e.step(t, "await sql`select 1/0`;")
	var thrown *jsThrown
	if !errors.As(err, &thrown) || thrown.name() != "PostgresError" || !strings.Contains(err.Error(), "division by zero") {
		t.Errorf("step error = %v; want a PostgresError", err)
	}
}

func TestSQLResultBound(t *testing.T) {
	e := newSQLTestEnv(t)
	_, err := e.step(t, "await sql`select generate_series(1, 100001) as n`;")
	if err == nil || !strings.Contains(err.Error(), "more than 100000 rows") {
		t.Errorf("100001 rows = %v; want the row limit", err)
	}
}

// TestSQLStepTimeoutRollsBack checks that a step timing out inside a
// transaction (idle in it, or in a statement) leaves nothing behind: the
// rows are not there, the connection is back, no session is in a
// transaction.
func TestSQLStepTimeoutRollsBack(t *testing.T) {
	e := newSQLTestEnv(t)
	e.exec(t, `create table held (id int)`)
	for name, wait := range map[string]string{
		"idle":      "await new Promise(() => {});",
		"statement": "await tx`select pg_sleep(60)`;",
		"spinning":  "for (;;) {}",
	} {
		t.Run(name, func(t *testing.T) {
			def := sqlStepDef(t, "await sql.begin(async (tx) => { await tx`insert into held values (1)`; "+wait+" });", 500*time.Millisecond)
			if _, err := e.run(t, def); err == nil || !strings.Contains(err.Error(), "timed out") {
				t.Fatalf("step = %v; want timed out", err)
			}
			eventually(t, 10*time.Second, "the connection to be released", func() bool { return e.host.pool.Stat().AcquiredConns() == 0 })
			eventually(t, 10*time.Second, "no session in a transaction", func() bool {
				return e.count(t, `select count(*) from pg_stat_activity where application_name = 'svc user sql' and state like '%transaction%'`) == 0
			})
			if n := e.count(t, `select count(*) from held`); n != 0 {
				t.Errorf("rows after the timeout = %d; want 0", n)
			}
		})
	}
	// The pool still serves.
	if out := e.mustStep(t, "return (await sql`select 2 as n`)[0].n;"); out != "2" {
		t.Errorf("after the timeouts = %s", out)
	}
}

func TestSQLUnavailable(t *testing.T) {
	for _, tt := range []struct {
		name    string
		install func(vm *goja.Runtime, ambient *goja.Object)
		want    string
	}{
		{"workflow", func(vm *goja.Runtime, a *goja.Object) { newJSPlatform().installWorkflow(vm, a) }, sqlInWorkflow},
		{"no database", func(vm *goja.Runtime, a *goja.Object) { newJSPlatform().install(newJSLoop(vm), a) }, sqlNoDatabase},
	} {
		vm := goja.New()
		ambient := vm.NewObject()
		tt.install(vm, ambient)
		vm.Set("svc", ambient)
		for _, call := range []string{"svc.sql`select 1`", "svc.sql.query('select 1')", "svc.sql.begin(async () => 1)"} {
			_, err := vm.RunString(call)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %s = %v; want %q", tt.name, call, err, tt.want)
			}
		}
	}
	if !strings.Contains(sqlInWorkflow, `move it into a step (a function whose body starts with "use step")`) {
		t.Errorf("the workflow refusal does not match the prelude's wording: %s", sqlInWorkflow)
	}
}

func TestSQLParseArray(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want any
	}{
		{`{}`, []any{}},
		{`{1,2,NULL}`, []any{"1", "2", nil}},
		{`{"a b","c\"d","NULL", x }`, []any{"a b", `c"d`, "NULL", "x"}},
		{`{{1,2},{3,4}}`, []any{[]any{"1", "2"}, []any{"3", "4"}}},
		{`[0:1]={7,8}`, []any{"7", "8"}},
	} {
		got, err := sqlParseArray(tt.in, ',')
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("sqlParseArray(%q) = %#v, %v; want %#v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`{1,2`, `{"a`, `1,2}`, `{1}x`, `[1:2]{1}`} {
		if _, err := sqlParseArray(bad, ','); err == nil {
			t.Errorf("sqlParseArray(%q) accepted", bad)
		}
	}
}

// TestSQLTypesCheck runs tsc --strict over steps using sql's types.
func TestSQLTypesCheck(t *testing.T) {
	dir := projectDir(t)
	writeFile(t, dir, "workflows/orders.workflow.ts", `import { sql, type PostgresError } from "svc";
async function load(id: number) {
  "use step";
  const rows = await sql<{ id: number }>`+"`"+`select 1 as id where ${id} > 0`+"`"+`;
  const n: number = rows.rowCount;
  const all = await sql.query("select 1", [1, "a", null, new Date(), new Uint8Array(1), { a: 1 }, [1, 2], 5n]);
  const total = await sql.begin(async (tx) => (await tx<{ n: string }>`+"`"+`select count(*) as n from orders`+"`"+`)[0].n);
  const e = {} as PostgresError;
  return rows[0].id.toFixed() + n + all.command + total.length + e.code;
}
export default async function orders() { "use workflow"; return await load(1); }`)
	if out, err := typecheck(t, dir); err != nil {
		t.Fatalf("tsc over sql: %v\n%s", err, out)
	}
}

// TestSQLEndToEnd runs a workflow whose step inserts and selects through a
// real svc dev, and refuses sql in the workflow function itself.
func TestSQLEndToEnd(t *testing.T) {
	dir := projectDir(t)
	dbURL := testPostgresURL(t)
	writeFile(t, dir, "workflows/ledger.workflow.ts", `import { sql } from "svc";
async function record(note: string) {
  "use step";
  await sql`+"`"+`create table if not exists ledger (id serial primary key, note text, at timestamptz default now())`+"`"+`;
  const [row] = await sql<{ id: number; note: string; at: Date }>`+"`"+`insert into ledger (note) values (${note}) returning *`+"`"+`;
  return { id: row.id, note: row.note, dated: row.at instanceof Date };
}
export default async function ledger(input: { note: string; direct?: boolean }) {
  "use workflow";
  if (input.direct) return await sql`+"`"+`select 1`+"`"+`;
  return await record(input.note);
}`)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+dbURL, "OPENAI_API_KEY=sk"))
	run := func(input string) runRecord {
		var rc startReceipt
		httpJSON(t, "POST", d.url("/api/workflows/ledger/start"), json.RawMessage(input), &rc)
		var got struct{ Run runRecord }
		httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID+"?wait=20s"), nil, &got)
		return got.Run
	}
	r := run(`{"note":"'); drop table ledger; --"}`)
	if r.Status != runCompleted || string(r.Output) != `{"id":1,"note":"'); drop table ledger; --","dated":true}` {
		t.Fatalf("run = %s %s %+v", r.Status, r.Output, r.Error)
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var note string
	if err := conn.QueryRow(context.Background(), `select note from ledger`).Scan(&note); err != nil || note != "'); drop table ledger; --" {
		t.Errorf("ledger = %q %v", note, err)
	}
	r = run(`{"note":"x","direct":true}`)
	if r.Status != runFailed || r.Error == nil || !strings.Contains(r.Error.Message, "sql cannot be used in workflow code") {
		t.Errorf("sql in the workflow function = %s %+v; want failed with the step guidance", r.Status, r.Error)
	}
}

// TestSQLAgentTool runs an agent tool that queries through sql, called by
// the scripted model.
func TestSQLAgentTool(t *testing.T) {
	e := newSQLTestEnv(t)
	e.exec(t, `create table orders (id text primary key, total numeric)`)
	e.exec(t, `insert into orders values ('o1', 12.50)`)
	cat := agentTestCompile(t, `import { defineAgent, tool, sql } from "svc";
export default defineAgent({
  model: "default-model",
  tools: {
    lookup: tool({
      description: "Look an order up",
      parameters: { type: "object", properties: { id: { type: "string" } }, required: ["id"] },
      execute: async ({ id }: { id: string }) => (await sql<{ total: string }>`+"`"+`select total from orders where id = ${id}`+"`"+`)[0],
    }),
  },
});
`)
	ag := cat.Agents["helper"]
	if ag == nil {
		t.Fatalf("agent not compiled: %v", cat.Failed)
	}
	h := agentTestHost(&agentScript{})
	h.platform = e.runner.platform
	res, _ := agentTestTurn(t, h, ag, &agentRequest{Agent: "helper", Messages: []chatMessage{{Role: "user", Content: `call lookup {"id":"o1"}`}}})
	if got := agentToolResults(res); len(got) != 1 || got[0].Content != `{"total":"12.50"}` || got[0].IsError {
		t.Errorf("tool results = %+v; want the order's exact total", got)
	}
}
