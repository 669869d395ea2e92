// The runs pages: the list with filters, and a run's live timeline (steps,
// attempts, errors, sleeps, hooks, children, logs, its stream) with cancel
// and hook resume.

import { api, apiBase, authHeaders, el, fill, errorBox, codeBlock, when, duration, badge } from "./dom.js";
import { listAgents } from "./chat.js";

/** statuses are the run states the list filters on (workflow_history.go runStates). */
const statuses = ["queued", "pending", "running", "waiting", "completed", "failed", "cancelled"];

/** terminal reports whether a run status is final. */
const terminal = (s) => s === "completed" || s === "failed" || s === "cancelled";

/** listInterval and runInterval are how often the pages poll while shown (ms). */
const listInterval = 2000;
const runInterval = 1000;

/** ranges are the time ranges the list filters on: GET /api/runs?since= ages. */
const ranges = [["", "any time"], ["1h", "last hour"], ["24h", "last 24 hours"], ["7d", "last 7 days"]];

/** triggers are the run triggers the list filters on (workflow_history.go runTriggers). */
const triggers = ["http", "cli", "workflow", "agent", "schedule"];

/**
 * runsPage lists runs newest first, filtered by ?status= (one or more),
 * ?workflow=, ?trigger=, ?agent=, ?since= (a time range) and ?q= (text in a
 * run's input, output or error), all kept in the address. While shown it
 * updates the rows in place (what the reader opened, focused, selected or
 * scrolled to stays) and counts the runs created since as "N new runs"
 * rather than reshuffling the list. Runs can be selected, a page at a
 * time, to be cancelled or run again together.
 */
export async function runsPage(ctx) {
  const status = (ctx.params.get("status") ?? "").split(",").filter(Boolean);
  const workflow = ctx.params.get("workflow") ?? "";
  const trigger = ctx.params.get("trigger") ?? "";
  const agent = ctx.params.get("agent") ?? "";
  const since = ctx.params.get("since") ?? "";
  const text = ctx.params.get("q") ?? "";
  const [{ items: workflows }, agents] = await Promise.all([api("GET", "/api/workflows"), listAgents().catch(() => [])]);
  // A filter change reads every control, so a change made while the
  // previous list is still shown keeps the other filters as the user sees them.
  const filter = () => {
    const p = new URLSearchParams();
    const checked = statusBoxes.filter((b) => b.checked).map((b) => b.value);
    if (checked.length) p.set("status", checked.join(","));
    if (workflowSel.value) p.set("workflow", workflowSel.value);
    if (triggerSel.value) p.set("trigger", triggerSel.value);
    if (agentSel.value) p.set("agent", agentSel.value);
    if (sinceSel.value) p.set("since", sinceSel.value);
    if (search.value.trim()) p.set("q", search.value.trim());
    location.hash = `#/runs${p.size ? "?" + p : ""}`;
  };
  const statusBoxes = statuses.map((st) => el("input", { type: "checkbox", value: st, checked: status.includes(st), onchange: filter }));
  const statusPick = el("details", { class: "multi", id: "filter-status" }, el("summary", {}, "Status: ", status.length ? status.join(", ") : "any"),
    el("div", { class: "options" }, statuses.map((st, i) => el("label", {}, statusBoxes[i], " ", st))));
  const select = (id, label, current, values) => el("label", {}, `${label} `, el("select", { id, onchange: filter }, el("option", { value: "" }, "any"),
    values.map((v) => el("option", { value: v, selected: v === current }, v))));
  const workflowLabel = select("filter-workflow", "Workflow", workflow, workflows.map((w) => w.name));
  const triggerLabel = select("filter-trigger", "Trigger", trigger, triggers);
  const agentLabel = agents.length || agent ? select("filter-agent", "Agent", agent, [...new Set([...agents, agent].filter(Boolean))]) : null;
  const [workflowSel, triggerSel] = [workflowLabel, triggerLabel].map((l) => l.querySelector("select"));
  const agentSel = agentLabel?.querySelector("select") ?? { value: "" };
  const sinceSel = el("select", { id: "filter-since", onchange: filter },
    ranges.map(([v, label]) => el("option", { value: v, selected: v === since }, label)));
  const search = el("input", { type: "search", id: "filter-q", value: text, placeholder: "an order id, an error…", "aria-label": "Search input, output and error" });
  const searchForm = el("form", { role: "search", onsubmit: (e) => { e.preventDefault(); filter(); } }, search);
  const filters = el("div", { class: "filters" }, statusPick, workflowLabel, triggerLabel, agentLabel,
    el("label", {}, "Created ", sinceSel), searchForm);
  const query = new URLSearchParams({ view: "summary" }); // a list needs no inputs, calls or logs
  if (status.length) query.set("status", status.join(","));
  for (const [k, v] of [["workflow", workflow], ["trigger", trigger], ["agent", agent], ["since", since], ["q", text]]) if (v) query.set(k, v);

  const selected = new Set(); // run ids, kept across refreshes
  const shown = new Map(); // runId → its row
  const rows = el("tbody", {});
  const bulk = bulkBar(selected, shown, () => refresh());
  const all = el("input", { type: "checkbox", "aria-label": "Select every run shown", onchange: () => {
    for (const [id, tr] of shown) {
      const box = tr.querySelector("input[type=checkbox]");
      if (box.disabled) continue;
      box.checked = all.checked;
      if (all.checked) selected.add(id);
      else selected.delete(id);
    }
    bulk.update();
  } });
  const table = el("table", { class: "list", id: "runs" }, el("thead", {}, el("tr", {}, el("th", {}, all), ["Run", "Workflow", "Status", "Trigger", "Created", "Duration"].map((h) => el("th", {}, h)))), rows);
  const queuedBox = el("div", {});
  const fresh = el("div", { id: "new-runs" });
  const empty = el("p", { class: "muted" }, "No runs match.");
  const moreBox = el("div", {});
  let newest = null; // the createdAt and runId of the newest run drawn
  let nextCursor = null;
  const add = (r) => {
    const tr = runRow(r, selected, bulk.update);
    shown.set(r.runId, tr);
    return tr;
  };
  const drawMore = () => fill(moreBox, nextCursor ? el("button", { type: "button", class: "small", id: "older", onclick: async (e) => {
    e.target.disabled = true;
    const next = await api("GET", `/api/runs?${query}&cursor=${encodeURIComponent(nextCursor)}`);
    rows.append(...next.items.filter((r) => !shown.has(r.runId)).map(add));
    nextCursor = next.nextCursor;
    drawMore();
  } }, "Older runs") : null);
  /** draw shows page from scratch: the first load, a filter, or "N new runs". */
  const draw = (page) => {
    shown.clear();
    rows.replaceChildren(...page.items.map(add));
    newest = page.items[0] ?? null;
    nextCursor = page.nextCursor;
    table.hidden = !page.items.length;
    empty.hidden = !!page.items.length;
    fresh.replaceChildren();
    drawMore();
    bulk.update();
  };
  /** refresh updates the rows shown in place and counts the runs newer than them. */
  const refresh = async () => {
    const page = await api("GET", `/api/runs?${query}`);
    fill(queuedBox, page.queued.length ? [el("h2", {}, "Queued"), el("ul", { id: "queued" }, page.queued.map((q) => el("li", {}, badge("queued"), ` ${q.workflowName} · ${when(q.createdAt)} · `, el("code", {}, JSON.stringify(q.input)))))] : null);
    if (!newest) {
      if (page.items.length) draw(page);
      return;
    }
    let added = 0;
    for (const r of page.items) {
      const tr = shown.get(r.runId);
      if (tr) updateRow(tr, r);
      else if (r.createdAt > newest.createdAt || (r.createdAt === newest.createdAt && r.runId > newest.runId)) added++;
    }
    // Older rows than the first page's, shown by "Older runs", are read back by id only while active.
    const stale = [...shown.keys()].filter((id) => !page.items.some((r) => r.runId === id) && !terminal(shown.get(id).dataset.status));
    await Promise.all(stale.slice(0, 20).map(async (id) => {
      try {
        const { run } = await api("GET", `/api/runs/${encodeURIComponent(id)}`);
        updateRow(shown.get(id), run);
      } catch { /* left as it was */ }
    }));
    fill(fresh, added ? el("button", { type: "button", class: "small", onclick: () => { draw(page); } }, `${added === page.items.length ? added + "+" : added} new run${added === 1 ? "" : "s"}`) : null);
  };
  draw(await api("GET", `/api/runs?${query}`));
  ctx.every(listInterval, refresh);
  return el("section", {}, el("h1", {}, "Runs"), filters, queuedBox, fresh, bulk.node, table, empty, moreBox);
}

/**
 * bulkBar is what selected runs can be: cancelled (asked first) or run
 * again, each run by its own request, with a summary of what happened.
 */
function bulkBar(selected, shown, refresh) {
  const count = el("span", { id: "selected-count" });
  const out = el("div", { id: "bulk-result" });
  const each = async (verb, path, body) => {
    const ids = [...selected];
    const results = await Promise.allSettled(ids.map((id) => api("POST", `/api/runs/${encodeURIComponent(id)}/${path}`, body)));
    const refused = results.map((r, i) => [r, ids[i]]).filter(([r]) => r.status === "rejected");
    selected.clear();
    for (const tr of shown.values()) tr.querySelector("input[type=checkbox]").checked = false;
    fill(out, el("p", { class: "note", role: "status" }, `${verb} ${ids.length - refused.length} of ${ids.length}.`),
      refused.map(([r, id]) => el("p", { class: "error" }, el("code", {}, id.slice(0, 8)), ": ", r.reason.message)));
    update();
    await refresh();
  };
  const again = el("button", { type: "button", id: "bulk-rerun", onclick: () => each("Started again", "rerun") }, "Run again");
  const cancel = confirmed("bulk-cancel", "Cancel…", "Cancel the selected runs?", "Yes, cancel them", "No", () => each("Cancelled", "cancel"));
  const bar = el("div", { class: "actions bulk", hidden: true }, count, again, cancel);
  const node = el("div", {}, bar, out);
  const update = () => {
    for (const id of selected) if (!shown.has(id)) selected.delete(id);
    bar.hidden = selected.size === 0;
    count.textContent = `${selected.size} selected`;
  };
  return { node, update };
}

/** runRow is one run in the list, its checkbox kept in selected. */
function runRow(r, selected, changed) {
  const box = el("input", { type: "checkbox", "aria-label": `Select run ${r.runId.slice(0, 8)}`, checked: selected.has(r.runId), disabled: !!r.agent, onchange: () => {
    if (box.checked) selected.add(r.runId);
    else selected.delete(r.runId);
    changed();
  } });
  const tr = el("tr", { "data-run": r.runId },
    el("td", {}, box),
    el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(r.runId)}` }, el("code", {}, r.runId.slice(0, 8)))),
    el("td", {}, r.workflowName || r.agent || ""),
    el("td", { class: "status" }),
    el("td", {}, r.trigger),
    el("td", {}, when(r.createdAt)),
    el("td", { class: "duration" }));
  updateRow(tr, r);
  return tr;
}

/** updateRow writes a run's status and duration into its row, touching nothing else. */
function updateRow(tr, r) {
  if (tr.dataset.status === r.status && tr.dataset.ended === (r.endedAt ?? "")) return;
  tr.dataset.status = r.status;
  tr.dataset.ended = r.endedAt ?? "";
  fill(tr.querySelector(".status"), badge(r.status));
  fill(tr.querySelector(".duration"), duration(r.endedAt ? new Date(r.endedAt) - new Date(r.createdAt) : undefined));
}

/** runPage shows one run, polling GET /api/runs/{id} until it is terminal; it redraws only when the run changed. */
export async function runPage(ctx, id) {
  const path = `/api/runs/${encodeURIComponent(id)}`;
  const step = ctx.params.get("step"); // #/runs/<id>?step=N: that call, highlighted and scrolled to
  const view = el("section", { id: "run" });
  const hookForms = new Map(); // token → its resume form, kept across redraws
  const timeline = { open: new Set(), groups: new Set(), children: new Map(), failedOnly: false }; // what the reader opened, kept across redraws
  const stream = streamView(path, ctx.signal); // live on its own, kept across redraws
  let shown = "";
  const load = async () => {
    const { run } = await api("GET", path);
    const text = JSON.stringify(run);
    if (text !== shown) {
      shown = text;
      // The redraw keeps the keyboard on the call label it was on.
      const focused = document.activeElement?.matches?.("li.call button.label") && view.contains(document.activeElement) ? document.activeElement.closest("li.call").dataset.seq : null;
      fill(view, runView(run, hookForms, load, step, timeline), el("h2", {}, "Stream"), stream);
      if (focused) view.querySelector(`#timeline li.call[data-seq="${focused}"] button.label`)?.focus({ preventScroll: true });
    }
    return terminal(run.status);
  };
  if (!(await load())) ctx.every(runInterval, async () => { if (await load()) return false; });
  // After the router has put the page in place (and at its top).
  if (step) setTimeout(() => view.querySelector(`li.call[data-seq="${CSS.escape(step)}"]`)?.scrollIntoView({ block: "center" }), 0);
  return view;
}

/** copyButton copies text to the clipboard, saying so. */
function copyButton(text, label) {
  return el("button", { type: "button", class: "small copy", "aria-label": label, onclick: async (e) => {
    try {
      await navigator.clipboard.writeText(text);
      e.target.textContent = "Copied";
    } catch {
      e.target.textContent = "Copy failed";
    }
    setTimeout(() => { e.target.textContent = "Copy"; }, 1500);
  } }, "Copy");
}

/**
 * rerun starts a rerun of run (POST /api/runs/{id}/rerun; fromStep 0: run
 * again from the start) and opens the new run; a refusal shows in out.
 */
async function rerun(run, fromStep, out) {
  try {
    const rc = await api("POST", `/api/runs/${encodeURIComponent(run.runId)}/rerun`, fromStep ? { fromStep } : undefined);
    location.hash = `#/runs/${encodeURIComponent(rc.runId ?? rc.queueId)}`;
  } catch (err) {
    out.replaceChildren(errorBox(err));
  }
}

/**
 * confirmed is a button that asks before it acts: a first click shows
 * question with "Yes" (yes, which does it) and "No" (no) beside it.
 */
function confirmed(id, label, question, yes, no, act) {
  const box = el("span", { class: "confirm" });
  const ask = el("button", { id, type: "button", class: "danger", onclick: () => {
    ask.hidden = true;
    const keep = el("button", { type: "button", class: "small", onclick: () => { box.replaceChildren(); ask.hidden = false; ask.focus(); } }, no);
    const go = el("button", { type: "button", class: "danger", id: `${id}-confirm`, onclick: async (e) => {
      e.target.disabled = true;
      await act();
      box.replaceChildren();
      ask.hidden = false;
    } }, yes);
    fill(box, el("span", { role: "alert" }, question), " ", go, " ", keep);
    go.focus();
  } }, label);
  return [ask, box];
}

/** runView draws a run: header, actions, input and outcome, timeline, logs. */
function runView(run, hookForms, reload, step, timeline) {
  const actions = el("div", { class: "actions" });
  const actionResult = el("div", { id: "action-result" });
  if (!terminal(run.status)) {
    actions.append(...confirmed("cancel", "Cancel run", "Cancel this run? Its waiting calls end and it runs no further.", "Yes, cancel run", "Keep it running", async () => {
      try {
        await api("POST", `/api/runs/${encodeURIComponent(run.runId)}/cancel`);
        await reload();
      } catch (err) {
        actionResult.replaceChildren(errorBox(err));
      }
    }));
  }
  if (run.workflowName && !run.agent) {
    actions.append(el("button", { id: "rerun", type: "button", onclick: (e) => { e.target.disabled = true; rerun(run, 0, actionResult).finally(() => { e.target.disabled = false; }); } }, "Run again"));
    actions.append(el("a", { class: "button", href: `#/workflows/${encodeURIComponent(run.workflowName)}?from=${encodeURIComponent(run.runId)}` }, "Open in playground with this input"));
  }
  const runLink = (id) => el("a", { href: `#/runs/${encodeURIComponent(id)}` }, el("code", {}, id));
  const ms = run.endedAt ? new Date(run.endedAt) - new Date(run.createdAt) : undefined;
  const facts = [
    ["Run", [el("code", {}, run.runId), " ", copyButton(run.runId, "Copy the run id")]],
    ["Trace", el("code", {}, run.traceId)],
    ["Trigger", run.trigger],
    ["Version", run.version ? el("code", {}, run.version) : null],
    ["Parent", run.parentRunId ? runLink(run.parentRunId) : null],
    ["Rerun of", run.rerunOf ? [runLink(run.rerunOf), run.retryFromStep > 1 ? ` from step #${run.retryFromStep} (${run.retryFromStep === 2 ? "#1" : `#1–#${run.retryFromStep - 1}`} reused)` : ""] : null],
    ["Reruns", run.reruns?.length ? el("span", { id: "reruns" }, run.reruns.map((id, i) => [i ? ", " : "", runLink(id)])) : null],
    ["Agent", run.agent ? `${run.agent} (${run.wire})` : null],
    ["Session", run.agent && run.sessionId ? el("a", { href: `#/sessions/${encodeURIComponent(run.agent)}/${encodeURIComponent(run.sessionId)}` }, el("code", {}, run.sessionId)) : null],
    ["Model calls", run.agent ? turnTotals(run) : null],
    ["Created", when(run.createdAt)],
    ["Ended", run.endedAt ? `${when(run.endedAt)} (${duration(ms)})` : null],
  ].filter(([, v]) => v);
  return [
    el("h1", {}, run.workflowName || run.agent || "run", " ", el("span", { id: "run-status" }, badge(run.status))),
    el("p", { class: "muted", id: "live" }, terminal(run.status) ? "Ended." : "Live: refreshed every second."),
    el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    actions, actionResult,
    el("h2", {}, "Input"), codeBlock(run.input, { id: "run-input" }),
    run.output !== undefined ? [el("h2", {}, "Output"), codeBlock(run.output, { id: "run-output" })] : null,
    run.error ? [el("h2", {}, "Error"), errorView(run.error)] : null,
    el("h2", {}, "Timeline"),
    run.steps.length ? waterfall(run, timeline, hookForms, reload, step, "timeline") : el("p", { class: "muted" }, "Nothing yet."),
    el("h2", {}, "Logs"),
    logsView(run),
  ];
}

/** turnTotals sums a turn's model calls: their number and tokens. */
export function turnTotals(run) {
  const models = run.steps.filter((c) => c.kind === "model");
  const sum = (k) => models.reduce((a, c) => a + (c.model?.[k] ?? 0), 0);
  return `${models.length} (${sum("inputTokens")} tokens in, ${sum("outputTokens")} out)`;
}

/** errorView shows a run or step error with its source-mapped stack. */
const errorView = (e) => el("div", { class: "error" }, el("p", {}, el("b", {}, e.name || "Error"), ": ", e.message), e.stack ? el("pre", { class: "stack" }, e.stack) : null);

/** foldMin is how many consecutive calls of one step fold into one row. */
const foldMin = 3;

/**
 * waterfall draws a run's calls as rows against one time axis, the run's
 * own (issue 37, item 1): each row a label (its number, kind, name, status,
 * duration) and a track whose bars are placed by the call's start and end
 * within the run: a step's attempts each a segment (the backoff between
 * them a gap), sleeps and hook waits a waiting bar, a child run its bar
 * with the child's own rows on request. At least foldMin consecutive calls
 * of one step fold into one row ("importBatch ×200") that unfolds. "Failed
 * only" keeps the rows with a failure. A click on a label opens the
 * call's detail: its attempts, result, error and logs. What the reader
 * opened is kept in state across live redraws.
 */
function waterfall(run, state, hookForms, reload, step, id) {
  const t0 = Date.parse(run.createdAt);
  const ends = run.steps.flatMap((c) => [c.endedAt, ...(c.attempts ?? []).map((a) => a.endedAt)]).filter(Boolean).map(Date.parse);
  const t1 = run.endedAt ? Date.parse(run.endedAt) : Math.max(Date.now(), ...ends);
  const span = Math.max(t1 - t0, 1);
  const at = (t) => Math.min(100, Math.max(0, ((Date.parse(t) - t0) / span) * 100));
  const bar = (cls, from, to, title) => {
    const b = el("span", { class: `bar ${cls}`, title, "data-start": from, "data-end": to });
    b.style.left = `${at(from)}%`; // CSSOM, which the page's CSP allows (style attributes it does not)
    b.style.width = `${Math.max(at(to) - at(from), 0)}%`;
    return b;
  };
  const now = new Date().toISOString();
  const bars = (c) => {
    switch (c.kind) {
      case "step":
        return [...(c.attempts ?? []).map((a) => bar(a.error ? "failed" : "ok", a.startedAt, a.endedAt, `attempt ${a.attempt}: ${a.error ? "failed" : "ok"}`)),
          c.inflight ? bar("running", c.inflight.startedAt, now, `attempt ${c.inflight.attempt}: running`) : null];
      case "sleep":
      case "hook":
        return [bar(`wait ${c.status}`, c.startedAt, c.endedAt ?? (c.status === "waiting" ? now : c.startedAt), c.kind === "sleep" ? "sleeping" : "waiting for the hook")];
      case "model":
      case "tool":
        return [bar(`${c.kind} ${c.status}`, c.startedAt, c.endedAt ?? now, c.kind === "model" ? "model call" : "tool call")];
      default:
        return [bar(`child ${c.status}`, c.startedAt, c.endedAt ?? now, "child run")];
    }
  };
  const failure = (c) => c.status === "failed" || (c.attempts ?? []).some((a) => a.error);
  const row = (c, group) => {
    const li = el("li", { class: `call ${c.kind} ${c.status}${group !== undefined ? " member" : ""}${failure(c) ? " has-failure" : ""}${String(c.seq) === step ? " highlight" : ""}${state.open.has(c.seq) ? " open" : ""}`,
      "data-seq": c.seq, "data-group": group });
    if (group !== undefined && !state.groups.has(group)) li.hidden = true;
    const label = el("button", { type: "button", class: "label", "aria-expanded": String(state.open.has(c.seq)), onclick: () => {
      if (state.open.has(c.seq)) state.open.delete(c.seq);
      else state.open.add(c.seq);
      li.classList.toggle("open");
      label.setAttribute("aria-expanded", String(li.classList.contains("open")));
    } }, el("span", { class: "seq" }, `#${c.seq}`), " ", el("b", {}, c.kind), " ", c.name ? el("code", {}, c.name) : null, " ", badge(c.status),
    c.reused ? [" ", el("span", { class: "badge reused", title: `its outcome was reused from run ${run.rerunOf}` }, "reused")] : null,
    c.model ? el("span", { class: "muted tokens" }, ` ${c.model.inputTokens} in · ${c.model.outputTokens} out`) : null,
    c.approval ? [" ", el("span", { class: `badge ${c.approval.decision === "approved" ? "completed" : "failed"}` }, c.approval.decision)] : null,
    c.handoff ? [" ", el("span", { class: "badge waiting" }, handoffs[c.handoff] ?? c.handoff)] : null,
    c.durationMs !== undefined ? el("span", { class: "muted" }, " ", duration(c.durationMs)) : null);
    const head = el("div", { class: "row" }, el("div", { class: "call-head" }, label,
      el("a", { class: "seq-link", href: `${location.hash.split("?")[0]}?step=${c.seq}`, "aria-label": `Link to call #${c.seq}` }, "link")),
      el("div", { class: "track" }, bars(c)));
    li.append(head, ...callAlways(c, hookForms, reload, state), el("div", { class: "detail" }, callDetail(c, run)));
    return li;
  };
  const rows = [];
  for (let i = 0; i < run.steps.length;) {
    const c = run.steps[i];
    let j = i + 1;
    while (c.kind === "step" && j < run.steps.length && run.steps[j].kind === "step" && run.steps[j].name === c.name) j++;
    if (j - i < foldMin) {
      rows.push(row(c));
      i++;
      continue;
    }
    const calls = run.steps.slice(i, j);
    const key = c.seq;
    if (step && !state.revealed && calls.some((m) => String(m.seq) === step)) state.groups.add(key); // a link to a folded call unfolds it, once
    const last = calls.at(-1);
    const unfold = el("button", { type: "button", class: "small", "aria-expanded": String(state.groups.has(key)), onclick: () => {
      const open = !state.groups.has(key);
      if (open) state.groups.add(key);
      else state.groups.delete(key);
      unfold.textContent = open ? "Fold" : "Unfold";
      unfold.setAttribute("aria-expanded", String(open));
      for (const m of list.querySelectorAll(`li.call[data-group="${key}"]`)) m.hidden = !open;
    } }, state.groups.has(key) ? "Fold" : "Unfold");
    const status = calls.some(failure) ? "failed" : last.status;
    rows.push(el("li", { class: `group ${status}${calls.some(failure) ? " has-failure" : ""}`, "data-group-of": key },
      el("div", { class: "row" }, el("div", { class: "call-head" }, el("span", { class: "seq" }, `#${c.seq}–${last.seq}`), " ", el("code", {}, c.name), ` ×${calls.length} `, badge(status), " ", unfold),
        el("div", { class: "track" }, bar(`span ${status}`, c.startedAt, last.endedAt ?? now, `${calls.length} calls`)))));
    rows.push(...calls.map((m) => row(m, key)));
    i = j;
  }
  state.revealed = true;
  const list = el("ol", { class: `timeline${state.failedOnly ? " failed-only" : ""}`, id }, rows);
  const only = el("input", { type: "checkbox", id: `${id}-failed-only`, checked: state.failedOnly, onchange: () => {
    state.failedOnly = only.checked;
    list.classList.toggle("failed-only", only.checked);
  } });
  return [el("label", { class: "inline" }, only, " Failed only"), list];
}

/** callAlways is what a call shows whatever is opened: a sleep's wake time, a waiting hook's form, a child run's link and rows. */
function callAlways(c, hookForms, reload, state) {
  const out = [];
  switch (c.kind) {
    case "sleep":
      if (c.until) out.push(el("div", { class: "wake" }, c.status === "completed" ? "woke at " : "wakes at ", el("time", { datetime: c.until }, when(c.until))));
      break;
    case "hook":
      if (c.status === "waiting") {
        out.push(el("div", {}, "token ", el("code", { class: "token" }, c.token)));
        if (!hookForms.has(c.token)) hookForms.set(c.token, hookForm(c.token, reload));
        out.push(hookForms.get(c.token));
      }
      break;
    case "start":
    case "startAndWait":
      if (c.childRunId) out.push(childRows(c.childRunId, state));
      else if (c.queueId) out.push(el("div", { class: "muted" }, "child queued (its workflow's concurrency limit is reached)"));
      break;
  }
  return out;
}

/** childRows is a child run's link and, on request, its own rows inline (kept in state.children). */
function childRows(childId, state) {
  const box = el("div", { class: "child-rows" });
  const draw = (child) => fill(box, waterfall(child, { open: new Set(), groups: new Set(), children: new Map(), failedOnly: false }, new Map(), async () => {}, null, `child-${childId}`));
  const toggle = el("button", { type: "button", class: "small", "aria-expanded": String(state.children.has(childId)), onclick: async () => {
    if (state.children.has(childId)) {
      state.children.delete(childId);
      box.replaceChildren();
      toggle.textContent = "Show its calls";
      toggle.setAttribute("aria-expanded", "false");
      return;
    }
    try {
      const { run } = await api("GET", `/api/runs/${encodeURIComponent(childId)}`);
      state.children.set(childId, run);
      draw(run);
      toggle.textContent = "Hide its calls";
      toggle.setAttribute("aria-expanded", "true");
    } catch (err) {
      box.replaceChildren(errorBox(err));
    }
  } }, state.children.has(childId) ? "Hide its calls" : "Show its calls");
  if (state.children.has(childId)) draw(state.children.get(childId));
  return el("div", {}, "child run ", el("a", { class: "child", href: `#/runs/${encodeURIComponent(childId)}` }, el("code", {}, childId)), " ", toggle, box);
}

/** handoffs label a tool call a turn ended handing over. */
const handoffs = { approval: "asked for approval", client: "handed to the client" };

/** callDetail is a call's detail panel: its attempts, error, result and log lines, and a retry from it. */
function callDetail(c, run) {
  const logs = (run.logs ?? []).filter((l) => l.seq === c.seq);
  const out = el("div", {});
  return [
    c.reused ? el("p", { class: "note" }, "Reused: this call did not run again; its outcome is the one run ", el("a", { href: `#/runs/${encodeURIComponent(run.rerunOf)}` }, el("code", {}, run.rerunOf)), " journaled.") : null,
    run.workflowName && !run.agent ? [el("button", { type: "button", class: "small retry-from", onclick: (e) => {
      e.target.disabled = true;
      rerun(run, c.seq, out).finally(() => { e.target.disabled = false; });
    } }, `Retry from step #${c.seq}`), out] : null,
    (c.attempts ?? []).map((a) => el("div", { class: a.error ? "attempt failed" : "attempt" }, `attempt ${a.attempt}: `, a.error ? `failed (${a.error.name || "Error"}: ${a.error.message})` : "ok",
      ` at ${when(a.startedAt)}, in ${duration(Date.parse(a.endedAt) - Date.parse(a.startedAt))}`)),
    c.inflight ? el("div", { class: "attempt" }, `attempt ${c.inflight.attempt}: running since ${when(c.inflight.startedAt)}`) : null,
    c.kind === "hook" && c.status !== "waiting" ? el("div", {}, "token ", el("code", { class: "token" }, c.token)) : null,
    c.model ? el("p", { class: "model-call" }, `Model ${c.name ?? ""}: ${c.model.inputTokens} tokens in, ${c.model.outputTokens} out, in ${duration(c.durationMs)}`, c.model.finishReason ? `; it finished with ${c.model.finishReason}` : "", ".") : null,
    c.arguments !== undefined ? [el("h3", {}, "Arguments"), codeBlock(c.arguments)] : null,
    c.approval ? el("p", { class: "approval" }, `${c.approval.decision === "unanswered" ? "Not answered" : c.approval.decision === "approved" ? "Approved" : "Refused"}`,
      c.approval.by ? ` by ${c.approval.by}` : "", ` at ${when(c.approval.at)}`, c.approval.reason ? ` (reason: ${c.approval.reason})` : "", ".") : null,
    c.handoff ? el("p", { class: "note" }, c.handoff === "approval" ? "The turn ended asking the user to approve this call; the session's next turn holds the answer and what the tool did." : "The turn ended handing this call to the client to run; the session's next turn holds its result.") : null,
    c.error && !(c.attempts ?? []).length ? errorView(c.error) : null, // a step's error is its last attempt's, shown above
    c.result !== undefined ? [el("h3", {}, "Result"), codeBlock(c.result)] : null,
    logs.length ? [el("h3", {}, "Logs"), el("ul", { class: "call-logs" }, logs.map((l) => el("li", { class: l.level }, `${l.level}: `, el("code", {}, l.message))))] : null,
  ];
}

/** hookForm resumes a waiting hook with a JSON payload. */
function hookForm(token, reload) {
  const area = el("textarea", { class: "json small", rows: 3, spellcheck: "false", "aria-label": "Hook payload", value: "{}" });
  const out = el("div", {});
  const send = async (e) => {
    e.preventDefault();
    try {
      await api("POST", `/api/hooks/${encodeURIComponent(token)}`, area.value);
      out.replaceChildren(el("p", { class: "note" }, "Resumed."));
      await reload();
    } catch (err) {
      out.replaceChildren(errorBox(err));
    }
  };
  return el("form", { class: "hook-form", onsubmit: send }, area, el("button", { type: "submit" }, "Resume hook"), out);
}

/** logsView is the run's console lines: time, level, where (workflow or step#attempt), message. */
function logsView(run) {
  const logs = run.logs ?? [];
  if (!logs.length) return el("p", { class: "muted" }, "No logs.");
  return el("div", {},
    el("table", { class: "logs", id: "logs" }, el("tbody", {}, logs.map((l) => el("tr", { class: l.level },
      el("td", {}, new Date(l.at).toLocaleTimeString()), el("td", {}, l.level),
      el("td", {}, l.step ? `${l.step}#${l.attempt}` : "workflow"), el("td", {}, el("pre", {}, l.message)))))),
    run.logsDropped ? el("p", { class: "muted" }, `${run.logsDropped} more lines were dropped (the per-run limit).`) : null);
}

/** streamRetry is how long the stream waits before reconnecting after its connection dropped (ms). */
const streamRetry = 1000;

/**
 * streamView is the run's stream (GET {path}/stream, server-sent events read
 * with fetch so the console's credential goes with them): each chunk as it
 * is written, with its step and attempt; an attempt that failed and was
 * retried has its chunks struck through. After a dropped connection it
 * resumes from the last event (Last-Event-ID); it stops when the stream
 * ends or signal aborts (the page was left).
 */
function streamView(path, signal) {
  const list = el("ol", { class: "stream", id: "stream" });
  const state = el("p", { class: "muted", id: "stream-state" }, "Live.");
  const superseded = new Set(); // "seq.attempt" of the superseded attempts
  let last = 0;
  const add = (event, d) => {
    if (event === "superseded") {
      superseded.add(`${d.seq}.${d.attempt}`);
      for (const li of list.querySelectorAll(`li[data-attempt="${d.seq}.${d.attempt}"]`)) li.classList.add("superseded");
      list.append(el("li", { class: "note" }, `${d.step} attempt ${d.attempt} failed and was retried: its chunks above are superseded`));
      return;
    }
    const key = `${d.seq}.${d.attempt}`;
    // Text chunks of one attempt in a row read as one text (a model's
    // tokens, say), not a row each.
    const prev = list.lastElementChild;
    if (d.kind === "text" && prev?.dataset.attempt === key && prev.dataset.kind === "text") {
      prev.querySelector("pre").append(d.text);
      prev.dataset.chunks = String(Number(prev.dataset.chunks) + 1);
      return;
    }
    list.append(el("li", { "data-kind": d.kind, "data-chunks": 1, class: d.superseded || superseded.has(key) ? "superseded" : "", "data-attempt": key, "data-index": d.index },
      el("span", { class: "muted" }, `${d.step}#${d.attempt} `), d.kind === "text" ? el("pre", {}, d.text) : codeBlock(d.json)));
  };
  // handle applies one event block; it reports whether the stream ended.
  const handle = (block) => {
    let id = "", event = "message", data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("id: ")) id = line.slice(4);
      else if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data = line.slice(6);
    }
    if (!data) return false;
    const d = JSON.parse(data);
    if (event === "end") {
      state.textContent = list.children.length ? `Ended (${d.status}).` : `Ended (${d.status}): the run wrote no chunks.`;
      return true;
    }
    add(event, d);
    if (id) last = Number(id);
    return false;
  };
  const read = async () => {
    while (!signal.aborted) {
      try {
        const headers = await authHeaders();
        if (last) headers["last-event-id"] = String(last);
        const r = await fetch(apiBase + path + "/stream", { credentials: "same-origin", headers, signal });
        if (!r.ok) {
          state.replaceChildren(errorBox(new Error(`GET ${path}/stream: HTTP ${r.status}`)));
          return;
        }
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          for (let i; (i = buf.indexOf("\n\n")) >= 0; ) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            if (handle(block)) return;
          }
        }
      } catch {
        // dropped (the runtime restarting) or aborted: retry unless aborted
      }
      await new Promise((res) => setTimeout(res, streamRetry));
    }
  };
  read();
  return el("div", {}, state, list);
}
