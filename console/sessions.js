// A durable session's page (issue 37, item 5): every turn of one agent's
// session, oldest first, with what each cost (model calls, tokens, tool
// calls, time) and the session's totals; each turn links to its run page,
// where its model and tool calls are laid open.

import { api, el, fill, when, duration, badge } from "./dom.js";

/** sessionTurnsPage is the most turns the page reads. */
const sessionTurnsPage = 500;

/** sessionPage lists the turns of agent's session id (GET /api/runs?agent=&session=). */
export async function sessionPage(ctx, agent, id) {
  const query = new URLSearchParams({ agent, session: id, limit: String(sessionTurnsPage) });
  const body = el("div", {});
  let shown = "";
  const load = async () => {
    const page = await api("GET", `/api/runs?${query}`);
    const text = JSON.stringify(page.items);
    if (text === shown) return;
    shown = text;
    const turns = page.items.slice().reverse(); // oldest first: the conversation's order
    const rows = turns.map((t, i) => turnRow(t, i + 1));
    const total = (k) => rows.reduce((a, r) => a + r.figures[k], 0);
    fill(body,
      el("p", { class: "muted", id: "session-summary" }, `${turns.length} turn${turns.length === 1 ? "" : "s"}`, page.nextCursor ? ` (the latest ${sessionTurnsPage})` : "", "."),
      turns.length ? el("table", { class: "list", id: "session-turns" },
        el("thead", {}, el("tr", {}, ["Turn", "Started", "Status", "Wire", "Model calls", "Tokens in", "Tokens out", "Tool calls", "Duration"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows.map((r) => r.tr)),
        el("tfoot", {}, el("tr", { id: "session-totals" }, el("td", {}, "Total"), el("td", {}), el("td", {}), el("td", {}),
          ["models", "tokensIn", "tokensOut", "tools"].map((k) => el("td", {}, String(total(k)))), el("td", {}, duration(total("ms")))))) : el("p", { class: "muted" }, "No turns recorded for this session."));
  };
  await load();
  ctx.every(2000, load);
  return el("section", {}, el("h1", {}, "Session ", el("code", {}, id)), el("p", {}, "Agent ", el("b", {}, agent), " · ", el("a", { href: `#/runs?agent=${encodeURIComponent(agent)}&trigger=agent` }, "all its turns")), body);
}

/** turnRow is one turn with its figures, summed from its calls. */
function turnRow(t, n) {
  const models = t.steps.filter((c) => c.kind === "model");
  const figures = {
    models: models.length,
    tokensIn: models.reduce((a, c) => a + (c.model?.inputTokens ?? 0), 0),
    tokensOut: models.reduce((a, c) => a + (c.model?.outputTokens ?? 0), 0),
    tools: t.steps.filter((c) => c.kind === "tool").length,
    ms: t.endedAt ? new Date(t.endedAt) - new Date(t.createdAt) : 0,
  };
  const tr = el("tr", { "data-run": t.runId },
    el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(t.runId)}` }, `#${n}`)),
    el("td", {}, when(t.createdAt)), el("td", {}, badge(t.status)), el("td", {}, t.wire),
    ["models", "tokensIn", "tokensOut", "tools"].map((k) => el("td", {}, String(figures[k]))),
    el("td", {}, duration(figures.ms)));
  return { tr, figures };
}
