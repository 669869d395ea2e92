// The chat page: talk to an agent over POST /chat (the AG-UI wire, DESIGN
// §10): the answer streams in as it arrives, tool calls show with their
// arguments and results, a call awaiting approval gets Approve and Refuse
// buttons that resume the turn. Each agent keeps one thread id (a durable
// session), remembered by the browser: after a reload the transcript is
// read back from the session (GET /api/agents/{agent}/sessions/{id}) and a
// call still awaiting approval can be approved. "New conversation" starts
// another thread; Stop ends a turn (the server stops it as when a client
// hangs up).
//
// Model output is an attacker's text as soon as the model reads one: tool
// arguments show as the whole object, pretty-printed, with bidi controls,
// invisible characters and long runs of spaces made visible (shown), so an
// approval cannot be made to look like another; every call has an id of
// the server's own, so each approval names exactly one card.

import { APIError, apiBase, authHeaders, el, errorBox, health } from "./dom.js";

/**
 * chatAuth is the chat wires' credential when the page has no token
 * (authHeaders): bound to loopback they take any non-empty bearer token.
 */
const chatAuth = { authorization: "Bearer console" };

/** chats maps an agent name to its conversation: { threadId, log, calls }. */
const chats = new Map();

/** threadKey is where the browser keeps agent's thread id (per API, so per svc dev or box). */
const threadKey = (agent) => `svc-chat-thread:${apiBase}:${agent}`;

/** listAgents is the agents the chat wires serve (GET /openai/v1/models). */
export async function listAgents() {
  const r = await fetch(apiBase + "/openai/v1/models", { headers: await authHeaders(chatAuth) });
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new APIError(r.status, body, `GET /openai/v1/models: HTTP ${r.status}`);
  return (body?.data ?? []).map((m) => m.id);
}

/** chatPage shows the agent picker and, for agent, its conversation. */
export async function chatPage(ctx, agent) {
  const agents = await listAgents();
  const picker = el("select", { id: "chat-agent", onchange: (e) => (location.hash = `#/chat/${encodeURIComponent(e.target.value)}`) },
    el("option", { value: "" }, "choose an agent…"),
    agents.map((a) => el("option", { value: a, selected: a === agent }, a)));
  const head = [el("h1", {}, "Chat"), el("label", { class: "inline" }, "Agent ", picker)];
  if (!agents.length) return el("section", {}, head, await noAgents());
  if (!agent) return el("section", {}, head, el("p", { class: "muted" }, "Pick an agent to talk to."));
  if (!agents.includes(agent)) return el("section", {}, head, errorBox(new Error(`No agent named ${agent}.`)));
  return el("section", {}, head, await conversation(agent));
}

/**
 * noAgents says why the wires list no agent: the boot gate is closed (they
 * are offline until a model provider is stored, on Settings), or the
 * project has none.
 */
async function noAgents() {
  const { gate } = await health();
  if (gate && !gate.open) {
    return el("p", { class: "note", id: "chat-gate" }, `The agents are offline: the boot gate is closed (${gate.reason}). Store a model provider under `,
      el("a", { href: "#/settings" }, "Settings"), " to open it.");
  }
  return el("p", { class: "muted" }, "This project has no agents: add one under deep-agents/.");
}

/**
 * conversation builds agent's transcript (kept across visits; on the first
 * visit after a reload, read back from the remembered thread) and message box.
 */
async function conversation(agent) {
  let chat = chats.get(agent);
  const send = el("button", { type: "submit" }, "Send");
  if (!chat) {
    const remembered = localStorage.getItem(threadKey(agent));
    chat = newChat(agent, remembered);
    chats.set(agent, chat);
    if (remembered) await restore(agent, chat, send);
  }
  const text = el("textarea", { id: "chat-input", "aria-label": "Message", rows: 3, placeholder: "Write a message; Enter sends, Shift+Enter is a new line" });
  const form = el("form", { class: "chat-form", onsubmit: (e) => {
    e.preventDefault();
    const msg = text.value.trim();
    if (!msg || send.disabled) return;
    text.value = "";
    chat.log.append(el("div", { class: "msg user" }, msg));
    turn(agent, chat, { messages: [{ id: crypto.randomUUID(), role: "user", content: msg }] }, send);
  } }, text, el("div", { class: "actions" }, send, el("button", { type: "button", class: "small", onclick: () => {
    chat = newChat(agent);
    chats.set(agent, chat);
    wrap.replaceChildren(chat.log);
  } }, "New conversation")));
  text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  const wrap = el("div", {}, chat.log);
  return el("div", { class: "chat" }, wrap, form);
}

/** newChat is agent's conversation on threadId (none: a fresh thread), which the browser remembers. */
function newChat(agent, threadId) {
  threadId ||= crypto.randomUUID();
  localStorage.setItem(threadKey(agent), threadId);
  return { threadId, log: el("div", { id: "chat-log", class: "chat-log", "aria-live": "polite" }), calls: new Map() };
}

/**
 * history reads a page of the thread's transcript (the newest, or the one
 * before cursor); null when the session does not exist (no turn yet).
 */
async function history(agent, threadId, cursor) {
  const path = `/api/agents/${encodeURIComponent(agent)}/sessions/${encodeURIComponent(threadId)}` + (cursor ? `?cursor=${encodeURIComponent(cursor)}` : "");
  const r = await fetch(apiBase + path, { headers: await authHeaders(chatAuth) });
  const body = await r.json().catch(() => null);
  if (r.status === 404) return null;
  if (!r.ok) throw new APIError(r.status, body, `GET ${path}: HTTP ${r.status}`);
  return body;
}

/** restore draws the stored transcript of chat's thread and asks again for the approvals it waits on. */
async function restore(agent, chat, button) {
  try {
    const page = await history(agent, chat.threadId);
    if (!page) return;
    if (page.nextCursor) chat.log.append(earlier(agent, chat, page.nextCursor));
    chat.log.append(...drawItems(chat, page.items));
    for (const p of page.pending) if (p.kind === "approval") askApproval(agent, chat, { id: p.id, toolCallId: p.id }, button);
  } catch (err) {
    chat.log.append(errorBox(err));
  }
}

/** earlier is a button that replaces itself with the transcript page before cursor. */
function earlier(agent, chat, cursor) {
  const b = el("button", { type: "button", class: "small earlier", onclick: async () => {
    b.disabled = true;
    try {
      const page = await history(agent, chat.threadId, cursor);
      b.replaceWith(...(page.nextCursor ? [earlier(agent, chat, page.nextCursor)] : []), ...drawItems(chat, page.items));
    } catch (err) {
      b.replaceWith(errorBox(err));
    }
  } }, "Earlier messages");
  return b;
}

/** drawItems returns the elements of stored transcript items: messages, and tool calls with their results. */
function drawItems(chat, items) {
  return items.map((it) => {
    if (it.type === "user") return el("div", { class: "msg user" }, it.text);
    if (it.type === "assistant") return el("div", { class: "msg assistant" }, el("span", {}, it.text));
    const card = toolCard(chat, it.id, it.name, JSON.stringify(it.arguments ?? {}));
    if (it.result) addResult(chat, it.id, it.result.content, it.result.isError);
    return card;
  });
}

/**
 * toolCard is the card of a tool call, registered in chat.calls with the
 * arguments' text so far (raw: streamed pieces are appended to it).
 */
function toolCard(chat, id, name, args) {
  const pre = el("pre", { class: "args" });
  const card = el("div", { class: "tool-call", "data-call": id }, el("b", {}, shown(name)), pre);
  const call = { card, pre, raw: args };
  chat.calls.set(id, call);
  endArgs(call);
  return card;
}

/**
 * addArgs appends a streamed piece of a call's arguments, shown as it
 * comes (linear in the arguments' size, however many pieces).
 */
function addArgs(call, text) {
  call.raw += text;
  call.pre.append(...shown(text));
}

/** endArgs redraws a call's whole arguments, pretty-printed and shown. */
function endArgs(call) {
  let pretty = call.raw;
  try {
    pretty = JSON.stringify(JSON.parse(call.raw), null, 2);
  } catch {
    // not JSON: shown as it came
  }
  call.pre.replaceChildren(...shown(pretty));
}

/**
 * addResult shows a tool call's result on its card (the log when there is
 * none); a call answered no longer waits for approval, so its Approve and
 * Refuse go.
 */
function addResult(chat, id, content, isError) {
  const call = chat.calls.get(id);
  call?.card.querySelector(".approval")?.remove();
  call?.card.classList.toggle("failed", !!isError);
  (call?.card ?? chat.log).append(el("div", { class: isError ? "result error" : "result" }, isError ? "✗ " : "→ ", el("code", {}, shown(content))));
}

/**
 * markErrors reads back the newest page of the thread's transcript, which
 * says which tool results were errors (the agent-UI wire's results do
 * not), and marks their cards.
 */
async function markErrors(agent, chat) {
  const page = await history(agent, chat.threadId).catch(() => null);
  for (const it of page?.items ?? []) {
    const card = it.result?.isError && chat.calls.get(it.id)?.card;
    if (!card || card.classList.contains("failed")) continue;
    card.classList.add("failed");
    const result = card.querySelector(".result");
    result?.classList.add("error");
    if (result?.firstChild?.nodeType === Node.TEXT_NODE) result.firstChild.textContent = "✗ ";
  }
}

/**
 * hidden matches what a text can hide behind: C0 and C1 controls (but tab
 * and newline), bidi controls, zero-width and other invisible characters,
 * lone surrogates, tag characters, and runs of eight or more spaces.
 */
const hidden = /[\u0000-\u0008\u000B-\u001F\u007F-\u009F\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u202A-\u202E\u2060-\u206F\u3164\uFEFF\uFFA0\uFFF9-\uFFFB\uD800-\uDFFF]|[\u{E0000}-\u{E007F}]| {8,}/gu;

/**
 * shown returns text as nodes in which whatever hidden matches is a marked
 * ⟨U+202E⟩ (or ⟨3000 spaces⟩), so it can be seen and cannot reorder or hide
 * the text around it.
 */
function shown(value) {
  const text = String(value), out = [];
  let last = 0;
  for (const m of text.matchAll(hidden)) {
    if (m.index > last) out.push(text.slice(last, m.index));
    const c = m[0];
    const label = c[0] === " " ? `${c.length} spaces` : `U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
    out.push(el("mark", { class: "hidden-char", title: "a character that does not show by itself" }, `⟨${label}⟩`));
    last = m.index + c.length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

/**
 * turn posts one RunAgentInput (input: its messages or resume entries) on
 * chat's thread and draws the streamed events; button is disabled meanwhile.
 */
async function turn(agent, chat, input, button) {
  button.disabled = true;
  const stop = new AbortController();
  const status = el("p", { class: "note chat-status" }, "… ",
    el("button", { type: "button", class: "small", onclick: () => stop.abort() }, "Stop"));
  chat.log.append(status);
  try {
    const r = await fetch(apiBase + "/chat", {
      method: "POST",
      signal: stop.signal,
      headers: { ...(await authHeaders(chatAuth)), "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify({ threadId: chat.threadId, runId: "", messages: [], tools: [], context: [], forwardedProps: { agent }, ...input }),
    });
    if (!r.ok || !r.body) {
      const body = await r.json().catch(() => null);
      throw new Error(body?.message ?? `POST /chat: HTTP ${r.status}`);
    }
    const draw = drawer(agent, chat, button);
    let tools = false;
    for await (const ev of sseEvents(r.body)) {
      tools ||= ev.type === "TOOL_CALL_RESULT";
      draw(ev);
    }
    if (tools) await markErrors(agent, chat);
  } catch (err) {
    // Stop hangs up: the server stops the turn and records it as stopped.
    chat.log.append(stop.signal.aborted ? el("p", { class: "note stopped" }, "Stopped.") : errorBox(err));
  } finally {
    status.remove();
    button.disabled = false;
  }
}

/** sseEvents yields the JSON data of each server-sent event of body. */
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n/g, "\n");
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (data) yield JSON.parse(data);
    }
  }
}

/** drawer returns the function drawing one AG-UI event of a turn into chat.log. */
function drawer(agent, chat, button) {
  const texts = new Map(); // messageId → its text node
  return (ev) => {
    switch (ev.type) {
      case "TEXT_MESSAGE_START": {
        const body = el("span", {});
        texts.set(ev.messageId, body);
        chat.log.append(el("div", { class: "msg assistant" }, body));
        break;
      }
      case "TEXT_MESSAGE_CONTENT":
        texts.get(ev.messageId)?.append(ev.delta);
        break;
      case "TOOL_CALL_START":
        chat.log.append(toolCard(chat, ev.toolCallId, ev.toolCallName, ""));
        break;
      case "TOOL_CALL_ARGS": {
        const call = chat.calls.get(ev.toolCallId);
        if (call) addArgs(call, ev.delta);
        break;
      }
      case "TOOL_CALL_END": {
        const call = chat.calls.get(ev.toolCallId);
        if (call) endArgs(call);
        break;
      }
      case "TOOL_CALL_RESULT":
        addResult(chat, ev.toolCallId, ev.content);
        break;
      case "RUN_FINISHED":
        for (const i of ev.outcome?.type === "interrupt" ? ev.outcome.interrupts : []) askApproval(agent, chat, i, button);
        break;
      case "RUN_ERROR":
        chat.log.append(errorBox(new Error(ev.code ? `${ev.message} (${ev.code})` : ev.message)));
        break;
    }
  };
}

/** askApproval adds Approve and Refuse to the call interrupt i waits on; either resumes the turn. */
function askApproval(agent, chat, i, button) {
  const answer = (approved) => () => {
    box.replaceChildren(el("span", { class: "note" }, approved ? "Approved." : "Refused."));
    const entry = approved ? { interruptId: i.id, status: "resolved", payload: { approved: true } } : { interruptId: i.id, status: "cancelled" };
    turn(agent, chat, { resume: [entry] }, button);
  };
  const box = el("div", { class: "approval" }, el("span", {}, "Needs your approval of exactly the call above. "),
    el("button", { type: "button", onclick: answer(true) }, "Approve"), " ",
    el("button", { type: "button", class: "danger", onclick: answer(false) }, "Refuse"));
  (chat.calls.get(i.toolCallId)?.card ?? chat.log).append(box);
}
