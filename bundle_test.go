package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dop251/goja"
)

// bundleTestRun bundles rel in dir, evaluates it and returns the settled
// value of its exported run() (which must settle without I/O).
func bundleTestRun(t *testing.T, dir, rel string) any {
	t.Helper()
	m, err := bundleModule(dir, rel)
	if err != nil {
		t.Fatalf("bundle %s: %v", rel, err)
	}
	_, exports, err := newModuleVM(m, vmOptions{Log: discardLogger()})
	if err != nil {
		t.Fatalf("evaluate %s: %v", rel, err)
	}
	run, ok := goja.AssertFunction(exports.Get("run"))
	if !ok {
		t.Fatalf("%s exports no run()", rel)
	}
	v, err := run(goja.Undefined())
	if err != nil {
		t.Fatalf("run(): %v", err)
	}
	if p, ok := v.Export().(*goja.Promise); ok {
		if p.State() != goja.PromiseStateFulfilled {
			t.Fatalf("run() did not fulfil: %v %v", p.State(), p.Result())
		}
		return p.Result().Export()
	}
	return v.Export()
}

// bundleTestCompileError bundles rel in dir and returns its *compileError.
func bundleTestCompileError(t *testing.T, dir, rel string) *compileError {
	t.Helper()
	_, err := bundleModule(dir, rel)
	var ce *compileError
	if !errors.As(err, &ce) {
		t.Fatalf("bundle %s = %v; want a *compileError", rel, err)
	}
	return ce
}

// TestBundlePackageResolution: packages resolve to their worker build over
// node's, to "module" over "main", and a package with only "main" (CommonJS)
// works; newer syntax is lowered or kept as goja runs it.
func TestBundlePackageResolution(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "node_modules/cond/package.json", `{"name":"cond","exports":{".":{"node":"./node.js","worker":"./worker.mjs","default":"./default.mjs"}}}`)
	writeFile(t, dir, "node_modules/cond/node.js", `const fs = require("fs"); module.exports = { build: "node" };`)
	writeFile(t, dir, "node_modules/cond/worker.mjs", `export const build = "worker";`)
	writeFile(t, dir, "node_modules/cond/default.mjs", `export const build = "default";`)
	writeFile(t, dir, "node_modules/fields/package.json", `{"name":"fields","main":"./main.js","module":"./esm.mjs"}`)
	writeFile(t, dir, "node_modules/fields/main.js", `exports.build = "main";`)
	writeFile(t, dir, "node_modules/fields/esm.mjs", `export const build = "module";`)
	writeFile(t, dir, "node_modules/legacy/package.json", `{"name":"legacy","main":"lib/index.js"}`)
	writeFile(t, dir, "node_modules/legacy/lib/index.js", `module.exports = function legacy(x) { return x * 2; };`)
	writeFile(t, dir, "node_modules/modern/package.json", `{"name":"modern","type":"module","exports":"./index.js"}`)
	writeFile(t, dir, "node_modules/modern/index.js", `
export class Counter { #n = 0n; static zero = 0; inc() { this.#n += 1n; return this; } get value() { return this.#n; } }
export async function* pairs(o) { for (const [k, v] of Object.entries(o ?? {})) yield k + "=" + v; }`)
	writeFile(t, dir, "workflows/uses.workflow.ts", `
import { build as cond } from "cond";
import { build as fields } from "fields";
import legacy from "legacy";
import { Counter, pairs } from "modern";
export async function run() {
  const out: string[] = [];
  for await (const p of pairs({ a: 1, b: 2 })) out.push(p);
  return [cond, fields, legacy(21), String(new Counter().inc().inc().value), out.join("&")].join(" ");
}`)
	if got, want := bundleTestRun(t, dir, "workflows/uses.workflow.ts"), "worker module 42 2 a=1&b=2"; got != want {
		t.Errorf("run() = %v; want %q", got, want)
	}
}

// TestBundleAsyncIterator: a class defining [Symbol.asyncIterator] itself,
// as the openai package's streams do, is iterated by for await.
func TestBundleAsyncIterator(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "workflows/it.workflow.ts", `
class Stream { async *[Symbol.asyncIterator]() { yield 1; yield 2; yield 3; } }
export async function run() { let sum = 0; for await (const x of new Stream()) sum += x; return sum; }`)
	if got := bundleTestRun(t, dir, "workflows/it.workflow.ts"); got != int64(6) {
		t.Errorf("run() = %v (%T); want 6", got, got)
	}
}

// TestBundleLoopHelpers: esbuild's export helpers are rewritten to loop
// by index (bundleLoopHelpers), and a module's exports are what they were:
// every name, each getter reading its own binding (live), re-exports
// (export * from) and a CommonJS package imported as ESM included.
func TestBundleLoopHelpers(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "node_modules/legacy/package.json", `{"name":"legacy","main":"index.js"}`)
	writeFile(t, dir, "node_modules/legacy/index.js", `exports.a = "la"; exports.b = "lb";`)
	writeFile(t, dir, "workflows/lib.ts", `export const x = "x"; export const y = "y";`)
	writeFile(t, dir, "workflows/ex.workflow.ts", `
import * as legacy from "legacy";
export * from "./lib";
export let counter = 0;
export const one = "one", two = "two";
export function bump() { counter++; }
export default function run() { return legacy.a + legacy.b; }`)
	m, err := bundleModule(dir, "workflows/ex.workflow.ts")
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"for (var name in all)", "for (let key of __getOwnPropNames(from))"} {
		if strings.Contains(m.Source, gone) {
			t.Errorf("the bundle still has %q:\n%s", gone, m.Source)
		}
	}
	vm, exports, err := newModuleVM(m, vmOptions{Log: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	v, err := vm.RunString(`(() => { const e = module.exports; const before = e.counter; e.bump(); e.bump();
		return [Object.keys(e).sort().join(","), e.x, e.y, e.one, e.two, before, e.counter, e.default()].join(" "); })()`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := v.String(), "bump,counter,default,one,two,x,y x y one two 0 2 lalb"; got != want {
		t.Errorf("exports: %q; want %q", got, want)
	}
	if exports.Get("one").String() != "one" {
		t.Errorf("exports.one = %v", exports.Get("one"))
	}
}

// TestBundleNodeBuiltins: importing a Node built-in, directly or through a
// package, fails to compile naming the built-in, the package file and the
// user's import; a require of one guarded by try/catch compiles and throws
// at run time, where the guard catches it.
func TestBundleNodeBuiltins(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "node_modules/needs-fs/package.json", `{"name":"needs-fs","main":"index.js"}`)
	writeFile(t, dir, "node_modules/needs-fs/index.js", "const helper = require(\"./lib/read\");\nmodule.exports = helper;\n")
	writeFile(t, dir, "node_modules/needs-fs/lib/read.js", "// reads files\nconst { readFileSync } = require(\"fs\");\nmodule.exports = (p) => readFileSync(p, \"utf8\");\n")
	writeFile(t, dir, "node_modules/optional-fs/package.json", `{"name":"optional-fs","main":"index.js"}`)
	writeFile(t, dir, "node_modules/optional-fs/index.js", `let fs = null; try { fs = require("fs"); } catch (e) { fs = String(e.message || e); } module.exports = fs;`)
	writeFile(t, dir, "src/read.ts", "import read from \"needs-fs\";\nexport { read };\n")
	tests := []struct {
		name, file, src string
		wantFile        string
		wantLine        int
		want            []string
	}{
		{"node: prefix", "workflows/direct.workflow.ts", "// direct\nimport { readFileSync } from \"node:fs\";\nexport const run = () => readFileSync;\n",
			"workflows/direct.workflow.ts", 2, []string{`imports the Node built-in "node:fs"`, "no Node built-ins"}},
		{"bare name", "workflows/net.workflow.ts", "import net from \"net\";\nexport const run = () => net;\n",
			"workflows/net.workflow.ts", 1, []string{`imports the Node built-in "net"`}},
		{"through a package", "workflows/pkg.workflow.ts", "import { read } from \"../src/read\";\nexport const run = () => read;\n",
			"src/read.ts", 1, []string{`"needs-fs" needs the Node built-in "fs"`, "node_modules/needs-fs/lib/read.js:2", "no Node built-ins"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeFile(t, dir, tt.file, tt.src)
			ce := bundleTestCompileError(t, dir, tt.file)
			t.Log(ce)
			if ce.File != tt.wantFile || ce.Line != tt.wantLine {
				t.Errorf("error at %s:%d; want %s:%d (%v)", ce.File, ce.Line, tt.wantFile, tt.wantLine, ce)
			}
			for _, w := range tt.want {
				if !strings.Contains(ce.Message, w) {
					t.Errorf("error %q lacks %q", ce.Message, w)
				}
			}
		})
	}
	t.Run("guarded require", func(t *testing.T) {
		writeFile(t, dir, "workflows/optional.workflow.ts", "import fs from \"optional-fs\";\nexport const run = () => fs;\n")
		if got, _ := bundleTestRun(t, dir, "workflows/optional.workflow.ts").(string); !strings.Contains(got, `cannot require "fs"`) {
			t.Errorf("run() = %q; want the guarded require to have thrown", got)
		}
	})
}

// TestBundleSchemaImport: user code imports src/schema.ts, whose
// drizzle-orm imports resolve to the built-in stand-in even when the project
// installed a drizzle-orm of its own; a name the stand-in lacks fails at the
// import, listing the names it has.
func TestBundleSchemaImport(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "node_modules/drizzle-orm/package.json", `{"name":"drizzle-orm","exports":{".":"./index.js","./pg-core":"./pg-core.js"}}`)
	writeFile(t, dir, "node_modules/drizzle-orm/index.js", `throw new Error("the installed drizzle-orm was bundled");`)
	writeFile(t, dir, "node_modules/drizzle-orm/pg-core.js", `throw new Error("the installed drizzle-orm was bundled");`)
	writeFile(t, dir, "src/schema.ts", `
import { sql } from "drizzle-orm";
import { pgTable, serial, text, integer, timestamp } from "drizzle-orm/pg-core";
export const orders = pgTable("orders", {
  id: serial("id").primaryKey(),
  item: text("item").notNull(),
  qty: integer("qty").notNull().default(1),
  placedAt: timestamp("placed_at").default(sql`+"`now()`"+`),
});`)
	writeFile(t, dir, "workflows/uses.workflow.ts", `
import { orders } from "../src/schema";
export function run() {
  const d = (orders as any).__svc_table();
  return d.name + ":" + d.columns.map((c: any) => c.name + "=" + c.default).join(",") + ":" + orders.qty.name;
}`)
	if got, want := bundleTestRun(t, dir, "workflows/uses.workflow.ts"), "orders:id=null,item=null,qty=1,placed_at=now():qty"; got != want {
		t.Errorf("run() = %v; want %q", got, want)
	}
	writeFile(t, dir, "workflows/enum.workflow.ts", "import { pgEnum } from \"drizzle-orm/pg-core\";\nexport const run = () => pgEnum;\n")
	ce := bundleTestCompileError(t, dir, "workflows/enum.workflow.ts")
	if ce.File != "workflows/enum.workflow.ts" || ce.Line != 1 || !strings.Contains(ce.Message, `"pgEnum" is not supported`) || !strings.Contains(ce.Message, "pgTable") {
		t.Errorf("error = %v; want workflows/enum.workflow.ts:1 naming pgEnum and the supported names", ce)
	}
}

// TestCompileCatalogIsolation: a workflow whose top-level code never ends
// and one that does not compile fail alone; the others compile.
func TestCompileCatalogIsolation(t *testing.T) {
	defer func(d time.Duration) { catalogEvalTimeout = d }(catalogEvalTimeout)
	catalogEvalTimeout = 200 * time.Millisecond
	dir := t.TempDir()
	writeFile(t, dir, "workflows/ok.workflow.ts", `export default async function ok() { "use workflow"; return 1; }`)
	writeFile(t, dir, "workflows/spin.workflow.ts", `while (true) {}
export default async function spin() { "use workflow"; }`)
	writeFile(t, dir, "workflows/fs.workflow.ts", `import { readFileSync } from "node:fs";
export default async function fs() { "use workflow"; return readFileSync("x"); }`)
	writeFile(t, dir, "deep-agents/helper/index.ts", agentTestSource)
	cat, cerr := compileCatalog(dir, discardLogger())
	if cerr != nil {
		t.Fatal(cerr)
	}
	if got := strings.Join(cat.workflowNames(), ","); got != "ok" || cat.Agents["helper"] == nil {
		t.Errorf("compiled workflows %q, agents %v; want ok and helper", got, cat.agentNames())
	}
	if ce := cat.Failed["spin"]; ce == nil || !strings.Contains(ce.Error(), "longer than") {
		t.Errorf("spin failed with %v; want the evaluation deadline", ce)
	}
	if ce := cat.Failed["fs"]; ce == nil || !strings.Contains(ce.Error(), "workflows/fs.workflow.ts:1:") || !strings.Contains(ce.Error(), `"node:fs"`) {
		t.Errorf("fs failed with %v; want file:line naming node:fs", ce)
	}
}
