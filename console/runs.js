// The runs pages: the list with filters, and a run's live timeline (steps,
// attempts, errors, sleeps, hooks, children, logs, its stream) with cancel
// and hook resume.

import { api, apiBase, authHeaders, el, fill, errorBox, codeBlock, when, duration, badge } from "./dom.js";

/** statuses are the run states the list filters on (workflow_history.go runStates). */
const statuses = ["queued", "pending", "running", "waiting", "completed", "failed", "cancelled"];

/** terminal reports whether a run status is final. */
const terminal = (s) => s === "completed" || s === "failed" || s === "cancelled";

/** listInterval and runInterval are how often the pages poll while shown (ms). */
const listInterval = 2000;
const runInterval = 1000;

/** ranges are the time ranges the list filters on: GET /api/runs?since= ages. */
const ranges = [["", "any time"], ["1h", "last hour"], ["24h", "last 24 hours"], ["7d", "last 7 days"]];

/**
 * runsPage lists runs newest first, filtered by ?status=, ?workflow=,
 * ?since= (a time range) and ?q= (text in a run's input, output or
 * error), all kept in the address, refreshing while shown.
 */
export async function runsPage(ctx) {
  const status = ctx.params.get("status") ?? "";
  const workflow = ctx.params.get("workflow") ?? "";
  const since = ctx.params.get("since") ?? "";
  const text = ctx.params.get("q") ?? "";
  const { items: workflows } = await api("GET", "/api/workflows");
  // A filter change reads every control, so a change made while the
  // previous list is still shown keeps the other filters as the user sees them.
  const filter = () => {
    const p = new URLSearchParams();
    if (statusSel.value) p.set("status", statusSel.value);
    if (workflowSel.value) p.set("workflow", workflowSel.value);
    if (sinceSel.value) p.set("since", sinceSel.value);
    if (search.value.trim()) p.set("q", search.value.trim());
    location.hash = `#/runs${p.size ? "?" + p : ""}`;
  };
  const statusSel = el("select", { id: "filter-status", onchange: filter }, el("option", { value: "" }, "any"),
    statuses.map((s) => el("option", { value: s, selected: s === status }, s)));
  const workflowSel = el("select", { id: "filter-workflow", onchange: filter }, el("option", { value: "" }, "any"),
    workflows.map((w) => el("option", { value: w.name, selected: w.name === workflow }, w.name)));
  const sinceSel = el("select", { id: "filter-since", onchange: filter },
    ranges.map(([v, label]) => el("option", { value: v, selected: v === since }, label)));
  const search = el("input", { type: "search", id: "filter-q", value: text, placeholder: "an order id, an error…", "aria-label": "Search input, output and error" });
  const searchForm = el("form", { role: "search", onsubmit: (e) => { e.preventDefault(); filter(); } }, search);
  const filters = el("div", { class: "filters" }, el("label", {}, "Status ", statusSel), el("label", {}, "Workflow ", workflowSel),
    el("label", {}, "Created ", sinceSel), searchForm);
  const body = el("div", {});
  const query = new URLSearchParams({ view: "summary" }); // a list needs no inputs, calls or logs
  if (status) query.set("status", status);
  if (workflow) query.set("workflow", workflow);
  if (since) query.set("since", since);
  if (text) query.set("q", text);

  let older = false; // a later page is shown: stop refreshing the first
  const load = async () => {
    const page = await api("GET", `/api/runs?${query}`);
    if (older) return;
    // The refresh keeps the run the keyboard is on (j/k, app.js) focused.
    const focused = document.activeElement?.closest?.("#runs tr")?.dataset.run;
    const rows = el("tbody", {}, page.items.map(runRow));
    const table = el("table", { class: "list", id: "runs" }, el("thead", {}, el("tr", {}, ["Run", "Workflow", "Status", "Trigger", "Created", "Duration"].map((h) => el("th", {}, h)))), rows);
    const more = page.nextCursor ? el("button", { type: "button", class: "small", onclick: async (e) => {
      older = true;
      e.target.disabled = true;
      const next = await api("GET", `/api/runs?${query}&cursor=${encodeURIComponent(page.nextCursor)}`);
      rows.append(...next.items.map(runRow));
      page.nextCursor = next.nextCursor;
      if (!next.nextCursor) e.target.remove();
      else e.target.disabled = false;
    } }, "Older runs") : null;
    fill(body,
      page.queued.length ? el("div", {}, el("h2", {}, "Queued"), el("ul", { id: "queued" }, page.queued.map((q) => el("li", {}, badge("queued"), ` ${q.workflowName} · ${when(q.createdAt)} · `, el("code", {}, JSON.stringify(q.input)))))) : null,
      page.items.length ? table : el("p", { class: "muted" }, "No runs match."), more);
    if (focused) rows.querySelector(`tr[data-run="${CSS.escape(focused)}"] a`)?.focus();
  };
  await load();
  ctx.every(listInterval, load);
  return el("section", {}, el("h1", {}, "Runs"), filters, body);
}

/** runRow is one run in the list. */
function runRow(r) {
  const ms = r.endedAt ? new Date(r.endedAt) - new Date(r.createdAt) : undefined;
  return el("tr", { "data-run": r.runId },
    el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(r.runId)}` }, el("code", {}, r.runId.slice(0, 8)))),
    el("td", {}, r.workflowName || r.agent || ""),
    el("td", {}, badge(r.status)),
    el("td", {}, r.trigger),
    el("td", {}, when(r.createdAt)),
    el("td", {}, duration(ms)));
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
      fill(view, runView(run, hookForms, load, step, timeline), el("h2", {}, "Stream"), stream);
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

/** runView draws a run: header, actions, input and outcome, timeline, logs. */
function runView(run, hookForms, reload, step, timeline) {
  const actions = el("div", { class: "actions" });
  const actionResult = el("div", { id: "action-result" });
  if (!terminal(run.status)) {
    actions.append(el("button", { id: "cancel", type: "button", class: "danger", onclick: async (e) => {
      e.target.disabled = true;
      try {
        await api("POST", `/api/runs/${encodeURIComponent(run.runId)}/cancel`);
        await reload();
      } catch (err) {
        actionResult.replaceChildren(errorBox(err));
        e.target.disabled = false;
      }
    } }, "Cancel run"));
  }
  if (run.workflowName && !run.agent) {
    actions.append(el("a", { class: "button", href: `#/workflows/${encodeURIComponent(run.workflowName)}?from=${encodeURIComponent(run.runId)}` }, "Open in playground with this input"));
  }
  const ms = run.endedAt ? new Date(run.endedAt) - new Date(run.createdAt) : undefined;
  const facts = [
    ["Run", [el("code", {}, run.runId), " ", copyButton(run.runId, "Copy the run id")]],
    ["Trace", el("code", {}, run.traceId)],
    ["Trigger", run.trigger],
    ["Version", run.version ? el("code", {}, run.version) : null],
    ["Parent", run.parentRunId ? el("a", { href: `#/runs/${encodeURIComponent(run.parentRunId)}` }, el("code", {}, run.parentRunId)) : null],
    ["Agent", run.agent ? `${run.agent} (${run.wire}${run.sessionId ? ", session " + run.sessionId : ""})` : null],
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

/** callDetail is a call's detail panel: its attempts, error, result and log lines. */
function callDetail(c, run) {
  const logs = (run.logs ?? []).filter((l) => l.seq === c.seq);
  return [
    (c.attempts ?? []).map((a) => el("div", { class: a.error ? "attempt failed" : "attempt" }, `attempt ${a.attempt}: `, a.error ? `failed (${a.error.name || "Error"}: ${a.error.message})` : "ok",
      ` at ${when(a.startedAt)}, in ${duration(Date.parse(a.endedAt) - Date.parse(a.startedAt))}`)),
    c.inflight ? el("div", { class: "attempt" }, `attempt ${c.inflight.attempt}: running since ${when(c.inflight.startedAt)}`) : null,
    c.kind === "hook" && c.status !== "waiting" ? el("div", {}, "token ", el("code", { class: "token" }, c.token)) : null,
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
    list.append(el("li", { class: d.superseded || superseded.has(key) ? "superseded" : "", "data-attempt": key, "data-index": d.index },
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
