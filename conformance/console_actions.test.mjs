// Actions on runs and live updates in Chromium (issue 37, items 4 and 6),
// against a real svc dev whose project (SVC_PROJECT) this suite edits:
// "Run again" makes a new run linked both ways; after the code is fixed,
// "Retry from step #2" on a failed run makes a run that reuses step 1's
// journaled result and runs step 2 on the new code; runs selected in the
// list survive its refreshes and are cancelled together (after a
// confirmation), new runs are counted rather than shuffled in, and a run
// page's live redraw keeps an opened call open and focused.
// Environment: SVC_URL, SVC_PROJECT, SVC_ARTIFACTS.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { useBrowser } from "./browser.mjs";

const base = process.env.SVC_URL;
const { newPage, noConsoleErrors, shot } = useBrowser();
let page;

before(async () => {
  page = await newPage();
});

/** checkout is the workflow's source: its charge step fails until fixed. */
const checkout = (fixed) => `import { FatalError } from "svc";
async function reserve(id: string) { "use step"; return { id, token: crypto.randomUUID() }; }
async function charge(id: string) { "use step"; ${fixed ? "return { charged: id };" : 'throw new FatalError("card declined for " + id);'} }
export default async function checkout(input: { id: string }) {
  "use workflow";
  const r = await reserve(input.id);
  const c = await charge(input.id);
  return { token: r.token, ...c };
}
`;

/** start starts a workflow and waits (bounded) for its run; it returns the run. */
async function start(name, input, wait = "30s") {
  const r = await fetch(base + `/api/workflows/${name}/start?wait=${wait}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(input) });
  assert.ok(r.status === 200 || r.status === 202, `start ${name}: ${r.status}`);
  const body = await r.json();
  return body.run ?? body;
}

/** getRun reads a run. */
const getRun = async (id) => (await (await fetch(base + `/api/runs/${id}`)).json()).run;

/** waitStatus waits for the run page's status badge. */
const waitStatus = (status) => page.locator("#run-status", { hasText: status }).waitFor();

test("Run again and Retry from step make linked runs; the retry reuses step 1 and runs step 2 on the fixed code", async () => {
  const file = join(process.env.SVC_PROJECT, "workflows", "checkout.workflow.ts");
  writeFileSync(file, checkout(false));
  let failed;
  for (let i = 0; i < 60 && !failed?.runId; i++) {
    const r = await fetch(base + "/api/workflows/checkout/start?wait=30s", { method: "POST", headers: { "content-type": "application/json" }, body: '{"id":"ord_9"}' });
    if (r.status === 200) failed = (await r.json()).run;
    else await new Promise((res) => setTimeout(res, 250)); // the new workflow is being compiled
  }
  assert.equal(failed?.status, "failed", "the first checkout fails at its charge");
  await page.goto(base + `/#/runs/${failed.runId}`);
  await page.locator("dl.facts", { hasText: failed.runId }).waitFor(); // the new page, not the last one still shown
  await waitStatus("failed");
  await page.getByRole("button", { name: "Run again" }).click();
  await page.waitForURL((u) => /#\/runs\/[^?]+$/.test(u.hash) && !u.hash.endsWith(failed.runId));
  const againId = decodeURIComponent(new URL(page.url()).hash.slice("#/runs/".length));
  await page.locator("dd a", { hasText: failed.runId }).waitFor(); // "Rerun of": the new run's page
  await waitStatus("failed");
  const again = await getRun(againId);
  assert.equal(again.rerunOf, failed.runId);
  assert.notEqual(again.steps[0].result.token, failed.steps[0].result.token, "run again runs step 1 again");

  // Fix the code; wait until svc dev serves it.
  writeFileSync(file, checkout(true));
  let probe;
  for (let i = 0; i < 60 && probe?.status !== "completed"; i++) {
    probe = await start("checkout", { id: "probe" });
    if (probe.status !== "completed") await new Promise((res) => setTimeout(res, 250));
  }
  assert.equal(probe.status, "completed", "the fixed checkout completes");

  await page.goto(base + `/#/runs/${failed.runId}`);
  await page.locator("dl.facts", { hasText: failed.runId }).waitFor(); // the new page, not the last one still shown
  await page.locator('#timeline li.call[data-seq="2"] button.label').click();
  await page.getByRole("button", { name: "Retry from step #2" }).click();
  await page.waitForURL((u) => /#\/runs\/[^?]+$/.test(u.hash) && !u.hash.endsWith(failed.runId) && !u.hash.endsWith(againId));
  const retryId = decodeURIComponent(new URL(page.url()).hash.slice("#/runs/".length));
  await waitStatus("completed");
  await page.locator('#timeline li.call[data-seq="1"] .badge.reused').waitFor();
  assert.match(await page.locator("dl.facts").textContent(), /from step #2/);
  const retry = await getRun(retryId);
  assert.equal(retry.rerunOf, failed.runId);
  assert.equal(retry.retryFromStep, 2);
  assert.equal(retry.output.token, failed.steps[0].result.token, "step 1's journaled result is reused");
  assert.equal(retry.output.charged, "ord_9", "step 2 ran on the fixed code");
  assert.equal(retry.steps[0].reused, true);
  assert.equal(retry.steps[1].attempts.length, 1);
  await shot(page, "run-retried-from-step");

  // The first run links to both of its reruns, newest first.
  await page.goto(base + `/#/runs/${failed.runId}`);
  await page.locator("dl.facts", { hasText: failed.runId }).waitFor(); // the new page, not the last one still shown
  await page.locator("#reruns a").nth(1).waitFor();
  assert.deepEqual(await page.locator("#reruns a").allTextContents(), [retryId, againId]);
  assert.deepEqual((await getRun(failed.runId)).reruns, [retryId, againId]);

  // A step whose call did not complete cannot be retried from a later one: said, nothing started.
  const before = (await (await fetch(base + "/api/runs?workflow=checkout&limit=500&view=summary")).json()).items.length;
  const r = await fetch(base + `/api/runs/${failed.runId}/rerun`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"fromStep":3}' });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, "invalid_step");
  const unknown = await fetch(base + `/api/runs/${failed.runId}/rerun`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"from":2}' });
  assert.equal(unknown.status, 400);
  assert.equal((await (await fetch(base + "/api/runs?workflow=checkout&limit=500&view=summary")).json()).items.length, before);
  noConsoleErrors();
});

test("selected runs stay selected across refreshes, new runs are counted, and a bulk cancel asks first", async () => {
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await start("waiter", {}, "")).runId);
  await page.goto(base + "/#/runs?workflow=waiter&status=waiting");
  await page.locator("#runs tbody tr").nth(2).waitFor();
  for (const id of ids) await page.locator(`#runs tr[data-run="${id}"] input[type=checkbox]`).check();
  assert.equal(await page.locator("#selected-count").textContent(), "3 selected");
  const rows = await page.locator("#runs tbody tr").count();
  // A run started meanwhile is counted above the list, not shuffled into it.
  const late = (await start("waiter", {}, "")).runId;
  await page.locator("#new-runs button", { hasText: /^1 new run$/ }).waitFor();
  assert.equal(await page.locator("#runs tbody tr").count(), rows);
  assert.equal(await page.locator(`#runs tr[data-run="${late}"]`).count(), 0);
  for (const id of ids) assert.ok(await page.locator(`#runs tr[data-run="${id}"] input[type=checkbox]`).isChecked(), "kept selected");
  assert.equal(await page.locator("#selected-count").textContent(), "3 selected");
  await shot(page, "runs-selected");
  await page.getByRole("button", { name: "Cancel…" }).click();
  await page.getByRole("button", { name: "Yes, cancel them" }).click();
  await page.locator("#bulk-result", { hasText: "Cancelled 3 of 3." }).waitFor();
  for (const id of ids) assert.equal((await getRun(id)).status, "cancelled");
  assert.equal((await getRun(late)).status, "waiting", "the run not selected is left alone");
  await page.locator("#new-runs button").click();
  await page.locator(`#runs tr[data-run="${late}"]`).waitFor();
  await fetch(base + `/api/runs/${late}/cancel`, { method: "POST" });
  noConsoleErrors();
});

test("a run page's live redraw keeps an opened call open and focused", async () => {
  const run = await start("ticker", {}, "");
  await page.goto(base + `/#/runs/${run.runId}`);
  const first = page.locator('#timeline li.call[data-seq="1"]');
  await first.waitFor();
  await first.locator("button.label").click();
  await page.locator('#timeline li.call[data-seq="3"]').waitFor(); // redrawn since
  assert.match(await first.getAttribute("class"), /\bopen\b/);
  assert.equal(await page.evaluate(() => document.activeElement.closest("li.call")?.dataset.seq), "1");
  assert.equal(await page.evaluate(() => document.activeElement.classList.contains("label")), true);
  await fetch(base + `/api/runs/${run.runId}/cancel`, { method: "POST" });
  noConsoleErrors();
});

test("an agent's turn lays open its model calls, tool arguments and approval; the session page sums its turns", async () => {
  const chat = async (messages) => {
    const r = await fetch(base + "/openai/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer console", "x-svc-session": "sess-ui" },
      body: JSON.stringify({ model: "helper", messages }) });
    assert.equal(r.status, 200);
    return r.json();
  };
  const ask = await chat([{ role: "user", content: 'call refund {"orderId":"o-9"}' }]);
  const call = ask.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, "refund");
  await chat([{ role: "tool", tool_call_id: call.id, content: '{"approved":true}' }]);
  const turns = (await (await fetch(base + "/api/runs?agent=helper&session=sess-ui")).json()).items;
  assert.equal(turns.length, 2);
  const [second, first] = turns;
  assert.ok(first.steps.every((c) => c.status !== "waiting"), "the ended first turn shows no waiting call");

  await page.goto(base + `/#/runs/${first.runId}`);
  await page.locator("dl.facts", { hasText: first.runId }).waitFor();
  const asked = page.locator('#timeline li.call.tool');
  await asked.waitFor();
  assert.match(await asked.textContent(), /refund.*asked for approval/);
  assert.equal(await page.locator("#timeline li.call.waiting").count(), 0);

  await page.goto(base + `/#/runs/${second.runId}`);
  await page.locator("dl.facts", { hasText: second.runId }).waitFor(); // the new page, not the last one still shown
  const model = page.locator("#timeline li.call.model").first();
  await model.waitFor();
  const figures = second.steps.find((c) => c.kind === "model").model;
  assert.ok(figures.inputTokens > 0);
  assert.match(await model.textContent(), new RegExp(`${figures.inputTokens} in · ${figures.outputTokens} out`));
  const refund = page.locator("#timeline li.call.tool", { hasText: "refund" });
  assert.match(await refund.textContent(), /approved/);
  await refund.locator("button.label").click();
  assert.match(await refund.locator(".approval").textContent(), /^Approved by credential [0-9a-f]{8} at /);
  assert.match(await refund.locator(".detail").textContent(), /"orderId": "o-9"/);
  assert.match(await page.locator("dl.facts").textContent(), /Model calls\d+ \(\d+ tokens in, \d+ out\)/);
  await shot(page, "agent-turn");

  await page.locator("dd a", { hasText: "sess-ui" }).click();
  await page.waitForURL(/#\/sessions\/helper\/sess-ui$/);
  await page.locator("#session-turns tbody tr").nth(1).waitFor();
  const sum = (k) => turns.flatMap((t) => t.steps).filter((c) => c.kind === "model").reduce((a, c) => a + c.model[k], 0);
  const totals = await page.locator("#session-totals td").allTextContents();
  assert.deepEqual(totals.slice(4, 7), [String(turns.flatMap((t) => t.steps).filter((c) => c.kind === "model").length), String(sum("inputTokens")), String(sum("outputTokens"))]);
  assert.match(await page.locator("#session-summary").textContent(), /^2 turns\./);
  await shot(page, "session");
  noConsoleErrors();
});

test("a run's stream joins one attempt's text chunks into one row", async () => {
  const run = await start("talker", {});
  assert.equal(run.status, "completed");
  await page.goto(base + `/#/runs/${run.runId}`);
  await page.locator("#stream-state", { hasText: "Ended (completed)" }).waitFor();
  const rows = page.locator("#stream li");
  assert.equal(await rows.count(), 2, "five text chunks and a JSON one: two rows");
  assert.equal(await rows.first().locator("pre").textContent(), "Hello, world!");
  assert.equal(await rows.first().getAttribute("data-chunks"), "5");
  noConsoleErrors();
});
