package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// npmProjectDir is the committed test project whose node_modules `npm ci`
// installs on first use (npmEnsureModules): exact versions of zod and openai.
const npmProjectDir = "testdata/npmproject"

// npmTestProject scaffolds a project with files, npmProjectDir's package
// files and its node_modules (symlinked).
func npmTestProject(t testing.TB, files map[string]string) string {
	t.Helper()
	modules, err := filepath.Abs(filepath.Join(npmProjectDir, "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	npmEnsureModules(t, npmProjectDir)
	dir := projectDir(t)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(npmProjectDir, f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, dir, f, string(b))
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	for f, src := range files {
		writeFile(t, dir, f, src)
	}
	return dir
}

// npmTestStart starts workflow name with input on d and returns the run
// once it ended (or after a wait of 30 s).
func npmTestStart(t *testing.T, d *devProcess, name string, input any) runRecord {
	t.Helper()
	var rc startReceipt
	if st := httpJSON(t, "POST", d.url("/api/workflows/"+name+"/start"), input, &rc); st != 202 {
		t.Fatalf("start %s = %d; want 202\nstderr:\n%s", name, st, d.stderr.String())
	}
	var got struct{ Run runRecord }
	httpJSON(t, "GET", d.url("/api/runs/"+rc.RunID+"?wait=30s"), nil, &got)
	return got.Run
}

// npmZodWorkflows validate a step's input with zod, and import a Node
// built-in (which must not compile).
var npmZodWorkflows = map[string]string{
	"workflows/zodcheck.workflow.ts": `
import { FatalError } from "svc";
import { z } from "zod";
const Order = z.object({ item: z.string().min(1), qty: z.number().int().positive() });
async function validate(input: unknown) {
  "use step";
  const r = Order.safeParse(input);
  if (!r.success) throw new FatalError(z.prettifyError(r.error));
  return r.data;
}
export default async function zodcheck(input: unknown) {
  "use workflow";
  return await validate(input);
}
`,
	"workflows/readfile.workflow.ts": `import { readFileSync } from "node:fs";
export default async function readfile() {
  "use workflow";
  return readFileSync("/etc/hostname", "utf8");
}
`,
}

// TestNPMPackagesInDev: svc dev bundles zod from the project's node_modules
// into a step that validates its input (a bad input fails the step with
// zod's message), while a workflow importing node:fs fails to compile
// naming the import and the file and the others keep running.
func TestNPMPackagesInDev(t *testing.T) {
	dir := npmTestProject(t, npmZodWorkflows)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk-test"))
	if errs := d.stderr.String(); !strings.Contains(errs, "workflows/readfile.workflow.ts:1:") || !strings.Contains(errs, `node:fs`) {
		t.Errorf("the node:fs import is not reported with file:line:\n%s", errs)
	}
	var e struct{ Error apiError }
	if st := httpJSON(t, "POST", d.url("/api/workflows/readfile/start"), "{}", &e); st != 503 || e.Error.Code != "workflow_compile_failed" ||
		!strings.Contains(e.Error.Message, "readfile.workflow.ts:1") || !strings.Contains(e.Error.Message, `Node built-in "node:fs"`) {
		t.Errorf("start readfile = %d %+v; want 503 workflow_compile_failed naming the file and node:fs", st, e)
	}
	good := npmTestStart(t, d, "zodcheck", map[string]any{"item": "tea", "qty": 2})
	if good.Status != "completed" || string(good.Output) != `{"item":"tea","qty":2}` {
		t.Errorf("zodcheck with a good order = %s %s %+v; want completed with the order", good.Status, good.Output, good.Error)
	}
	bad := npmTestStart(t, d, "zodcheck", map[string]any{"item": "tea", "qty": "two"})
	if bad.Status != "failed" || bad.Error == nil || !strings.Contains(bad.Error.Message, "expected number") || !strings.Contains(bad.Error.Message, "qty") {
		t.Errorf("zodcheck with a bad order = %s %+v; want failed with zod's message about qty", bad.Status, bad.Error)
	}
}

// npmOpenAISources call the official openai package against the model
// provider svc dev was given (OPENAI_BASE_URL), whole and streamed, from a
// step and from an agent tool.
var npmOpenAISources = map[string]string{
	"src/ask.ts": `
import OpenAI from "openai";
export async function ask(prompt: string, stream: boolean): Promise<string> {
  const client = new OpenAI({ apiKey: process.env.OPENAI_API_KEY, baseURL: process.env.OPENAI_BASE_URL, maxRetries: 0, timeout: 20_000 });
  const messages = [{ role: "user" as const, content: prompt }];
  if (!stream) {
    const r = await client.chat.completions.create({ model: "test-model", messages });
    return r.choices[0].message.content ?? "";
  }
  const s = await client.chat.completions.create({ model: "test-model", messages, stream: true });
  let text = "";
  for await (const chunk of s) text += chunk.choices[0]?.delta?.content ?? "";
  return text;
}
`,
	"workflows/asker.workflow.ts": `
import { FatalError } from "svc";
import { ask } from "../src/ask";
async function askStep(prompt: string, stream: boolean) {
  "use step";
  try {
    return await ask(prompt, stream);
  } catch (e) {
    throw new FatalError(String(e));
  }
}
export default async function asker(input: { prompt: string }) {
  "use workflow";
  return { whole: await askStep(input.prompt, false), streamed: await askStep(input.prompt, true) };
}
`,
	"deep-agents/asker/index.ts": `
import { defineAgent, tool } from "svc";
import { ask } from "../../src/ask";
export default defineAgent({
  instructions: "Ask the model.",
  tools: {
    ask: tool({
      description: "Ask the model through the openai package",
      parameters: { type: "object", properties: { prompt: { type: "string" }, stream: { type: "boolean" } }, required: ["prompt", "stream"] },
      execute: async ({ prompt, stream }: { prompt: string; stream: boolean }) => ask(prompt, stream),
    }),
  },
});
`,
}

// TestNPMOpenAIPackage: the official openai package, bundled from
// node_modules, calls the fake provider from a step and from an agent tool,
// whole and streamed (fetch, Headers, URL, AbortController, streamed bodies).
func TestNPMOpenAIPackage(t *testing.T) {
	fake := newFakeProvider(t)
	dir := npmTestProject(t, npmOpenAISources)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk-fake", "OPENAI_BASE_URL="+fake.URL+"/v1"))
	run := npmTestStart(t, d, "asker", map[string]any{"prompt": "hello there"})
	if run.Status != "completed" || string(run.Output) != `{"whole":"echo: hello there","streamed":"echo: hello there"}` {
		t.Fatalf("asker = %s %s %+v; want both answers echoed", run.Status, run.Output, run.Error)
	}
	for _, stream := range []bool{false, true} {
		var out struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		body := map[string]any{"model": "asker", "stream": false, "messages": []any{map[string]any{"role": "user", "content": `call ask {"prompt":"hi","stream":` + map[bool]string{false: "false", true: "true"}[stream] + `}`}}}
		if st := httpJSONAuth(t, "POST", d.url("/openai/v1/chat/completions"), "sk-any", body, &out); st != 200 || len(out.Choices) != 1 || out.Choices[0].Message.Content != "tool ask said: echo: hi" {
			t.Errorf("agent with the tool streaming %v = %d %+v; want the tool's answer", stream, st, out)
		}
	}
	var asked int
	for _, r := range fake.requests() {
		if r.Body["model"] == "test-model" && r.Header.Get("Authorization") == "Bearer sk-fake" && strings.Contains(r.Header.Get("User-Agent"), "OpenAI/JS") {
			asked++
		}
	}
	if asked != 4 {
		b, _ := json.Marshal(fake.requests())
		t.Errorf("the openai package made %d requests; want 4 (step and tool, whole and streamed):\n%s", asked, b)
	}
}

// npmImportProbes is a workflow file importing packages that look for the
// web platform when they are imported: openai 4.x (which throws at import
// when fetch, Request, Response or Headers is missing), 5.x and 6.x, and
// ofetch (which captures globalThis.fetch, Headers and AbortController at
// import). Each client asks the fake provider from a step; the workflow
// itself sees the platform's globals, builds Headers and a Request, and gets
// the step guidance when it calls a client or fetch. An agent importing
// openai 4.x compiles too, its instructions reading the real clock.
var npmImportProbes = map[string]string{
	"deep-agents/dated/index.ts": `
import { defineAgent, tool } from "svc";
import OpenAI4 from "openai4";
export default defineAgent({
  instructions: "The year is " + new Date().getUTCFullYear() + "; openai4 is a " + typeof OpenAI4 + ".",
  tools: { noop: tool({ description: "Nothing", parameters: { type: "object" }, execute: () => "ok" }) },
});
`,
	"workflows/direct.workflow.ts": `
import OpenAI5 from "openai5";
import OpenAI6 from "openai";
export default async function direct(input: { v: 5 | 6 }) {
  "use workflow";
  const C = input.v === 5 ? OpenAI5 : OpenAI6;
  const c = new C({ apiKey: process.env.OPENAI_API_KEY, baseURL: process.env.OPENAI_BASE_URL, maxRetries: 0 });
  return await c.chat.completions.create({ model: "from-workflow", messages: [] });
}
`,
	"workflows/probes.workflow.ts": `
import OpenAI4 from "openai4";
import OpenAI5 from "openai5";
import OpenAI6 from "openai";
import { ofetch } from "ofetch";
const clients = { 4: OpenAI4, 5: OpenAI5, 6: OpenAI6 } as const;
function client(v: 4 | 5 | 6) {
  return new clients[v]({ apiKey: process.env.OPENAI_API_KEY, baseURL: process.env.OPENAI_BASE_URL, maxRetries: 0, timeout: 20_000 });
}
async function ask(v: 4 | 5 | 6, prompt: string) {
  "use step";
  const r = await client(v).chat.completions.create({ model: "test-model", messages: [{ role: "user", content: prompt }] });
  return r.choices[0].message.content;
}
async function askOfetch(prompt: string) {
  "use step";
  const r = await ofetch(process.env.OPENAI_BASE_URL + "/chat/completions", {
    method: "POST", headers: { Authorization: "Bearer " + process.env.OPENAI_API_KEY },
    body: { model: "test-model", messages: [{ role: "user", content: prompt }] },
  });
  return r.choices[0].message.content;
}
async function refused(f: () => Promise<unknown>) {
  try { await f(); return "no error"; } catch (e: any) { return String(e?.message) + " / " + String(e?.cause?.message); }
}
export default async function probes(input: { prompt: string }) {
  "use workflow";
  const globals = ["fetch", "Request", "Response", "Headers", "FormData", "Blob", "File", "ReadableStream", "AbortController", "TextEncoder", "URL"]
    .map((g) => g + ":" + typeof (globalThis as any)[g]).join(" ");
  const req = new Request("https://example.invalid/x", { method: "POST", headers: new Headers({ "X-A": "1" }), body: "hi" });
  const answers = [];
  for (const v of [4, 5, 6] as const) answers.push(await ask(v, input.prompt + " " + v));
  answers.push(await askOfetch(input.prompt + " ofetch"));
  return {
    globals, request: req.method + " " + req.headers.get("x-a"), answers,
    inWorkflow: {
      openai4: await refused(() => client(4).chat.completions.create({ model: "from-workflow", messages: [] })),
      openai6: await refused(() => client(6).chat.completions.create({ model: "from-workflow", messages: [] })),
      ofetch: await refused(() => ofetch("https://example.invalid/")),
      fetch: await refused(async () => fetch("https://example.invalid/")),
    },
  };
}
`,
}

// TestNPMImportTimePlatformProbes: a workflow file importing openai 4.x, 5.x
// and 6.x and ofetch compiles (openai 4.x used to fail it: "this environment
// is missing the following Web Fetch API type: fetch is not defined"), its
// steps call the provider through each, and from workflow code the clients
// and fetch fail with the step guidance while the pure globals work.
func TestNPMImportTimePlatformProbes(t *testing.T) {
	fake := newFakeProvider(t)
	dir := npmTestProject(t, npmImportProbes)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_API_KEY=sk-fake", "OPENAI_BASE_URL="+fake.URL+"/v1"))
	run := npmTestStart(t, d, "probes", map[string]any{"prompt": "hi"})
	if run.Status != "completed" {
		t.Fatalf("probes = %s %+v; want completed\nstderr:\n%s", run.Status, run.Error, d.stderr.String())
	}
	var out struct {
		Globals    string
		Request    string
		Answers    []string
		InWorkflow map[string]string
	}
	if err := json.Unmarshal(run.Output, &out); err != nil {
		t.Fatal(err)
	}
	wantGlobals := "fetch:function Request:function Response:function Headers:function FormData:function Blob:function File:function ReadableStream:function AbortController:function TextEncoder:function URL:function"
	if out.Globals != wantGlobals || out.Request != "POST 1" {
		t.Errorf("in workflow code: globals %q, request %q; want %q and %q", out.Globals, out.Request, wantGlobals, "POST 1")
	}
	if want := []string{"echo: hi 4", "echo: hi 5", "echo: hi 6", "echo: hi ofetch"}; !slices.Equal(out.Answers, want) {
		t.Errorf("answers from steps = %q; want %q", out.Answers, want)
	}
	// openai 5.x and 6.x start a setTimeout before they fetch, and report
	// the guidance's throw as their own "Request timed out.": that they
	// reject is what can be asserted of them.
	for name, msg := range out.InWorkflow {
		guided := strings.Contains(msg, "cannot be used in workflow code") && strings.Contains(msg, "step")
		if msg == "no error" || name != "openai6" && !guided {
			t.Errorf("%s called from workflow code: %q; want the step guidance", name, msg)
		}
	}
	if len(out.InWorkflow) != 4 {
		t.Errorf("calls from workflow code = %v; want 4", out.InWorkflow)
	}
	for _, r := range fake.requests() {
		if r.Body["model"] == "from-workflow" {
			t.Errorf("workflow code reached the provider: %s", r.Raw)
		}
	}
	// Called from workflow code and not caught, they fail the run with
	// their own error, and the run's error still says where the call
	// belongs.
	for _, v := range []int{5, 6} {
		run := npmTestStart(t, d, "direct", map[string]any{"v": v})
		if run.Status != "failed" || run.Error == nil || !strings.Contains(run.Error.Message, "cannot be used in workflow code") || !strings.Contains(run.Error.Message, "step") {
			t.Errorf("openai %d.x called from workflow code: run %s %+v; want failed naming the step guidance", v, run.Status, run.Error)
		}
	}
	var chat struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	body := map[string]any{"model": "dated", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	if st := httpJSONAuth(t, "POST", d.url("/openai/v1/chat/completions"), "sk-any", body, &chat); st != 200 || len(chat.Choices) != 1 {
		t.Fatalf("chat with the agent importing openai 4.x = %d %+v", st, chat)
	}
	reqs := fake.requests()
	sent, _ := json.Marshal(reqs[len(reqs)-1].Body["messages"])
	if want := fmt.Sprintf("The year is %d; openai4 is a function.", time.Now().UTC().Year()); !strings.Contains(string(sent), want) {
		t.Errorf("the agent's instructions sent %s; want %q", sent, want)
	}
}

// schemaSample is a table module (beside the scaffold's src/schema.ts,
// which its starter workflow imports, with sql and storage) and user code
// that imports it and types values with the tables' row types; the
// @ts-expect-error lines prove the types are strict (tsc fails on an
// unused one).
var schemaSample = map[string]string{
	"src/shop.ts": `
import { sql } from "drizzle-orm";
import { pgTable, serial, text, varchar, integer, bigint, boolean, timestamp, date, jsonb, uuid, numeric, index, uniqueIndex, primaryKey, foreignKey } from "drizzle-orm/pg-core";

export const customers = pgTable("customers", {
  id: uuid("id").primaryKey().defaultRandom(),
  email: varchar("email", { length: 320 }).notNull().unique(),
  tier: text("tier", { enum: ["free", "pro"] }).notNull().default("free"),
});

export const orders = pgTable(
  "orders",
  {
    id: serial("id").primaryKey(),
    customerId: uuid("customer_id").notNull().references(() => customers.id, { onDelete: "cascade" }),
    item: text("item").notNull(),
    qty: integer("qty").notNull().default(1),
    cents: bigint("cents", { mode: "bigint" }),
    total: numeric("total", { precision: 10, scale: 2 }),
    paid: boolean("paid").notNull().default(false),
    meta: jsonb("meta").$type<{ source: string }>(),
    placedAt: timestamp("placed_at", { withTimezone: true }).notNull().defaultNow(),
    due: date("due"),
  },
  (t) => [index("orders_item_idx").on(t.item, t.qty.desc()).where(sql` + "`${t.paid} = false`" + `), uniqueIndex().on(t.customerId, t.item)],
);

export const lines = pgTable("lines", (b) => ({
  orderId: b.integer().notNull(),
  n: b.smallint().notNull(),
}), (t) => ({ pk: primaryKey({ columns: [t.orderId, t.n] }), fk: foreignKey({ columns: [t.orderId], foreignColumns: [orders.id] }).onDelete("cascade") }));
`,
	"workflows/orders.workflow.ts": `
import type { InferSelectModel, InferInsertModel } from "drizzle-orm";
import { orders, customers, lines } from "../src/shop";

type Order = typeof orders.$inferSelect;
type NewOrder = typeof orders.$inferInsert;

async function describe(o: Order) {
  "use step";
  const when: Date = o.placedAt;
  const cents: string | null = o.cents; // int8 is read as an exact decimal string
  const source: string | undefined = o.meta?.source;
  const due: string | null = o.due;
  return o.item + " x" + o.qty + " " + when.toISOString() + (cents ?? "0") + (source ?? "") + (due ?? "") + o.total;
}

export default async function order(input: { order: Order }) {
  "use workflow";
  const fresh: NewOrder = { customerId: "c", item: "tea" };
  // @ts-expect-error item is required on insert
  const missing: NewOrder = { customerId: "c" };
  // @ts-expect-error qty is not null
  const nullQty: Order = { ...input.order, qty: null };
  const tier: InferSelectModel<typeof customers>["tier"] = "pro";
  // @ts-expect-error tier is one of the enum's strings
  const badTier: InferInsertModel<typeof customers>["tier"] = "gold";
  const line: typeof lines.$inferInsert = { orderId: 1, n: 2 };
  const column: string = orders.customerId.name;
  return [await describe(input.order), fresh.item, missing, nullQty, tier, badTier, line.n, column];
}
`,
}

// TestTypegenSchemaTypes: tsc --strict over the scaffold (whose starter
// workflow imports src/schema.ts and uses sql and storage) plus a table
// module and a workflow that imports it and uses its row types
// (.svc/drizzle.d.ts).
func TestTypegenSchemaTypes(t *testing.T) {
	dir := projectDir(t)
	for f, src := range schemaSample {
		writeFile(t, dir, f, src)
	}
	if out, err := typecheck(t, dir); err != nil {
		t.Fatalf("tsc over the schema sample: %v\n%s", err, out)
	}
}

// BenchmarkBundleOpenAIZod measures bundleModule (esbuild and goja's compile)
// of an entry that imports openai and zod from node_modules.
func BenchmarkBundleOpenAIZod(b *testing.B) {
	dir := npmTestProject(b, map[string]string{"workflows/both.workflow.ts": `
import OpenAI from "openai";
import { z } from "zod";
const Input = z.object({ prompt: z.string() });
async function ask(input: unknown) {
  "use step";
  const { prompt } = Input.parse(input);
  const r = await new OpenAI().chat.completions.create({ model: "m", messages: [{ role: "user", content: prompt }] });
  return r.choices[0].message.content;
}
export default async function both(input: unknown) { "use workflow"; return await ask(input); }
`})
	var size int
	for b.Loop() {
		m, err := bundleModule(dir, "workflows/both.workflow.ts")
		if err != nil {
			b.Fatal(err)
		}
		size = len(m.Source)
	}
	b.ReportMetric(float64(size)/(1<<20), "MiB-out")
}
