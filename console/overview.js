// The overview (issue 37, item 2): what runs and how it goes, for a time
// range kept in the address (#/overview?since=24h): what is active now, the
// runs started over time stacked by status, each workflow's failure rate
// and p50/p95 duration, and the top errors, each linked to the runs list
// filtered to it. From GET /api/runs/stats, refreshed while shown.

import { api, el, fill, duration } from "./dom.js";

/** ranges are the overview's time ranges: GET /api/runs/stats?since= ages. */
const ranges = [["1h", "last hour"], ["24h", "last 24 hours"], ["7d", "last 7 days"]];

/** stacked are the statuses of the chart, bottom up. */
const stacked = ["completed", "failed", "cancelled", "running", "pending", "waiting", "queued"];

/** overviewPage draws the overview of ?since= (default 1h). */
export async function overviewPage(ctx) {
  const since = ranges.some(([v]) => v === ctx.params.get("since")) ? ctx.params.get("since") : "1h";
  const range = el("select", { id: "overview-since", "aria-label": "Time range", onchange: () => { location.hash = `#/overview?since=${range.value}`; } },
    ranges.map(([v, label]) => el("option", { value: v, selected: v === since }, label)));
  const body = el("div", {});
  const load = async () => {
    const { stats } = await api("GET", `/api/runs/stats?since=${since}`);
    fill(body, activeView(stats), chartView(stats), workflowsView(stats, since), errorsView(stats, since));
  };
  await load();
  ctx.every(5000, load);
  return el("section", { id: "overview" }, el("h1", {}, "Overview"), el("label", { class: "inline" }, "Runs created in the ", range), body);
}

/** runsLink is a link to the runs list with filters p. */
const runsLink = (p, ...children) => el("a", { href: `#/runs?${new URLSearchParams(p)}` }, ...children);

/** activeView is what is active now, each count linked to those runs. */
function activeView(st) {
  return el("div", { class: "cards", id: "active" }, ["running", "pending", "waiting", "queued"].map((s) =>
    el("div", { class: "card", "data-status": s }, el("div", { class: "figure" }, runsLink({ status: s }, String(st.active[s] ?? 0))), el("div", { class: "muted" }, s))));
}

/** chartView is the runs started in each bucket, stacked by status. */
function chartView(st) {
  const totals = st.buckets.map((b) => Object.values(b.counts).reduce((a, n) => a + n, 0));
  const top = Math.max(1, ...totals);
  const cols = st.buckets.map((b, i) => {
    const col = el("div", { class: "col", "data-total": totals[i], title: `${new Date(b.start).toLocaleString()}: ${totals[i]} runs` },
      stacked.filter((s) => b.counts[s]).map((s) => {
        const seg = el("span", { class: `seg ${s}`, title: `${s}: ${b.counts[s]}` });
        seg.style.height = `${(b.counts[s] / top) * 100}%`; // CSSOM: the CSP allows it
        return seg;
      }));
    return col;
  });
  const sum = totals.reduce((a, n) => a + n, 0);
  return el("figure", { class: "chart" }, el("div", { class: "bars", id: "chart", role: "img", "aria-label": `${sum} runs created in the range, by status over time` }, cols),
    el("figcaption", { class: "muted" }, `${sum} runs; a bar every ${duration(st.bucketMs)}; `, stacked.map((s) => el("span", { class: `key ${s}` }, s, " "))));
}

/** workflowsView is each workflow's runs, failure rate and durations. */
function workflowsView(st, since) {
  if (!st.workflows.length) return el("p", { class: "muted" }, "No workflow runs in this range.");
  return [el("h2", {}, "Workflows"), el("table", { class: "list", id: "overview-workflows" },
    el("thead", {}, el("tr", {}, ["Workflow", "Runs", "Failed", "Failure rate", "p50", "p95"].map((h) => el("th", {}, h)))),
    el("tbody", {}, st.workflows.map((w) => el("tr", { "data-workflow": w.workflow },
      el("td", {}, runsLink({ workflow: w.workflow, since }, w.workflow)), el("td", {}, String(w.runs)),
      el("td", {}, w.failed ? runsLink({ workflow: w.workflow, status: "failed", since }, String(w.failed)) : "0"),
      el("td", {}, `${(w.failureRate * 100).toFixed(1)}%`), el("td", {}, duration(w.p50Ms ?? undefined)), el("td", {}, duration(w.p95Ms ?? undefined))))))];
}

/** errorsView is the most frequent errors, each linked to its failed runs. */
function errorsView(st, since) {
  if (!st.topErrors.length) return el("p", { class: "muted" }, "No failed runs in this range.");
  return [el("h2", {}, "Top errors"), el("table", { class: "list", id: "top-errors" },
    el("thead", {}, el("tr", {}, ["Error", "Workflow", "Runs", "Newest"].map((h) => el("th", {}, h)))),
    el("tbody", {}, st.topErrors.map((e) => el("tr", {},
      el("td", {}, runsLink({ status: "failed", workflow: e.workflow, since, q: e.message.slice(0, 200) }, e.message)),
      el("td", {}, e.workflow), el("td", {}, String(e.count)),
      el("td", {}, el("a", { href: `#/runs/${encodeURIComponent(e.lastRunId)}` }, el("code", {}, e.lastRunId.slice(0, 8))))))))];
}
