// Conformance of svc's chat-completions wire with the official OpenAI SDK.
// Run by TestWiresConformance (conformance_wires_test.go) against `svc dev`
// in front of the fake model provider, whose script is: "call <tool> <json>"
// → a tool call; a tool result → "tool <name> said: <content>"; else
// "echo: <last user text>". SVC_URL is the emulator; SVC_PHASE is "all", or
// "before-restart" / "after-restart" around a restart of svc dev, which
// share state through SVC_STATE_DIR.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import OpenAI from "openai";

const base = process.env.SVC_URL;
const phase = process.env.SVC_PHASE ?? "all";
const stateFile = join(process.env.SVC_STATE_DIR ?? ".", "openai.json");
const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: "tok-openai", maxRetries: 0, timeout: 30_000 });
const session = (key) => ({ headers: { "x-svc-session": key } });
const user = (content) => ({ role: "user", content });
const pickColor = { type: "function", function: { name: "pick_color", description: "Ask the user for a color", parameters: { type: "object", properties: { hint: { type: "string" } } } } };

// phaseTest declares a test that runs only in the given phase.
const phaseTest = (only, name, fn) => test(name, { skip: phase !== only }, fn);

// collect streams a completion and returns its text, finish reason, tool calls and usage.
async function collect(stream) {
  let text = "";
  let finish = null;
  let usage = null;
  const calls = [];
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    text += choice.delta.content ?? "";
    for (const c of choice.delta.tool_calls ?? []) {
      calls[c.index] ??= { id: c.id, name: c.function.name, arguments: "" };
      calls[c.index].arguments += c.function.arguments ?? "";
    }
    finish = choice.finish_reason ?? finish;
  }
  return { text, finish, calls, usage };
}

phaseTest("all", "lists the agents as models", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes("helper") && ids.includes("brief"), `models ${ids}`);
  const one = await client.models.retrieve("helper");
  assert.equal(one.object, "model");
});

phaseTest("all", "answers whole", async () => {
  const r = await client.chat.completions.create({ model: "helper", messages: [user("hello there")] });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, "helper");
  assert.equal(r.choices[0].message.content, "echo: hello there");
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

phaseTest("all", "streams chunks with usage, ending [DONE]", async () => {
  const stream = await client.chat.completions.create({ model: "helper", stream: true, stream_options: { include_usage: true }, messages: [user("stream me please")] });
  const r = await collect(stream);
  assert.equal(r.text, "echo: stream me please");
  assert.equal(r.finish, "stop");
  assert.ok(r.usage && r.usage.total_tokens > 0);
});

phaseTest("all", "runs a server-side tool", async () => {
  const r = await client.chat.completions.create({ model: "helper", messages: [user('call add {"a":2,"b":3}')] });
  assert.match(r.choices[0].message.content, /^tool add said: \{"sum":5/);
  assert.equal(r.choices[0].message.tool_calls, undefined);
});

phaseTest("all", "returns schema-invalid arguments to the model", async () => {
  const r = await client.chat.completions.create({ model: "helper", messages: [user('call add {"a":"two"}')] });
  assert.match(r.choices[0].message.content, /do not match its parameters schema/);
});

phaseTest("all", "passes a client tool through, whole and streamed", async () => {
  const r = await client.chat.completions.create({ model: "helper", tools: [pickColor], messages: [user('call pick_color {"hint":"warm"}')] });
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  const call = r.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, "pick_color");
  assert.deepEqual(JSON.parse(call.function.arguments), { hint: "warm" });
  const s = await collect(await client.chat.completions.create({ model: "helper", stream: true, tools: [pickColor], messages: [user('call pick_color {"hint":"cold"}')] }));
  assert.equal(s.finish, "tool_calls");
  assert.equal(s.calls[0].name, "pick_color");
  assert.deepEqual(JSON.parse(s.calls[0].arguments), { hint: "cold" });
  // Stateless: the client replays the history with its tool's result.
  const next = await client.chat.completions.create({
    model: "helper", tools: [pickColor],
    messages: [user('call pick_color {"hint":"warm"}'), r.choices[0].message, { role: "tool", tool_call_id: call.id, content: "red" }],
  });
  assert.equal(next.choices[0].message.content, "tool pick_color said: red");
});

phaseTest("all", "keeps a durable session server-side: the client sends only its newest turn", async () => {
  const key = randomUUID();
  const first = await client.chat.completions.create({ model: "helper", tools: [pickColor], messages: [user('call pick_color {}')] }, session(key));
  const call = first.choices[0].message.tool_calls[0];
  // Only the tool result: the call it answers lives in the server's history.
  const second = await client.chat.completions.create({ model: "helper", messages: [{ role: "tool", tool_call_id: call.id, content: "blue" }] }, session(key));
  assert.equal(second.choices[0].message.content, "tool pick_color said: blue");
  const third = await client.chat.completions.create({ model: "helper", stream: true, stream_options: { include_usage: true }, messages: [user("and now")] }, session(key));
  const r = await collect(third);
  assert.equal(r.text, "echo: and now");
  const alone = await client.chat.completions.create({ model: "helper", messages: [user("and now")] });
  assert.ok(r.usage.prompt_tokens > alone.usage.prompt_tokens, "the durable turn carries the stored history");
  // Another credential cannot continue it: it gets a fresh session.
  const other = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: "tok-other", maxRetries: 0 });
  const o = await other.chat.completions.create({ model: "helper", messages: [user("and now")] }, session(key));
  assert.equal(o.usage.prompt_tokens, alone.usage.prompt_tokens);
});

phaseTest("all", "groups turns of a conversation without keeping state", async () => {
  const key = randomUUID();
  const headers = { headers: { "x-svc-conversation": key } };
  const first = await client.chat.completions.create({ model: "helper", messages: [user("one")] }, headers);
  await client.chat.completions.create({ model: "helper", messages: [user("one"), first.choices[0].message, user("two")] }, headers);
  const runs = await (await fetch(`${base}/api/runs`)).json();
  const grouped = runs.items.filter((r) => r.conversationId === key);
  assert.equal(grouped.length, 2);
  for (const r of grouped) {
    assert.equal(r.trigger, "agent");
    assert.equal(r.wire, "openai");
    assert.equal(r.sessionId, undefined);
  }
});

phaseTest("all", "approves and refuses a tool in a durable session", async () => {
  for (const approved of [true, false]) {
    const key = randomUUID();
    const ask = await client.chat.completions.create({ model: "helper", messages: [user('call refund {"orderId":"o-1"}')] }, session(key));
    assert.equal(ask.choices[0].finish_reason, "tool_calls");
    const call = ask.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, "refund");
    const answer = await client.chat.completions.create({ model: "helper", messages: [{ role: "tool", tool_call_id: call.id, content: JSON.stringify({ approved }) }] }, session(key));
    if (approved) assert.equal(answer.choices[0].message.content, 'tool refund said: {"refunded":"o-1"}');
    else assert.match(answer.choices[0].message.content, /refused/);
  }
});

phaseTest("all", "approves exactly the call it names when the model reuses a call id", async () => {
  // A hostile model answers two calls with one id: each gets an id of its
  // own, and approving one runs that one only.
  const key = randomUUID();
  const ask = await client.chat.completions.create({ model: "helper", messages: [user('call refund {"orderId":"HIDDEN"} as dup1\ncall refund {"orderId":"shown"} as dup1')] }, session(key));
  const calls = ask.choices[0].message.tool_calls;
  assert.equal(calls.length, 2);
  assert.notEqual(calls[0].id, calls[1].id);
  assert.ok(calls.every((c) => c.id !== "dup1"));
  const shown = calls.find((c) => c.function.arguments.includes("shown"));
  const answer = await client.chat.completions.create({ model: "helper", messages: [{ role: "tool", tool_call_id: shown.id, content: '{"approved":true}' }] }, session(key));
  const text = answer.choices[0].message.content;
  assert.match(text, /tool refund said: \{"refunded":"shown"\}/);
  assert.doesNotMatch(text, /"refunded":"HIDDEN"/);
});

phaseTest("all", "refuses a tool needing approval without a durable session", async () => {
  const r = await client.chat.completions.create({ model: "helper", messages: [user('call refund {"orderId":"o-2"}')] });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.match(r.choices[0].message.content, /x-svc-session/);
});

phaseTest("all", "ends a turn at the agent's turn limit", async () => {
  const r = await client.chat.completions.create({ model: "brief", messages: [user('call add {}')] });
  assert.match(r.choices[0].message.content, /limit of 1 model calls/);
});

phaseTest("all", "answers 401 without a credential, whole and streamed", async () => {
  const anon = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: "unused", maxRetries: 0, defaultHeaders: { authorization: null } });
  for (const stream of [false, true]) {
    await assert.rejects(anon.chat.completions.create({ model: "helper", stream, messages: [user("hi")] }), (err) => {
      assert.equal(err.status, 401);
      assert.equal(err.code, "invalid_api_key");
      assert.ok(err.error.message);
      return true;
    });
  }
});

phaseTest("all", "answers 404 model_not_found for an unknown agent", async () => {
  await assert.rejects(client.chat.completions.create({ model: "nobody", messages: [user("hi")] }), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.code, "model_not_found");
    assert.equal(err.param, "model");
    return true;
  });
});

phaseTest("before-restart", "leaves an approval pending", async () => {
  const key = randomUUID();
  const ask = await client.chat.completions.create({ model: "helper", messages: [user('call refund {"orderId":"restart-1"}')] }, session(key));
  assert.equal(ask.choices[0].finish_reason, "tool_calls");
  writeFileSync(stateFile, JSON.stringify({ key, callId: ask.choices[0].message.tool_calls[0].id }));
});

phaseTest("after-restart", "approves it after svc dev restarted", async () => {
  const { key, callId } = JSON.parse(readFileSync(stateFile, "utf8"));
  const r = await client.chat.completions.create({ model: "helper", messages: [{ role: "tool", tool_call_id: callId, content: '{"approved":true}' }] }, session(key));
  assert.equal(r.choices[0].message.content, 'tool refund said: {"refunded":"restart-1"}');
});
