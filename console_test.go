package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// consoleChromium is Debian's chromium, which the console tests drive
// through playwright-core (never a browser download).
const consoleChromium = "/usr/bin/chromium"

// TestConsoleHandler checks the embedded files: index.html at / with the
// API base, the modules and stylesheet with their types, revalidation by
// ETag, the policy headers, and 404 for anything else.
func TestConsoleHandler(t *testing.T) {
	h := consoleHandler("https://box.example.com/x")
	get := func(path, etag string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", path, nil)
		if etag != "" {
			r.Header.Set("If-None-Match", etag)
		}
		w := httptest.NewRecorder()
		h(w, r)
		return w
	}
	index := get("/", "")
	if index.Code != 200 || !strings.HasPrefix(index.Header().Get("Content-Type"), "text/html") ||
		!strings.Contains(index.Body.String(), `content="https://box.example.com/x"`) || strings.Contains(index.Body.String(), consoleAPIBaseMark) {
		t.Fatalf("GET / = %d %q\n%s", index.Code, index.Header().Get("Content-Type"), index.Body)
	}
	csp := index.Header().Get("Content-Security-Policy")
	if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self' https://box.example.com") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP = %q", csp)
	}
	for path, typ := range map[string]string{"/console/app.js": "text/javascript", "/console/schemaform.js": "text/javascript", "/console/style.css": "text/css"} {
		w := get(path, "")
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), typ) || w.Body.Len() == 0 {
			t.Errorf("GET %s = %d %q (%d bytes); want 200 %s", path, w.Code, w.Header().Get("Content-Type"), w.Body.Len(), typ)
		}
		if again := get(path, w.Header().Get("ETag")); again.Code != http.StatusNotModified {
			t.Errorf("GET %s with its ETag = %d; want 304", path, again.Code)
		}
	}
	for _, path := range []string{"/console/", "/console/nope.js", "/index.html", "/app.js", "/console/../console.go"} {
		if w := get(path, ""); w.Code != 404 {
			t.Errorf("GET %s = %d; want 404", path, w.Code)
		}
	}
	if csp := consoleCSP(""); !strings.Contains(csp, "connect-src 'self';") {
		t.Errorf("CSP of the local console = %q; want connect-src 'self' alone", csp)
	}
}

// TestConsoleInChromium drives the console in headless Chromium against a
// real svc dev (conformance/console.test.mjs): the workflows list, the
// playground's form and JSON editor in both directions, a start to a
// completed timeline, a schema violation, prefill from a run, a schema
// with nested objects, arrays, an enum, a union and an optional field,
// cancelling a sleeping run, resuming a hook, the runs filters, the chat
// with the agent tests' helper (a streamed answer, a tool call, an approval)
// against the fake model provider, the chat after a reload (the thread read
// back from its session, a pending approval approved), the chat and runs of
// a second svc dev whose boot gate is closed (the chat says so and links to
// Settings; no page shows a stray null), the local services
// with their keys revealed by one request on a click, and the settings
// form; then the chat under hostile model output
// (conformance/console_hostile.test.mjs). Screenshots go to
// conformance/artifacts/.
func TestConsoleInChromium(t *testing.T) {
	if _, err := os.Stat(consoleChromium); err != nil {
		t.Fatalf("console tests need Debian's chromium at %s (apt-get install -y chromium; .ci/run installs it): %v", consoleChromium, err)
	}
	dir := projectDir(t)
	writeFile(t, dir, "workflows/waiter.workflow.ts", `import { sleep } from "svc";
export default async function waiter() { "use workflow"; await sleep("1h"); return "woke"; }`)
	writeFile(t, dir, "workflows/hooked.workflow.ts", `import { createHook } from "svc";
export default async function hooked() {
  "use workflow";
  const h = createHook();
  console.log("waiting for the hook");
  return await h;
}`)
	writeFile(t, dir, "workflows/streamer.workflow.ts", `import { createHook, getWritable } from "svc";
async function say(v: any) { "use step"; const w = getWritable().getWriter(); await w.write(v); w.releaseLock(); }
export default async function streamer() {
  "use workflow";
  await say("thinking…");
  const p: any = await createHook();
  await say({ answer: p.answer });
  return "done";
}`)
	writeFile(t, dir, "workflows/nightly.workflow.ts", `export const schedule = { cron: "0 3 * * *", timezone: "Europe/Paris" };
export default async function nightly() { "use workflow"; return 1; }`)
	writeFile(t, dir, "workflows/shapes.workflow.ts", `export const inputSchema = {
  type: "object",
  properties: {
    user: { type: "object", properties: { first: { type: "string" }, age: { type: "integer", minimum: 0 } }, required: ["first"] },
    tags: { type: "array", items: { type: "string" } },
    color: { enum: ["red", "green", "blue"] },
    contact: { anyOf: [
      { title: "email", type: "object", properties: { email: { type: "string" } }, required: ["email"], additionalProperties: false },
      { title: "phone", type: "object", properties: { phone: { type: "string" } }, required: ["phone"], additionalProperties: false },
    ] },
    note: { type: "string" },
  },
  required: ["user", "tags", "color", "contact"],
  additionalProperties: false,
} as const;
export default async function shapes(input: unknown) { "use workflow"; return input; }`)
	writeFile(t, dir, "workflows/timeline.workflow.ts", `import { sleep, workflows } from "svc";
async function fetchOrder(id: string) { "use step"; console.log("fetched", id); return { id }; }
async function flaky() { "use step"; throw new Error("carrier timeout"); }
async function importBatch(i: number) { "use step"; return i; }
export default async function timeline() {
  "use workflow";
  await fetchOrder("ord_1");
  try { await flaky(); } catch {}
  await sleep("300ms");
  for (let i = 0; i < 200; i++) await importBatch(i);
  await workflows.startAndWait("greet", { name: "child" });
  return "done";
}`)
	writeFile(t, dir, "workflows/broken.workflow.ts", `import { FatalError } from "svc";
async function charge() { "use step"; throw new FatalError("card declined"); }
export default async function broken() { "use workflow"; await charge(); }`)
	writeFile(t, dir, "workflows/many.workflow.ts", `async function pick(i: number) { "use step"; return i; }
export default async function many() { "use workflow"; let n = 0; for (let i = 0; i < 40; i++) n += await pick(i); return n; }`)
	writeFile(t, dir, "workflows/logger.workflow.ts", `async function pack(n: number) { "use step"; console.log("packing parcel", n); console.warn("low on tape"); return n; }
export default async function logger() { "use workflow"; console.log("order received"); return await pack(3); }`)
	writeFile(t, dir, "workflows/ticker.workflow.ts", `import { sleep } from "svc";
async function tick(i: number) { "use step"; return i; }
export default async function ticker() { "use workflow"; for (let i = 0; i < 8; i++) { await tick(i); await sleep("500ms"); } return 1; }`)
	writeFile(t, dir, "workflows/talker.workflow.ts", `import { getWritable } from "svc";
async function speak() { "use step"; const w = getWritable().getWriter(); for (const t of ["Hel", "lo, ", "wor", "ld", "!"]) await w.write(t); await w.write({ done: true }); w.releaseLock(); }
export default async function talker() { "use workflow"; await speak(); return 1; }`)
	writeFile(t, dir, "deep-agents/helper/index.ts", agentTestSource)
	fake := newFakeProvider(t)
	d := startDev(t, dir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t), "OPENAI_BASE_URL="+fake.URL+"/v1", "OPENAI_API_KEY=sk-fake"))
	artifacts, err := filepath.Abs(filepath.Join("conformance", "artifacts", t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(artifacts)
	link := consoleLink(t, dir)
	gatedDir := projectDir(t)
	writeFile(t, gatedDir, "deep-agents/helper/index.ts", agentTestSource)
	gated := startDev(t, gatedDir, baseEnv("SVC_DATABASE_URL="+testPostgresURL(t)))
	devKey, err := os.ReadFile(filepath.Join(dir, ".svc", devAPIKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	runConformance(t, "conformance/console.test.mjs", []string{"SVC_URL=" + d.payload.EmulatorURL, "SVC_CONSOLE_LINK=" + link, "SVC_DEV_KEY=" + strings.TrimSpace(string(devKey)),
		"SVC_GATED_URL=" + gated.payload.EmulatorURL, "SVC_ARTIFACTS=" + artifacts})
	runConformance(t, "conformance/console_hostile.test.mjs", []string{"SVC_URL=" + d.payload.EmulatorURL, "SVC_ARTIFACTS=" + artifacts})
	runConformance(t, "conformance/console_a11y.test.mjs", []string{"SVC_URL=" + d.payload.EmulatorURL, "SVC_ARTIFACTS=" + artifacts})
	runConformance(t, "conformance/console_waterfall.test.mjs", []string{"SVC_URL=" + d.payload.EmulatorURL, "SVC_ARTIFACTS=" + artifacts})
	// Last: it edits the project's code.
	runConformance(t, "conformance/console_actions.test.mjs", []string{"SVC_URL=" + d.payload.EmulatorURL, "SVC_PROJECT=" + dir, "SVC_ARTIFACTS=" + artifacts})
}

// consoleLink is a new console link of the svc dev serving dir, as
// `svc console --json` prints it.
func consoleLink(t *testing.T, dir string) string {
	t.Helper()
	out, stderr, code := cli(t, dir, baseEnv(), "--json", "console")
	var link struct {
		Data devConsoleLinkOutput `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &link); code != 0 || err != nil || !strings.Contains(link.Data.URL, "/#code=") {
		t.Fatalf("svc console = exit %d %s %s; want a link with a code", code, out, stderr)
	}
	return link.Data.URL
}
