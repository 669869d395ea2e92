// Conformance of svc's MCP server (DESIGN §11) with the official clients:
// @modelcontextprotocol/sdk (v1, protocol 2025-11-25) and
// @modelcontextprotocol/client (v2: 2025-06-18 when asked, and the stateless
// 2026-07-28 when pinned), each over Streamable HTTP (POST /mcp of svc dev)
// and over stdio (`svc mcp` spawned in the project). Run by
// TestMCPConformance (mcp_test.go), which starts svc dev in front of the
// fake model provider in a project with the workflows and agent named here.
//
// Environment: SVC_URL (svc dev's API), SVC_BIN (the svc binary),
// SVC_PROJECT (the project directory svc dev serves).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as HTTPV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport as StdioV1 } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Client as ClientV2, StreamableHTTPClientTransport as HTTPV2 } from "@modelcontextprotocol/client";
import { StdioClientTransport as StdioV2 } from "@modelcontextprotocol/client/stdio";

const base = process.env.SVC_URL;
const bin = process.env.SVC_BIN;
const project = process.env.SVC_PROJECT;
const tools = ["list_workflows", "get_workflow_schema", "start_workflow", "get_run", "read_run_stream", "list_runs", "cancel_run", "list_schedules", "pause_schedule",
  "resume_schedule", "resume_hook", "message_agent"];

// transports builds a fresh transport of each kind for one client family.
const transports = (HTTP, Stdio) => ({
  http: () => new HTTP(new URL(base + "/mcp")),
  stdio: () => new Stdio({ command: bin, args: ["mcp"], cwd: project, stderr: "pipe" }),
});

// The client setups judged: family, version it must negotiate, and how.
const setups = [
  { name: "sdk v1 (2025-11-25)", version: "2025-11-25", make: () => new ClientV1({ name: "conformance", version: "1" }), ...transports(HTTPV1, StdioV1) },
  { name: "client v2 (2025-06-18)", version: "2025-06-18", make: () => new ClientV2({ name: "conformance", version: "2" }, { supportedProtocolVersions: ["2025-06-18"] }), ...transports(HTTPV2, StdioV2) },
  { name: "client v2 (2026-07-28 stateless)", version: "2026-07-28", make: () => new ClientV2({ name: "conformance", version: "2" }, { versionNegotiation: { mode: { pin: "2026-07-28" } } }), ...transports(HTTPV2, StdioV2) },
];

// call calls a tool and returns its parsed result: {error: text} for an
// isError result, else the structured content.
async function call(client, name, args = {}) {
  const res = await client.callTool({ name, arguments: args });
  assert.equal(res.content[0].type, "text");
  if (res.isError) return { error: res.content[0].text };
  assert.deepEqual(JSON.parse(res.content[0].text), res.structuredContent);
  return res.structuredContent;
}

// waitForHook polls get_run until the run shows its hook step (bounded).
async function waitForHook(client, runId) {
  for (let i = 0; i < 100; i++) {
    const { run } = await call(client, "get_run", { runId });
    const hook = run.steps.find((s) => s.kind === "hook" && s.token);
    if (hook) return hook.token;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("no hook step within 10 s");
}

for (const setup of setups) {
  for (const kind of ["http", "stdio"]) {
    test(`${setup.name} over ${kind}`, async (t) => {
      const client = setup.make();
      await client.connect(setup[kind]());
      t.after(() => client.close());
      const label = `${kind}-${setup.version}`;
      if (client.getNegotiatedProtocolVersion) assert.equal(client.getNegotiatedProtocolVersion(), setup.version);
      assert.equal(client.getServerVersion()?.name ?? "svc", "svc");

      await t.test("tools/list: every tool with an object input schema", async () => {
        const { tools: listed } = await client.listTools();
        assert.deepEqual(listed.map((x) => x.name), tools);
        for (const tl of listed) assert.equal(tl.inputSchema.type, "object");
      });

      if (setup.version === "2026-07-28") {
        await t.test("server/discover (the stateless revision has no ping)", async () => {
          const d = await client.discover();
          assert.deepEqual(d.supportedVersions, ["2026-07-28", "2025-11-25", "2025-06-18"]);
          assert.equal(client.getProtocolEra(), "modern");
        });
      } else {
        await t.test("ping", async () => { await client.ping(); });
      }

      await t.test("list_workflows and get_workflow_schema", async () => {
        const list = await call(client, "list_workflows");
        for (const wf of ["greet", "waiter", "sleepy"]) assert.ok(list.workflows.some((w) => w.name === wf), wf);
        assert.ok(list.agents.includes("helper"));
        const schema = await call(client, "get_workflow_schema", { name: "greet" });
        assert.deepEqual(schema.input.required, ["name"]);
        const missing = await call(client, "get_workflow_schema", { name: "nope" });
        assert.match(missing.error, /workflow_not_found/);
      });

      await t.test("start_workflow returns the receipt; get_run waits for the end", async () => {
        const rc = await call(client, "start_workflow", { name: "greet", input: { name: label } });
        assert.equal(rc.status, "started");
        assert.ok(rc.runId);
        const { run, terminal } = await call(client, "get_run", { runId: rc.runId, waitSeconds: 20 });
        assert.ok(terminal);
        assert.equal(run.status, "completed");
        assert.equal(run.output.greeting, `Hello, ${label}!`);
      });

      await t.test("tool errors are isError results with a useful message", async () => {
        const bad = await call(client, "start_workflow", { name: "greet", input: { name: "" } });
        assert.match(bad.error, /schema_validation/);
        assert.match(bad.error, /\/name/);
        assert.match((await call(client, "start_workflow", { name: "nope" })).error, /workflow_not_found/);
        assert.match((await call(client, "get_run", { runId: "no-such-run" })).error, /run_not_found/);
        assert.match((await call(client, "get_run", { runId: "x", waitSeconds: 60 })).error, /waitSeconds/);
        assert.match((await call(client, "get_run", {})).error, /runId/);
        assert.match((await call(client, "list_runs", { status: ["bogus"] })).error, /status/);
        assert.match((await call(client, "message_agent", { agent: "nope", message: "hi" })).error, /does not exist/);
      });

      await t.test("unknown tools are JSON-RPC errors", async () => {
        await assert.rejects(client.callTool({ name: "no_such_tool", arguments: {} }), (err) => err.code === -32602 && /unknown tool/.test(err.message));
      });

      await t.test("resume_hook resumes a waiting run", async () => {
        const rc = await call(client, "start_workflow", { name: "waiter", input: {} });
        const token = await waitForHook(client, rc.runId);
        const resumed = await call(client, "resume_hook", { token, payload: { from: label } });
        assert.equal(resumed.runId, rc.runId);
        const { run } = await call(client, "get_run", { runId: rc.runId, waitSeconds: 20 });
        assert.equal(run.status, "completed");
        assert.deepEqual(run.output, { got: { from: label } });
        assert.match((await call(client, "resume_hook", { token, payload: 1 })).error, /hook_used/);
      });

      await t.test("list_runs filters and pages; cancel_run cancels", async () => {
        const rc = await call(client, "start_workflow", { name: "sleepy" });
        const cancelled = await call(client, "cancel_run", { runId: rc.runId });
        assert.equal(cancelled.run.runId, rc.runId);
        const { run } = await call(client, "get_run", { runId: rc.runId, waitSeconds: 20 });
        assert.equal(run.status, "cancelled");
        assert.match((await call(client, "cancel_run", { runId: rc.runId })).error, /run_ended/);
        const page = await call(client, "list_runs", { workflow: "sleepy", status: ["cancelled"], limit: 1 });
        assert.equal(page.runs.length, 1);
        assert.equal(page.runs[0].workflowName, "sleepy");
        const greets = await call(client, "list_runs", { workflow: "greet", limit: 1 });
        assert.equal(greets.runs.length, 1);
        if (greets.nextCursor) {
          const next = await call(client, "list_runs", { workflow: "greet", limit: 1, cursor: greets.nextCursor });
          assert.notEqual(next.runs[0]?.runId, greets.runs[0].runId);
        }
      });

      await t.test("message_agent: a turn, and a durable session with an approval", async () => {
        const once = await call(client, "message_agent", { agent: "helper", message: "hello " + label });
        assert.equal(once.text, "echo: hello " + label);
        const session = "mcp-" + label;
        const ask = await call(client, "message_agent", { agent: "helper", session, message: 'call refund {"orderId":"o-1"}' });
        assert.equal(ask.pendingToolCalls.length, 1);
        assert.equal(ask.pendingToolCalls[0].kind, "approval");
        const done = await call(client, "message_agent", { agent: "helper", session, approvals: [{ toolCallId: ask.pendingToolCalls[0].id, approved: true }] });
        assert.match(done.text, /tool refund said: .*o-1/);
        assert.deepEqual(done.pendingToolCalls, []);
      });
    });
  }
}

test("raw HTTP: transport errors and the Origin check", async () => {
  const post = (body, headers = {}) => fetch(base + "/mcp", { method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers }, body });
  let res = await post("{bad");
  assert.equal(res.status, 400);
  assert.equal((await res.json()).error.code, -32700);
  res = await post("[]");
  assert.equal((await res.json()).error.code, -32600);
  res = await post(JSON.stringify({ jsonrpc: "1.0", id: 1, method: "ping" }));
  assert.equal((await res.json()).error.code, -32600);
  res = await post(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "resources/list" }));
  assert.equal(res.status, 200, "an unknown method of a 2025 revision is a JSON-RPC error only");
  assert.equal((await res.json()).error.code, -32601);
  // 2026-07-28: the request metadata headers are required and must match
  // the body (400, -32020); an unknown method is a 404.
  const meta = { "io.modelcontextprotocol/protocolVersion": "2026-07-28" };
  const modern = { "mcp-protocol-version": "2026-07-28" };
  const start = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "start_workflow", arguments: { name: "greet", input: { name: "x" } }, _meta: meta } });
  for (const [label, headers, missing] of [
    ["wrong Mcp-Method", { ...modern, "mcp-method": "tools/list", "mcp-name": "start_workflow" }, /Mcp-Method/],
    ["no Mcp-Method", { ...modern, "mcp-name": "start_workflow" }, /Mcp-Method/],
    ["no Mcp-Name", { ...modern, "mcp-method": "tools/call" }, /Mcp-Name/],
    ["wrong Mcp-Name", { ...modern, "mcp-method": "tools/call", "mcp-name": "list_runs" }, /Mcp-Name/],
    ["no MCP-Protocol-Version", { "mcp-method": "tools/call", "mcp-name": "start_workflow" }, /MCP-Protocol-Version/],
  ]) {
    res = await post(start, headers);
    assert.equal(res.status, 400, label);
    const body = await res.json();
    assert.equal(body.error.code, -32020, label);
    assert.match(body.error.message, missing, label);
  }
  res = await post(start, { ...modern, "mcp-method": "tools/call", "mcp-name": "=?base64?c3RhcnRfd29ya2Zsb3c=?=" });
  assert.equal(res.status, 200, "Mcp-Name in the Base64 sentinel form is decoded");
  res = await post(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "resources/list", params: { _meta: meta } }), { ...modern, "mcp-method": "resources/list" });
  assert.equal(res.status, 404);
  assert.equal((await res.json()).error.code, -32601);
  res = await post(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }));
  assert.equal(res.status, 202);
  res = await post(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping", params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2099-01-01" } } }));
  const unsupported = await res.json();
  assert.equal(unsupported.error.code, -32022);
  assert.ok(unsupported.error.data.supported.includes("2026-07-28"));
  res = await post(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping", params: { _meta: { "io.modelcontextprotocol/protocolVersion": "2026-07-28" } } }), { "mcp-protocol-version": "2025-11-25" });
  assert.equal((await res.json()).error.code, -32020);
  res = await fetch(base + "/mcp");
  assert.equal(res.status, 405);
  res = await post(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }), { origin: "https://evil.example" });
  assert.equal(res.status, 403);
  res = await post(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }), { origin: new URL(base).origin });
  assert.equal(res.status, 200);
});
