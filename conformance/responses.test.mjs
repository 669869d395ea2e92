// Conformance of svc's Responses wire (POST /openai/v1/responses) with the
// official OpenAI SDK (responses.create, whole and streamed) and the Vercel
// AI SDK's default provider (openai("…") from @ai-sdk/openai, which calls
// the Responses API, with generateText and streamText). Run by
// TestWiresConformance (conformance_wires_test.go) against `svc dev` in
// front of the fake model provider, whose script is: "call <tool> <json>"
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
import { generateText, streamText, jsonSchema, tool, stepCountIs } from "ai";

const base = process.env.SVC_URL;
const phase = process.env.SVC_PHASE ?? "all";
const stateFile = join(process.env.SVC_STATE_DIR ?? ".", "responses.json");
const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: "tok-responses", maxRetries: 0, timeout: 30_000 });
const pickColor = { type: "function", name: "pick_color", description: "Ask the user for a color", parameters: { type: "object", properties: { hint: { type: "string" } } } };

// The AI SDK's default provider instance reads OPENAI_BASE_URL and
// OPENAI_API_KEY when its module loads.
process.env.OPENAI_BASE_URL = `${base}/openai/v1`;
process.env.OPENAI_API_KEY = "tok-ai-sdk";
const { openai } = await import("@ai-sdk/openai");

// phaseTest declares a test that runs only in the given phase.
const phaseTest = (only, name, fn) => test(name, { skip: phase !== only }, fn);

// itemsOf returns the output items of a response with the given type.
const itemsOf = (response, type) => response.output.filter((i) => i.type === type);

phaseTest("all", "answers whole", async () => {
  const r = await client.responses.create({ model: "helper", input: "hello there", instructions: "Be brief." });
  assert.equal(r.object, "response");
  assert.equal(r.status, "completed");
  assert.equal(r.model, "helper");
  assert.equal(r.output_text, "echo: hello there");
  assert.ok(r.id.startsWith("resp_"));
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
});

phaseTest("all", "streams its own events", async () => {
  const stream = await client.responses.create({ model: "helper", input: "stream me please", stream: true });
  const types = [];
  let text = "";
  let done = null;
  for await (const ev of stream) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, types.length - 1);
    if (ev.type === "response.output_text.delta") text += ev.delta;
    if (ev.type === "response.completed") done = ev.response;
  }
  assert.deepEqual([types[0], types[1], types.at(-1)], ["response.created", "response.in_progress", "response.completed"]);
  for (const t of ["response.output_item.added", "response.content_part.added", "response.output_text.done", "response.content_part.done", "response.output_item.done"]) {
    assert.ok(types.includes(t), `no ${t} in ${types}`);
  }
  assert.equal(text, "echo: stream me please");
  assert.equal(done.status, "completed");
  assert.ok(done.usage.total_tokens > 0);
  // The SDK's stream helper assembles the same response from the events.
  const final = await client.responses.stream({ model: "helper", input: "assemble me" }).finalResponse();
  assert.equal(final.output_text, "echo: assemble me");
});

phaseTest("all", "runs a server-side tool and shows it as an mcp_call item", async () => {
  const r = await client.responses.create({ model: "helper", input: 'call add {"a":2,"b":3}' });
  const [call] = itemsOf(r, "mcp_call");
  assert.equal(call.name, "add");
  assert.deepEqual(JSON.parse(call.arguments), { a: 2, b: 3 });
  assert.match(call.output, /^\{"sum":5/);
  assert.match(r.output_text, /^tool add said: \{"sum":5/);
  assert.equal(itemsOf(r, "function_call").length, 0);
});

phaseTest("all", "streams a response whose first output is a tool call as OpenAI does: created with no output, then the item added", async () => {
  const events = [];
  for await (const ev of await client.responses.create({ model: "helper", stream: true, input: 'call add {"a":2,"b":3}' })) events.push(ev);
  assert.equal(events[0].type, "response.created");
  assert.deepEqual(events[0].response.output, []);
  assert.deepEqual(events[1].response.output, []);
  const added = events.filter((e) => e.type === "response.output_item.added");
  assert.equal(added[0].item.type, "mcp_call");
  assert.deepEqual(added.map((e) => e.output_index), added.map((_, i) => i));
  assert.equal(events.at(-1).type, "response.completed");
  assert.equal(events.at(-1).response.output.length, added.length);
});

phaseTest("all", "returns a client function tool to the caller, whole and streamed", async () => {
  const r = await client.responses.create({ model: "helper", tools: [pickColor], input: 'call pick_color {"hint":"warm"}' });
  const [call] = itemsOf(r, "function_call");
  assert.equal(call.name, "pick_color");
  assert.deepEqual(JSON.parse(call.arguments), { hint: "warm" });
  let args = "";
  let streamed = null;
  for await (const ev of await client.responses.create({ model: "helper", stream: true, tools: [pickColor], input: 'call pick_color {"hint":"cold"}' })) {
    if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
    if (ev.type === "response.output_item.done" && ev.item.type === "function_call") streamed = ev.item;
  }
  assert.equal(streamed.name, "pick_color");
  assert.deepEqual(JSON.parse(args), { hint: "cold" });
  // Continued by previous_response_id: only the tool's output is sent.
  const next = await client.responses.create({
    model: "helper", tools: [pickColor], previous_response_id: r.id,
    input: [{ type: "function_call_output", call_id: call.call_id, output: "red" }],
  });
  assert.equal(next.output_text, "tool pick_color said: red");
  assert.equal(next.previous_response_id, r.id);
  // Not kept (store: false): the client replays the items itself.
  const unkept = await client.responses.create({ model: "helper", store: false, tools: [pickColor], input: 'call pick_color {"hint":"warm"}' });
  const replay = await client.responses.create({
    model: "helper", store: false, tools: [pickColor],
    input: [{ role: "user", content: 'call pick_color {"hint":"warm"}' }, ...unkept.output, { type: "function_call_output", call_id: unkept.output[0].call_id, output: "green" }],
  });
  assert.equal(replay.output_text, "tool pick_color said: green");
});

phaseTest("all", "continues a conversation by previous_response_id", async () => {
  const first = await client.responses.create({ model: "helper", input: "one" });
  const second = await client.responses.create({ model: "helper", input: "two", previous_response_id: first.id });
  assert.equal(second.output_text, "echo: two");
  const alone = await client.responses.create({ model: "helper", input: "two" });
  assert.ok(second.usage.input_tokens > alone.usage.input_tokens, "the continued turn carries the kept history");
  const runs = await (await fetch(`${base}/api/runs?agent=helper&limit=500`)).json();
  const mine = runs.items.filter((r) => r.sessionId === first.id || r.sessionId === second.id);
  assert.equal(mine.length, 2);
  for (const r of mine) {
    assert.equal(r.wire, "openai-responses");
    assert.equal(r.conversationId, mine[0].conversationId);
  }
  // Another credential cannot continue it.
  const other = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: "tok-other", maxRetries: 0 });
  await assert.rejects(other.responses.create({ model: "helper", input: "x", previous_response_id: first.id }), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.code, "previous_response_not_found");
    assert.equal(err.param, "previous_response_id");
    return true;
  });
});

phaseTest("all", "retrieves and deletes kept responses, per credential", async () => {
  const first = await client.responses.create({ model: "helper", input: "one" });
  const second = await client.responses.create({ model: "helper", input: "two", previous_response_id: first.id });
  const got = await client.responses.retrieve(second.id);
  assert.equal(got.id, second.id);
  assert.equal(got.status, "completed");
  assert.equal(got.output_text, "echo: two");
  assert.equal(got.previous_response_id, first.id);
  assert.deepEqual(got.output, second.output);
  const streamed = await client.responses.stream({ model: "helper", input: "streamed" }).finalResponse();
  assert.equal((await client.responses.retrieve(streamed.id)).output_text, "echo: streamed");
  // Another credential neither reads nor deletes them.
  const other = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: "tok-other", maxRetries: 0 });
  const notFound = (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.code, "response_not_found");
    return true;
  };
  await assert.rejects(other.responses.retrieve(second.id), notFound);
  await assert.rejects(other.responses.delete(second.id), notFound);
  // Deleting the first response of a chain: it is gone, and the response
  // that continued it still carries the whole conversation.
  await client.responses.delete(first.id);
  await assert.rejects(client.responses.retrieve(first.id), notFound);
  await assert.rejects(client.responses.delete(first.id), notFound);
  await assert.rejects(client.responses.create({ model: "helper", input: "x", previous_response_id: first.id }), (err) => err.status === 404);
  const third = await client.responses.create({ model: "helper", input: "three", previous_response_id: second.id });
  const alone = await client.responses.create({ model: "helper", input: "three" });
  const twoTurns = await client.responses.create({ model: "helper", input: "three", previous_response_id: (await client.responses.create({ model: "helper", input: "two" })).id });
  assert.equal(third.output_text, "echo: three");
  assert.ok(third.usage.input_tokens > twoTurns.usage.input_tokens && twoTurns.usage.input_tokens > alone.usage.input_tokens, "the continued turn still carries the deleted response's turn");
  await client.responses.delete(second.id);
  await assert.rejects(client.responses.retrieve(second.id), notFound);
  assert.equal((await client.responses.retrieve(third.id)).output_text, "echo: three");
});

phaseTest("all", "keeps an x-svc-session", async () => {
  const headers = { headers: { "x-svc-session": randomUUID() } };
  await client.responses.create({ model: "helper", input: "one" }, headers);
  const second = await client.responses.create({ model: "helper", input: "two" }, headers);
  const alone = await client.responses.create({ model: "helper", input: "two" });
  assert.ok(second.usage.input_tokens > alone.usage.input_tokens, "the session's turn carries its history");
});

phaseTest("all", "approves and refuses a tool with mcp_approval_request / mcp_approval_response", async () => {
  for (const approve of [true, false]) {
    const ask = await client.responses.create({ model: "helper", input: 'call refund {"orderId":"o-1"}' });
    const [req] = itemsOf(ask, "mcp_approval_request");
    assert.equal(req.name, "refund");
    assert.deepEqual(JSON.parse(req.arguments), { orderId: "o-1" });
    const answer = await client.responses.create({
      model: "helper", previous_response_id: ask.id,
      input: [{ type: "mcp_approval_response", approval_request_id: req.id, approve }],
    });
    const [call] = itemsOf(answer, "mcp_call");
    assert.equal(call.approval_request_id, req.id);
    if (approve) assert.equal(answer.output_text, 'tool refund said: {"refunded":"o-1"}');
    else assert.match(answer.output_text, /refused/);
  }
});

phaseTest("all", "approves exactly the request it names when the model reuses a call id", async () => {
  const ask = await client.responses.create({ model: "helper", input: 'call refund {"orderId":"HIDDEN"} as dup1\ncall refund {"orderId":"shown"} as dup1' });
  const reqs = itemsOf(ask, "mcp_approval_request");
  assert.equal(reqs.length, 2);
  assert.notEqual(reqs[0].id, reqs[1].id);
  const shown = reqs.find((r) => JSON.parse(r.arguments).orderId === "shown");
  const answer = await client.responses.create({
    model: "helper", previous_response_id: ask.id,
    input: [{ type: "mcp_approval_response", approval_request_id: shown.id, approve: true }],
  });
  assert.match(answer.output_text, /tool refund said: \{"refunded":"shown"\}/);
  assert.doesNotMatch(answer.output_text, /"refunded":"HIDDEN"/);
});

phaseTest("all", "answers 401, 404 and unknown paths in its error shape", async () => {
  const anon = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: "unused", maxRetries: 0, defaultHeaders: { authorization: null } });
  for (const stream of [false, true]) {
    await assert.rejects(anon.responses.create({ model: "helper", stream, input: "hi" }), (err) => {
      assert.equal(err.status, 401);
      assert.equal(err.code, "invalid_api_key");
      return true;
    });
  }
  await assert.rejects(client.responses.create({ model: "nobody", input: "hi" }), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.code, "model_not_found");
    assert.equal(err.param, "model");
    return true;
  });
  await assert.rejects(client.get("/assistants"), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.code, "unknown_url");
    assert.equal(err.type, "invalid_request_error");
    return true;
  });
  const r = await fetch(`${base}/openai/v1/responses`, { headers: { authorization: "Bearer tok" } });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get("allow"), "POST");
  assert.equal((await r.json()).error.code, "method_not_allowed");
});

phaseTest("all", "AI SDK: generateText and streamText with the default openai provider", async () => {
  const g = await generateText({ model: openai("helper"), prompt: "hello there", maxRetries: 0 });
  assert.equal(g.text, "echo: hello there");
  assert.equal(g.finishReason, "stop");
  assert.ok(g.usage.inputTokens > 0 && g.usage.outputTokens > 0);
  const s = streamText({ model: openai("helper"), prompt: "stream me", maxRetries: 0, onError: ({ error }) => { throw error; } });
  assert.equal(await s.text, "echo: stream me");
  assert.equal(await s.finishReason, "stop");
});

phaseTest("all", "AI SDK: a server tool is provider-executed, a client tool runs in the SDK", async () => {
  const g = await generateText({ model: openai("helper"), prompt: 'call add {"a":2,"b":3}', maxRetries: 0 });
  assert.match(g.text, /^tool add said: \{"sum":5/);
  const ran = g.content.find((p) => p.type === "tool-result");
  assert.equal(ran?.providerExecuted, true);
  // The SDK runs pick_color and sends its output back, referring to the
  // kept response's items (store).
  const tools = { pick_color: tool({ description: "Ask for a color", inputSchema: jsonSchema({ type: "object", properties: { hint: { type: "string" } } }), execute: async ({ hint }) => `red for ${hint}` }) };
  for (const run of [generateText, streamText]) {
    const r = await run({ model: openai("helper"), tools, stopWhen: stepCountIs(3), prompt: 'call pick_color {"hint":"warm"}', maxRetries: 0 });
    assert.equal(await r.text, "tool pick_color said: red for warm");
    assert.equal((await r.steps).length, 2);
  }
});

phaseTest("all", "AI SDK: a tool approval round trip", async () => {
  const messages = [{ role: "user", content: 'call refund {"orderId":"o-ai"}' }];
  const ask = await generateText({ model: openai("helper"), messages, maxRetries: 0 });
  const request = ask.content.find((p) => p.type === "tool-approval-request");
  assert.ok(request, `no approval request in ${JSON.stringify(ask.content)}`);
  assert.equal(request.toolCall.toolName, "mcp.refund");
  const answer = await generateText({
    model: openai("helper"), maxRetries: 0,
    messages: [...messages, ...ask.response.messages, {
      role: "tool",
      // The tool runs on the server: its approval goes to the provider.
      content: [{ type: "tool-approval-response", approvalId: request.approvalId, approved: true, providerExecuted: request.toolCall.providerExecuted }],
    }],
  });
  assert.equal(answer.text, 'tool refund said: {"refunded":"o-ai"}');
});

phaseTest("before-restart", "leaves an approval pending in a kept response", async () => {
  const ask = await client.responses.create({ model: "helper", input: 'call refund {"orderId":"restart-r"}' });
  writeFileSync(stateFile, JSON.stringify({ id: ask.id, approvalId: itemsOf(ask, "mcp_approval_request")[0].id }));
});

phaseTest("after-restart", "approves it after svc dev restarted", async () => {
  const { id, approvalId } = JSON.parse(readFileSync(stateFile, "utf8"));
  const r = await client.responses.create({ model: "helper", previous_response_id: id, input: [{ type: "mcp_approval_response", approval_request_id: approvalId, approve: true }] });
  assert.equal(r.output_text, 'tool refund said: {"refunded":"restart-r"}');
});
