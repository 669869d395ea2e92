// A run's waterfall (issue 37, item 1) in Chromium, against the journaled
// times of a run of 204 calls: a step, a step that fails its three attempts
// with backoff between them, a sleep, 200 calls of one step and a child
// run. Bars sit where the journal says (within 2 px), the failing step's
// attempts are three segments with gaps, the 200 calls fold into one row
// and the page fits in 3,000 px, "Failed only" keeps the failing row, a
// label opens its call's detail, and the child's calls show inline.
// Environment: SVC_URL, SVC_ARTIFACTS.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { useBrowser } from "./browser.mjs";

const base = process.env.SVC_URL;
const { newPage, noConsoleErrors, shot } = useBrowser();
let run;
let page;

before(async () => {
  const r = await fetch(base + "/api/workflows/timeline/start?wait=120s", { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
  assert.equal(r.status, 200);
  run = (await r.json()).run;
  assert.equal(run.status, "completed");
  page = await newPage();
  await page.setViewportSize({ width: 1440, height: 900 });
  await page.goto(base + `/#/runs/${run.runId}`);
  await page.locator("#timeline li.group").waitFor();
});

test("bars sit at the journaled times; the failing step's attempts are segments with the backoff between", async () => {
  const t0 = Date.parse(run.createdAt);
  const span = Date.parse(run.endedAt) - t0;
  const placed = await page.evaluate(() => [...document.querySelectorAll("#timeline > li:not([hidden]) .track .bar")].map((b) => {
    const track = b.parentElement.getBoundingClientRect();
    const r = b.getBoundingClientRect();
    return { start: b.dataset.start, end: b.dataset.end, left: r.left - track.left, width: r.width, trackWidth: track.width };
  }));
  assert.ok(placed.length >= 6, `${placed.length} bars`);
  for (const b of placed) {
    const want = ((Date.parse(b.start) - t0) / span) * b.trackWidth;
    assert.ok(Math.abs(b.left - want) <= 2, `a bar starting ${b.start} is at ${b.left.toFixed(1)} px; want ${want.toFixed(1)}`);
  }
  const flaky = run.steps.find((c) => c.name === "flaky");
  const journaled = flaky.attempts.map((a) => a.startedAt);
  const segments = placed.filter((b) => journaled.includes(b.start));
  assert.equal(segments.length, 3, "three attempts, three segments");
  for (let i = 1; i < 3; i++) {
    const gap = segments[i].left - (segments[i - 1].left + segments[i - 1].width);
    assert.ok(gap > 2, `the backoff before attempt ${i + 1} is a gap of ${gap.toFixed(1)} px`);
  }
  assert.equal(await page.locator(`#timeline li.call[data-seq="${flaky.seq}"] .bar.failed`).count(), 3);
  await shot(page, "waterfall");
  noConsoleErrors();
});

test("200 calls of one step fold into one row, and the page fits in 3,000 px", async () => {
  const group = page.locator("#timeline li.group");
  assert.match(await group.textContent(), /importBatch ×200/);
  const height = await page.evaluate(() => document.documentElement.scrollHeight);
  assert.ok(height <= 3000, `the run's page is ${height} px high`);
  await group.getByRole("button", { name: "Unfold" }).click();
  assert.equal(await page.locator("#timeline li.call.member:not([hidden])").count(), 200);
  await group.getByRole("button", { name: "Fold" }).click();
  assert.equal(await page.locator("#timeline li.call.member:not([hidden])").count(), 0);
  noConsoleErrors();
});

test("Failed only keeps the failing call; a label opens its detail", async () => {
  await page.getByLabel("Failed only").check();
  const visible = await page.evaluate(() => [...document.querySelectorAll("#timeline > li")].filter((li) => li.offsetParent !== null).map((li) => li.dataset.seq ?? "group"));
  const flaky = run.steps.find((c) => c.name === "flaky");
  assert.deepEqual(visible, [String(flaky.seq)]);
  const row = page.locator(`#timeline li.call[data-seq="${flaky.seq}"]`);
  await row.locator("button.label").click();
  await row.locator(".detail").waitFor();
  assert.equal(await row.locator(".detail .attempt.failed").count(), 3);
  assert.match(await row.locator(".detail").textContent(), /carrier timeout/);
  await shot(page, "waterfall-failed-only");
  await page.getByLabel("Failed only").uncheck();
  noConsoleErrors();
});

test("a child run's calls show inline", async () => {
  const child = run.steps.find((c) => c.kind === "startAndWait");
  const row = page.locator(`#timeline li.call[data-seq="${child.seq}"]`);
  await row.getByRole("button", { name: "Show its calls" }).click();
  await row.locator(`#child-${child.childRunId} li.call`).first().waitFor();
  assert.ok(await row.locator(`#child-${child.childRunId} li.call`).count() >= 1);
  noConsoleErrors();
});
