// Conformance of svc's agent-UI wire (POST /agui/{agent} and POST /chat)
// with the official AG-UI client (HttpAgent). Run by TestWiresConformance
// (conformance_wires_test.go); see openai.test.mjs for the fake provider's
// script and the environment.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

const base = process.env.SVC_URL;
const phase = process.env.SVC_PHASE ?? "all";
const stateFile = join(process.env.SVC_STATE_DIR ?? ".", "agui.json");
const auth = { Authorization: "Bearer tok-agui" };
const pickColor = { name: "pick_color", description: "Ask the user for a color", parameters: { type: "object", properties: { hint: { type: "string" } } } };

// phaseTest declares a test that runs only in the given phase.
const phaseTest = (only, name, fn) => test(name, { skip: phase !== only }, fn);

// agentFor returns an HttpAgent on a thread ("" = stateless).
function agentFor(threadId, { path = "/agui/helper", headers = auth, messages = [] } = {}) {
  return new HttpAgent({ url: base + path, headers, threadId, initialMessages: messages });
}

// say adds a user message and runs the agent, recording the events and the
// RUN_FINISHED outcome.
async function say(agent, text, params = {}) {
  if (text !== null) agent.addMessage({ id: randomUUID(), role: "user", content: text });
  const seen = { types: [], finished: null };
  const result = await agent.runAgent(params, {
    onEvent: ({ event }) => { seen.types.push(event.type); },
    onRunFinishedEvent: ({ event }) => { seen.finished = event; },
  });
  return { ...result, ...seen };
}

// lastText is the text of the agent's last assistant message.
const lastText = (agent) => agent.messages.filter((m) => m.role === "assistant" && m.content).at(-1)?.content;

phaseTest("all", "answers with AG-UI text events", async () => {
  const agent = agentFor(randomUUID());
  const r = await say(agent, "hello there");
  assert.equal(r.types[0], "RUN_STARTED");
  assert.equal(r.types.at(-1), "RUN_FINISHED");
  assert.ok(r.types.includes("TEXT_MESSAGE_START") && r.types.includes("TEXT_MESSAGE_CONTENT") && r.types.includes("TEXT_MESSAGE_END"));
  assert.equal(lastText(agent), "echo: hello there");
  assert.equal(r.finished.outcome.type, "success");
});

phaseTest("all", "shows a server-side tool call and its result", async () => {
  const agent = agentFor(randomUUID());
  const r = await say(agent, 'call add {"a":2,"b":3}');
  for (const t of ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"]) assert.ok(r.types.includes(t), t);
  const tool = agent.messages.find((m) => m.role === "tool");
  assert.match(tool.content, /"sum":5/);
  assert.match(lastText(agent), /^tool add said: \{"sum":5/);
});

phaseTest("all", "passes a client tool through and continues the thread with its result", async () => {
  const agent = agentFor(randomUUID());
  const r = await say(agent, 'call pick_color {"hint":"warm"}', { tools: [pickColor] });
  const call = agent.messages.at(-1).toolCalls[0];
  assert.equal(call.function.name, "pick_color");
  assert.deepEqual(r.finished.outcome, { type: "success", pendingToolCallIds: [call.id] });
  agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: call.id, content: "red" });
  await say(agent, null, { tools: [pickColor] });
  assert.equal(lastText(agent), "tool pick_color said: red");
});

phaseTest("all", "pauses for approval with an interrupt and resumes from the resume entries", async () => {
  for (const [status, payload, want] of [["resolved", { approved: true }, /^tool refund said: \{"refunded":"g-1"\}$/], ["cancelled", undefined, /refused/]]) {
    const agent = agentFor(randomUUID());
    const r = await say(agent, 'call refund {"orderId":"g-1"}');
    assert.equal(r.finished.outcome.type, "interrupt");
    const [interrupt] = agent.pendingInterrupts;
    assert.equal(interrupt.reason, "tool_call");
    assert.equal(interrupt.toolCallId, agent.messages.at(-1).toolCalls[0].id);
    assert.equal(agent.messages.at(-1).toolCalls[0].function.name, "refund");
    const resume = [{ interruptId: interrupt.id, status, ...(payload && { payload }) }];
    const next = await say(agent, null, { resume });
    assert.equal(next.finished.outcome.type, "success");
    assert.equal(agent.pendingInterrupts.length, 0);
    assert.match(lastText(agent), want);
  }
});

phaseTest("all", "resumes exactly the interrupt it names when the model reuses a call id", async () => {
  const agent = agentFor(randomUUID());
  const r = await say(agent, 'call refund {"orderId":"HIDDEN"} as dup1\ncall refund {"orderId":"shown"} as dup1');
  assert.equal(r.finished.outcome.type, "interrupt");
  const calls = agent.messages.at(-1).toolCalls;
  assert.equal(calls.length, 2);
  assert.notEqual(calls[0].id, calls[1].id);
  assert.equal(agent.pendingInterrupts.length, 2);
  const shown = calls.find((c) => c.function.arguments.includes("shown"));
  const interrupt = agent.pendingInterrupts.find((i) => i.toolCallId === shown.id);
  const resume = agent.pendingInterrupts.map((i) => i === interrupt
    ? { interruptId: i.id, status: "resolved", payload: { approved: true } }
    : { interruptId: i.id, status: "cancelled" });
  await say(agent, null, { resume });
  assert.match(lastText(agent), /tool refund said: \{"refunded":"shown"\}/);
  assert.doesNotMatch(lastText(agent), /"refunded":"HIDDEN"/);
});

phaseTest("all", "accepts a tool message answering the pending call", async () => {
  const thread = randomUUID();
  const first = agentFor(thread);
  await say(first, 'call refund {"orderId":"g-2"}');
  const callId = first.messages.at(-1).toolCalls[0].id;
  const second = agentFor(thread, { messages: [...first.messages, { id: randomUUID(), role: "tool", toolCallId: callId, content: '{"approved":true}' }] });
  await say(second, null);
  assert.equal(lastText(second), 'tool refund said: {"refunded":"g-2"}');
});

phaseTest("all", "runs one stateless turn on an empty threadId, refusing approvals", async () => {
  const agent = agentFor("");
  const r = await say(agent, 'call refund {"orderId":"g-3"}');
  assert.equal(r.finished.outcome.type, "success");
  assert.match(lastText(agent), /x-svc-session|threadId/);
});

phaseTest("all", "serves /chat with the agent in forwardedProps", async () => {
  const agent = agentFor(randomUUID(), { path: "/chat" });
  await say(agent, "via chat", { forwardedProps: { agent: "helper" } });
  assert.equal(lastText(agent), "echo: via chat");
});

phaseTest("all", "answers 401 with a RUN_ERROR body without a credential", async () => {
  for (const path of ["/agui/helper", "/chat"]) {
    await assert.rejects(say(agentFor(randomUUID(), { path, headers: {} }), "hi", { forwardedProps: { agent: "helper" } }), (err) => {
      assert.equal(err.status, 401);
      assert.equal(err.payload.type, "RUN_ERROR");
      assert.ok(err.payload.message);
      return true;
    });
  }
});

phaseTest("all", "answers 404 with a RUN_ERROR body for an unknown agent", async () => {
  await assert.rejects(say(agentFor(randomUUID(), { path: "/agui/nobody" }), "hi"), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.payload.type, "RUN_ERROR");
    return true;
  });
});

phaseTest("before-restart", "leaves an approval pending", async () => {
  const agent = agentFor(randomUUID());
  const r = await say(agent, 'call refund {"orderId":"restart-3"}');
  assert.equal(r.finished.outcome.type, "interrupt");
  writeFileSync(stateFile, JSON.stringify({ threadId: agent.threadId, messages: agent.messages, interrupts: agent.pendingInterrupts }));
});

phaseTest("after-restart", "resumes it after svc dev restarted", async () => {
  const { threadId, messages, interrupts } = JSON.parse(readFileSync(stateFile, "utf8"));
  const agent = agentFor(threadId, { messages });
  agent.pendingInterrupts = interrupts;
  await say(agent, null, { resume: [{ interruptId: interrupts[0].id, status: "resolved", payload: { approved: true } }] });
  assert.equal(lastText(agent), 'tool refund said: {"refunded":"restart-3"}');
});
