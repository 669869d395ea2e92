package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// typegenSample adds workflows whose schemas exercise the generator, and
// code that uses the typed client and every ambient export.
var typegenSample = map[string]string{
	"workflows/order.workflow.ts": `
import { sleep, workflows, createHook, FatalError } from "svc";
export const inputSchema = {
  type: "object",
  properties: {
    id: { type: "string", format: "uuid" },
    qty: { type: "integer", minimum: 1 },
    kind: { enum: ["a", "b"] },
    note: { type: ["string", "null"] },
    pair: { type: "array", prefixItems: [{ type: "string" }, { type: "number" }] },
    tags: { type: "array", items: { $ref: "#/$defs/tag" } },
  },
  required: ["id", "qty"],
  additionalProperties: false,
  $defs: { tag: { type: "object", properties: { name: { type: "string" } }, required: ["name"] } },
} as const;
export const outputSchema = { anyOf: [{ type: "object", properties: { ok: { const: true } } }, { type: "null" }] } as const;
async function check(id: string) { "use step"; if (!id) throw new FatalError("no id"); return id.length; }
export default async function order(input: { id: string; qty: number }) {
  "use workflow";
  await check(input.id);
  await sleep("1s");
  const hook = createHook<{ approved: boolean }>();
  const answer = await hook;
  const greeting = await workflows.startAndWait("greet", { name: "Ada" });
  const r = await workflows.start("ping", {});
  return answer.approved && greeting.greeting.length > 0 && r.status === "started" ? { ok: true as const } : null;
}`,
	"workflows/nightly.workflow.ts": `
import type { Schedule } from "svc";
export const schedule: Schedule = { cron: "0 3 * * *", timezone: "Europe/Paris", overlap: "queue", catchUp: "none", dst: "skip" };
export default async function nightly() { "use workflow"; return 1; }`,
	"svc.config.ts": `
import { defineConfig } from "svc";
export default defineConfig({ workflows: { order: { serial: true } } });`,
}

// tscPath returns the TypeScript compiler installed under conformance/.
func tscPath(t *testing.T) string {
	conformanceEnsureModules(t)
	p, err := filepath.Abs("conformance/node_modules/.bin/tsc")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// typecheck generates the project's types and runs tsc --noEmit --strict.
func typecheck(t *testing.T, dir string) (string, error) {
	t.Helper()
	cat, cerr := compileCatalog(dir, discardLogger())
	if cerr != nil || len(cat.Failed) > 0 {
		t.Fatalf("compile: %v %v", cerr, cat.Failed)
	}
	if err := writeTypes(filepath.Join(dir, ".svc"), cat); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tscPath(t), "--noEmit", "--strict", "-p", filepath.Join(dir, "tsconfig.json"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestTypegenPassesTSCStrict(t *testing.T) {
	dir := projectDir(t)
	if out, err := typecheck(t, dir); err != nil {
		t.Fatalf("tsc over the scaffold: %v\n%s", err, out)
	}
	for f, src := range typegenSample {
		writeFile(t, dir, f, src)
	}
	if out, err := typecheck(t, dir); err != nil {
		wf, _ := os.ReadFile(filepath.Join(dir, ".svc", "workflows.d.ts"))
		t.Fatalf("tsc over the sample: %v\n%s\nworkflows.d.ts:\n%s", err, out, wf)
	}
	agents, _ := os.ReadFile(filepath.Join(dir, ".svc", "agents.d.ts"))
	if !strings.Contains(string(agents), `"assistant"`) {
		t.Errorf("agents.d.ts lacks the agent name:\n%s", agents)
	}
}

func TestTypegenRejectsWrongNameAndInput(t *testing.T) {
	dir := projectDir(t)
	for _, tt := range []struct{ name, call, want string }{
		{"unknown workflow", `await workflows.startAndWait("nope", {});`, "nope"},
		{"wrong input type", `await workflows.start("greet", { name: 42 });`, "number"},
		{"missing required input", `await workflows.start("greet", {});`, "name"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, dir, "workflows/bad.workflow.ts", `import { workflows } from "svc";
export default async function bad() {
  "use workflow";
  `+tt.call+`
}`)
			out, err := typecheck(t, dir)
			if err == nil || !strings.Contains(out, "bad.workflow.ts") || !strings.Contains(out, tt.want) {
				t.Fatalf("tsc accepted %s (err %v):\n%s", tt.call, err, out)
			}
		})
	}
}

func TestGenerateTypesShapes(t *testing.T) {
	cat := &catalog{Workflows: map[string]*workflowDef{
		"a-b": {Name: "a-b", InputSchema: []byte(`{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}`)},
		"c":   {Name: "c"},
	}, Agents: map[string]*agentDef{}}
	files, err := generateTypes(cat)
	if err != nil {
		t.Fatal(err)
	}
	wf := files["workflows.d.ts"]
	for _, want := range []string{`"a-b": { input: W0Input; output: unknown };`, `"c": { input: unknown; output: unknown };`, "x: string"} {
		if !strings.Contains(wf, want) {
			t.Errorf("workflows.d.ts lacks %q:\n%s", want, wf)
		}
	}
	if !strings.Contains(files["agents.d.ts"], "never") {
		t.Errorf("agents.d.ts without agents = %s; want never", files["agents.d.ts"])
	}
}
