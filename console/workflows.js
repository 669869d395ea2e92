// The workflows pages: the list, and a workflow's page with its schemas
// and the playground (a generated form synced both ways with a raw JSON
// editor; raw JSON alone without a schema the form can draw).

import { api, el, pretty, errorBox, codeBlock, when, badge } from "./dom.js";
import { Form, drawable } from "./schemaform.js";

/** whenIn formats t in the schedule's time zone, with the zone's name (the column beside it names the zone: the browser's own would mislead). */
function whenIn(t, zone) {
  if (!t) return "";
  try {
    return new Date(t).toLocaleString(undefined, { timeZone: zone, timeZoneName: "short" });
  } catch {
    return when(t); // a zone this browser does not know
  }
}

/** workflowsPage lists the workflows, and the schedules of those that declare one. */
export async function workflowsPage() {
  const [{ items }, schedules] = await Promise.all([
    api("GET", "/api/workflows"),
    api("GET", "/api/schedules").then((r) => r.items, () => []),
  ]);
  const rows = items.map((w) => el("tr", {},
    el("td", {}, el("a", { href: `#/workflows/${encodeURIComponent(w.name)}` }, w.name)),
    el("td", {}, w.hasSchema ? "declared" : el("span", { class: "muted" }, "none (raw JSON)")),
    el("td", {}, el("code", {}, w.trigger)),
    el("td", {}, el("a", { href: `#/runs?workflow=${encodeURIComponent(w.name)}` }, "runs"))));
  return el("section", {},
    el("h1", {}, "Workflows"),
    items.length
      ? el("table", { class: "list", id: "workflows" }, el("thead", {}, el("tr", {}, el("th", {}, "Workflow"), el("th", {}, "Schema"), el("th", {}, "Start route"), el("th", {}, ""))), el("tbody", {}, rows))
      : el("p", { class: "muted" }, "No workflows yet: add a file such as workflows/hello.workflow.ts with a function marked \"use workflow\"."),
    schedules.length ? schedulesTable(schedules) : null);
}

/** schedulesTable lists schedules (GET /api/schedules items), each with a Pause or Resume button. */
function schedulesTable(schedules) {
  const note = el("div", { "aria-live": "polite" });
  const row = (s) => {
    const action = s.paused ? "resume" : "pause";
    const button = el("button", { type: "button", "aria-label": `${action} ${s.workflow}` }, s.paused ? "Resume" : "Pause");
    const tr = el("tr", { "data-workflow": s.workflow },
      el("td", {}, s.workflow),
      el("td", {}, el("code", {}, s.cron)),
      el("td", {}, s.timezone),
      el("td", {}, s.paused ? badge("paused") : whenIn(s.nextFires[0], s.timezone)),
      el("td", {}, s.lastRun ? el("a", { href: `#/runs/${encodeURIComponent(s.lastRun.runId)}` }, when(s.lastRun.scheduledAt)) : ""),
      el("td", {}, button));
    button.addEventListener("click", async () => {
      button.disabled = true;
      note.replaceChildren();
      try {
        const { schedule } = await api("POST", `/api/schedules/${encodeURIComponent(s.workflow)}/${action}`);
        tr.replaceWith(row(schedule));
      } catch (err) {
        note.replaceChildren(errorBox(err));
        button.disabled = false;
      }
    });
    return tr;
  };
  return el("section", {},
    el("h2", {}, "Schedules"),
    el("table", { class: "list", id: "schedules" },
      el("thead", {}, el("tr", {}, el("th", {}, "Workflow"), el("th", {}, "Cron"), el("th", {}, "Time zone"), el("th", {}, "Next fire"), el("th", {}, "Last run"), el("th", {}, ""))),
      el("tbody", {}, schedules.map(row))),
    note);
}

/** playgroundPage shows a workflow's schemas and starts runs of it; ?from=<runId> prefills the input of an earlier run. */
export async function playgroundPage(ctx, name) {
  const enc = encodeURIComponent(name);
  const [{ schema }, recent] = await Promise.all([
    api("GET", `/api/workflows/${enc}/schema`),
    api("GET", `/api/runs?workflow=${enc}&limit=10`).then((r) => r.items, () => []),
  ]);
  let initial;
  let prefillNote = null;
  const from = ctx.params.get("from");
  if (from) {
    const { run } = await api("GET", `/api/runs/${encodeURIComponent(from)}`);
    initial = run.input;
    prefillNote = el("p", { class: "note", id: "prefill" }, "Input of run ", el("a", { href: `#/runs/${encodeURIComponent(from)}` }, from), ` (${when(run.createdAt)}).`);
  }

  const editor = el("textarea", { id: "input-json", class: "json", rows: 14, spellcheck: "false", "aria-label": "Input JSON" });
  const jsonNote = el("p", { class: "note", id: "json-note" });
  const form = drawable(schema.input) ? new Form(schema.input, initial, (v) => { editor.value = pretty(v); jsonNote.textContent = ""; }) : null;
  editor.value = pretty(form ? form.value() : initial ?? {});
  editor.addEventListener("input", () => {
    let v;
    try {
      v = JSON.parse(editor.value);
    } catch (e) {
      jsonNote.textContent = `Not JSON yet (${e.message}); the form keeps its last valid state.`;
      return;
    }
    jsonNote.textContent = "";
    form?.set(v);
  });

  const result = el("div", { id: "start-result", "aria-live": "polite" });
  const start = el("button", { id: "start", type: "submit" }, "Start run");
  const submit = async (e) => {
    e.preventDefault();
    start.disabled = true;
    result.replaceChildren();
    try {
      result.replaceChildren(receipt(await api("POST", `/api/workflows/${enc}/start`, editor.value)));
    } catch (err) {
      result.replaceChildren(errorBox(err));
    } finally {
      start.disabled = false;
    }
  };

  const prefill = recent.length
    ? el("label", { class: "inline" }, "Prefill from an earlier run ",
      el("select", { id: "prefill-run", onchange: (e) => { if (e.target.value) location.hash = `#/workflows/${enc}?from=${encodeURIComponent(e.target.value)}`; } },
        el("option", { value: "" }, "choose a run…"),
        recent.map((r) => el("option", { value: r.runId, selected: r.runId === from }, `${when(r.createdAt)} · ${r.status} · ${r.runId.slice(0, 8)}`))))
    : null;

  const editors = form
    ? el("div", { class: "split" }, el("div", {}, el("h3", {}, "Form"), form.node), el("div", {}, el("h3", {}, "JSON"), editor, jsonNote))
    : el("div", {}, el("p", { class: "note", id: "no-schema" }, schema.input ? "The form cannot draw this input schema: write the input as JSON." : "This workflow declares no input schema: write the input as JSON."), editor, jsonNote);

  return el("section", {},
    el("h1", {}, name),
    el("p", {}, el("code", {}, `POST /api/workflows/${name}/start`), " · ", el("a", { href: `#/runs?workflow=${enc}` }, "runs of this workflow")),
    el("details", { class: "schemas" }, el("summary", {}, "Schemas"),
      el("h3", {}, "Input"), schema.input ? codeBlock(schema.input) : el("p", { class: "muted" }, "none"),
      el("h3", {}, "Output"), schema.output ? codeBlock(schema.output) : el("p", { class: "muted" }, "none")),
    el("h2", {}, "Playground"),
    prefill, prefillNote,
    el("form", { id: "playground", onsubmit: submit }, editors, el("p", {}, start)),
    result);
}

/** receipt shows a start receipt: the run link, or the queued sentence of a limited workflow. */
function receipt(rc) {
  const head = rc.status === "queued"
    ? el("p", {}, badge("queued"), ` ${rc.workflowName} runs one at a time and a run of it is active: this start is queued and begins when that run ends.`)
    : el("p", {}, badge("started"), " Run ", el("a", { href: `#/runs/${encodeURIComponent(rc.runId)}`, id: "run-link" }, rc.runId), " started.");
  return el("div", { class: "receipt" }, head, el("details", {}, el("summary", {}, "Receipt"), codeBlock(rc)));
}
