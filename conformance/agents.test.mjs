// Conformance of svc's chat wires with OpenAI's Agents SDK (@openai/agents):
// an agent of the project is the SDK agent's model, through the SDK's
// Responses model (its default) and its Chat Completions model. Run by
// TestAgentsSDKConformance (conformance_agents_test.go) against `svc dev`
// in front of the fake model provider, whose script is: "call <tool>
// <json>" → a tool call; a tool result → "tool <name> said: <content>";
// else "echo: <last user text>". SVC_URL is the emulator.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Agent, Runner, OpenAIProvider, hostedMcpTool, setTracingDisabled, tool } from "@openai/agents";
import { z } from "zod";
import OpenAI from "openai";
import { randomUUID } from "node:crypto";

setTracingDisabled(true);
const base = process.env.SVC_URL;
const provider = (useResponses) => new OpenAIProvider({ baseURL: `${base}/openai/v1`, apiKey: "tok-agents", useResponses });
const responses = new Runner({ modelProvider: provider(true) });
const chat = new Runner({ modelProvider: provider(false) });

// svcAgent is an SDK agent whose model is the project's agent "helper",
// its tools declared as the hosted MCP server "svc".
const svcAgent = (extra = {}) => new Agent({ name: "svc-helper", model: "helper", tools: [hostedMcpTool({ serverLabel: "svc", ...extra })] });

for (const runner of [responses, chat]) {
  const name = runner === responses ? "responses" : "chat completions";
  test(`${name}: answers a plain run, whole and streamed`, async () => {
    const agent = new Agent({ name: "plain", model: "helper" });
    const whole = await runner.run(agent, "hello agents");
    assert.equal(whole.finalOutput, "echo: hello agents");
    const streamed = await runner.run(agent, "stream agents", { stream: true });
    let text = "";
    for await (const ev of streamed.toTextStream()) text += ev;
    await streamed.completed;
    assert.equal(text, "echo: stream agents");
    assert.equal(streamed.finalOutput, "echo: stream agents");
  });
}

const Weather = z.object({ city: z.string(), temp: z.number() });

for (const runner of [responses, chat]) {
  const name = runner === responses ? "responses" : "chat completions";
  test(`${name}: structured output (outputType) reaches the model and comes back parsed`, async () => {
    const agent = new Agent({ name: "weather", model: "helper", outputType: Weather });
    const whole = await runner.run(agent, 'json {"city":"Oslo","temp":3}');
    assert.deepEqual(whole.finalOutput, { city: "Oslo", temp: 3 });
    const streamed = await runner.run(agent, 'json {"city":"Bergen","temp":9}', { stream: true });
    for await (const _ of streamed) { /* events */ }
    await streamed.completed;
    assert.deepEqual(streamed.finalOutput, { city: "Bergen", temp: 9 });
  });

  test(`${name}: a reply that does not match the schema is an error, not a silent success`, async () => {
    const agent = new Agent({ name: "weather", model: "helper", outputType: Weather });
    await assert.rejects(runner.run(agent, 'json {"city":"Oslo"}'), (err) => {
      assert.match(String(err.message), /schema|502/);
      return true;
    });
  });
}

for (const stream of [false, true]) {
  for (const approve of [true, false]) {
    test(`responses: an approval of the agent's tool, ${approve ? "approved" : "rejected"}, ${stream ? "streamed" : "whole"}`, async () => {
      const agent = svcAgent();
      const drain = async (r) => {
        if (stream) {
          for await (const _ of r) { /* events */ }
          await r.completed;
        }
        return r;
      };
      const first = await drain(await responses.run(agent, 'call refund {"orderId":"o7"}', { stream }));
      assert.equal(first.interruptions.length, 1, "one interruption: the approval request");
      const [item] = first.interruptions;
      assert.equal(item.rawItem.name, "refund");
      assert.equal(item.rawItem.providerData.server_label, "svc");
      if (approve) first.state.approve(item);
      else first.state.reject(item);
      const second = await drain(await responses.run(agent, first.state, { stream }));
      assert.equal(second.interruptions?.length ?? 0, 0);
      if (approve) assert.equal(second.finalOutput, 'tool refund said: {"refunded":"o7"}');
      else assert.match(second.finalOutput, /refused/);
    });
  }
}

test("responses: require_approval always makes every tool of the agent wait", async () => {
  const agent = svcAgent({ requireApproval: "always" });
  const first = await responses.run(agent, 'call add {"a":1,"b":2}');
  assert.equal(first.interruptions.length, 1);
  assert.equal(first.interruptions[0].rawItem.name, "add");
  first.state.approve(first.interruptions[0]);
  const second = await responses.run(agent, first.state);
  assert.match(second.finalOutput, /^tool add said: \{"sum":3/);
});

test("responses: an mcp tool of another server is refused naming it", async () => {
  const agent = new Agent({ name: "other", model: "helper", tools: [hostedMcpTool({ serverLabel: "github", serverUrl: "https://example.invalid/mcp" })] });
  await assert.rejects(responses.run(agent, "hi"), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.param, "tools[0].server_label");
    return true;
  });
});

for (const runner of [responses, chat]) {
  const name = runner === responses ? "responses" : "chat completions";
  test(`${name}: a function tool of the SDK runs on the client and the reply continues`, async () => {
    let ran = 0;
    const pick = tool({ name: "pick_color", description: "Pick a color", parameters: z.object({ hint: z.string() }), execute: async () => { ran++; return "teal"; } });
    const agent = new Agent({ name: "client-tools", model: "helper", tools: [pick] });
    const r = await runner.run(agent, 'call pick_color {"hint":"sea"}');
    assert.equal(ran, 1);
    assert.equal(r.finalOutput, "tool pick_color said: teal");
  });

  test(`${name}: a model setting svc cannot serve is refused naming it`, async () => {
    const agent = new Agent({ name: "settings", model: "helper", modelSettings: { toolChoice: "required" }, tools: [tool({ name: "noop", description: "n", parameters: z.object({}), execute: async () => "" })] });
    await assert.rejects(runner.run(agent, "hi"), (err) => {
      assert.equal(err.status, 400);
      assert.equal(err.param ?? err.error?.param, "tool_choice");
      return true;
    });
  });
}

test("responses: multi-turn through previousResponseId", async () => {
  const agent = new Agent({ name: "plain", model: "helper" });
  const first = await responses.run(agent, "first turn");
  assert.ok(first.lastResponseId?.startsWith("resp_"));
  const second = await responses.run(agent, "second turn", { previousResponseId: first.lastResponseId });
  assert.equal(second.finalOutput, "echo: second turn");
});

test("responses: conversationId (the Conversations API) is refused naming conversation", async () => {
  const agent = new Agent({ name: "plain", model: "helper" });
  await assert.rejects(responses.run(agent, "hi", { conversationId: "conv_123" }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.param ?? err.error?.param, "conversation");
    return true;
  });
});

test("chat completions: an approval through x-svc-session, answered by an SDK tool standing for the user", async () => {
  for (const approved of [true, false]) {
    const client = new OpenAI({ baseURL: `${base}/openai/v1`, apiKey: "tok-agents", maxRetries: 0, defaultHeaders: { "x-svc-session": randomUUID() } });
    const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: client, useResponses: false }) });
    let asked = 0;
    const refund = tool({ name: "refund", description: "The user's answer to the refund's approval", parameters: z.object({ orderId: z.string() }), execute: async () => { asked++; return { approved }; } });
    const agent = new Agent({ name: "approver", model: "helper", tools: [refund] });
    const r = await runner.run(agent, 'call refund {"orderId":"o9"}');
    assert.equal(asked, 1);
    if (approved) assert.equal(r.finalOutput, 'tool refund said: {"refunded":"o9"}');
    else assert.match(r.finalOutput, /refused/);
  }
});
