// Conformance of svc's messages wire with the official Anthropic SDK. Run
// by TestWiresConformance (conformance_wires_test.go); see openai.test.mjs
// for the fake provider's script and the environment.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import Anthropic from "@anthropic-ai/sdk";

const base = process.env.SVC_URL;
const phase = process.env.SVC_PHASE ?? "all";
const stateFile = join(process.env.SVC_STATE_DIR ?? ".", "anthropic.json");
const client = new Anthropic({ baseURL: `${base}/anthropic`, apiKey: "tok-anthropic", maxRetries: 0, timeout: 30_000 });
const session = (key) => ({ headers: { "x-svc-session": key } });
const user = (content) => ({ role: "user", content });
const pickColor = { name: "pick_color", description: "Ask the user for a color", input_schema: { type: "object", properties: { hint: { type: "string" } } } };
const ask = (messages, extra = {}) => ({ model: "helper", max_tokens: 256, messages, ...extra });

// phaseTest declares a test that runs only in the given phase.
const phaseTest = (only, name, fn) => test(name, { skip: phase !== only }, fn);

// textOf joins a message's text blocks.
const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

phaseTest("all", "answers whole", async () => {
  const m = await client.messages.create(ask([user("hello there")], { system: "Be brief." }));
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.equal(m.model, "helper");
  assert.equal(m.stop_reason, "end_turn");
  assert.equal(textOf(m), "echo: hello there");
  assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0);
});

phaseTest("all", "streams the message events", async () => {
  const names = [];
  let text = "";
  const stream = await client.messages.create(ask([user("stream me please")], { stream: true }));
  for await (const ev of stream) {
    names.push(ev.type);
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
  }
  assert.equal(text, "echo: stream me please");
  assert.equal(names[0], "message_start");
  assert.equal(names.at(-1), "message_stop");
  assert.ok(names.includes("content_block_start") && names.includes("content_block_stop") && names.includes("message_delta"));
  const final = await client.messages.stream(ask([user("helper stream")])).finalMessage();
  assert.equal(textOf(final), "echo: helper stream");
  assert.equal(final.stop_reason, "end_turn");
});

phaseTest("all", "runs a server-side tool", async () => {
  const m = await client.messages.create(ask([user('call add {"a":2,"b":3}')]));
  assert.match(textOf(m), /^tool add said: \{"sum":5/);
  assert.ok(m.content.every((b) => b.type === "text"));
});

phaseTest("all", "passes a client tool through as tool_use, whole and streamed", async () => {
  const m = await client.messages.create(ask([user('call pick_color {"hint":"warm"}')], { tools: [pickColor] }));
  assert.equal(m.stop_reason, "tool_use");
  const use = m.content.find((b) => b.type === "tool_use");
  assert.equal(use.name, "pick_color");
  assert.deepEqual(use.input, { hint: "warm" });
  const streamed = await client.messages.stream(ask([user('call pick_color {"hint":"cold"}')], { tools: [pickColor] })).finalMessage();
  assert.equal(streamed.stop_reason, "tool_use");
  assert.deepEqual(streamed.content.find((b) => b.type === "tool_use").input, { hint: "cold" });
  // Stateless: the client replays the history with its tool's result.
  const next = await client.messages.create(ask([
    user('call pick_color {"hint":"warm"}'),
    { role: "assistant", content: m.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "red" }] },
  ], { tools: [pickColor] }));
  assert.equal(textOf(next), "tool pick_color said: red");
});

phaseTest("all", "keeps a durable session server-side: the client sends only its newest turn", async () => {
  const key = randomUUID();
  const first = await client.messages.create(ask([user("call pick_color {}")], { tools: [pickColor] }), session(key));
  const use = first.content.find((b) => b.type === "tool_use");
  const second = await client.messages.create(ask([{ role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "blue" }] }]), session(key));
  assert.equal(textOf(second), "tool pick_color said: blue");
});

phaseTest("all", "approves and refuses a tool in a durable session", async () => {
  for (const approved of [true, false]) {
    const key = randomUUID();
    const m = await client.messages.stream(ask([user('call refund {"orderId":"a-1"}')]), session(key)).finalMessage();
    assert.equal(m.stop_reason, "tool_use");
    const use = m.content.find((b) => b.type === "tool_use");
    assert.equal(use.name, "refund");
    const answer = await client.messages.create(ask([{ role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: JSON.stringify({ approved }) }] }]), session(key));
    if (approved) assert.equal(textOf(answer), 'tool refund said: {"refunded":"a-1"}');
    else assert.match(textOf(answer), /refused/);
  }
});

phaseTest("all", "approves exactly the call it names when the model reuses a call id", async () => {
  const key = randomUUID();
  const m = await client.messages.create(ask([user('call refund {"orderId":"HIDDEN"} as dup1\ncall refund {"orderId":"shown"} as dup1')]), session(key));
  const uses = m.content.filter((b) => b.type === "tool_use");
  assert.equal(uses.length, 2);
  assert.notEqual(uses[0].id, uses[1].id);
  const shown = uses.find((u) => u.input.orderId === "shown");
  const answer = await client.messages.create(ask([{ role: "user", content: [{ type: "tool_result", tool_use_id: shown.id, content: '{"approved":true}' }] }]), session(key));
  assert.match(textOf(answer), /tool refund said: \{"refunded":"shown"\}/);
  assert.doesNotMatch(textOf(answer), /"refunded":"HIDDEN"/);
});

phaseTest("all", "accepts a bearer token as well as x-api-key", async () => {
  const bearer = new Anthropic({ baseURL: `${base}/anthropic`, authToken: "tok-bearer", apiKey: null, maxRetries: 0 });
  const m = await bearer.messages.create(ask([user("hi")]));
  assert.equal(textOf(m), "echo: hi");
});

phaseTest("all", "answers 401 without a credential, whole and streamed", async () => {
  // The SDK refuses to send without a credential, so its fetch drops it.
  const stripCredential = (url, init) => {
    const headers = new Headers(init.headers);
    headers.delete("x-api-key");
    headers.delete("authorization");
    return fetch(url, { ...init, headers });
  };
  const anon = new Anthropic({ baseURL: `${base}/anthropic`, apiKey: "unused", maxRetries: 0, fetch: stripCredential });
  for (const stream of [false, true]) {
    await assert.rejects(anon.messages.create(ask([user("hi")], { stream })), (err) => {
      assert.equal(err.status, 401);
      assert.equal(err.error.type, "error");
      assert.equal(err.error.error.type, "authentication_error");
      return true;
    });
  }
});

phaseTest("all", "answers 404 not_found_error for an unknown agent", async () => {
  await assert.rejects(client.messages.create({ ...ask([user("hi")]), model: "nobody" }), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.error.error.type, "not_found_error");
    return true;
  });
});

phaseTest("before-restart", "leaves an approval pending", async () => {
  const key = randomUUID();
  const m = await client.messages.create(ask([user('call refund {"orderId":"restart-2"}')]), session(key));
  assert.equal(m.stop_reason, "tool_use");
  writeFileSync(stateFile, JSON.stringify({ key, callId: m.content.find((b) => b.type === "tool_use").id }));
});

phaseTest("after-restart", "refuses it after svc dev restarted", async () => {
  const { key, callId } = JSON.parse(readFileSync(stateFile, "utf8"));
  const m = await client.messages.create(ask([{ role: "user", content: [{ type: "tool_result", tool_use_id: callId, content: '{"approved":false}' }] }]), session(key));
  assert.match(textOf(m), /refused/);
});
