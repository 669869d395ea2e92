// The console's Chat page under hostile model output, in headless Chromium
// (Debian's chromium through playwright-core) against the real svc dev of
// TestConsoleInChromium: the agent tests' helper in front of the fake model
// provider, which calls tools with the arguments and ids a message scripts
// ("call <tool> <json> as <id>"), echoes text, and never answers "hang".
// Environment: SVC_URL (the dev emulator), SVC_ARTIFACTS (screenshot dir).
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { useBrowser } from "./browser.mjs";

const base = process.env.SVC_URL;
const { newPage, noConsoleErrors, shot: shotOf } = useBrowser();
let page;

before(async () => {
  page = await newPage();
  await page.goto(base + "/#/chat/helper");
  await page.getByLabel("Message").waitFor();
  // A thread of its own, apart from console.test.mjs's.
  await page.getByRole("button", { name: "New conversation" }).click();
});

const shot = (name) => shotOf(page, name);

/**
 * say sends text (newlines kept) from the message box, once the turn before
 * it has ended: the form ignores Enter while a turn runs (Send disabled).
 */
async function say(text) {
  await page.locator(".chat-form button[type=submit]:enabled").waitFor();
  await page.getByLabel("Message").fill(text);
  await page.getByLabel("Message").press("Enter");
}

/** card is the tool call card whose arguments show text. */
const card = (text) => page.locator("#chat-log .tool-call", { has: page.locator(".args", { hasText: text }) });

/** noWiderThanTheWindow fails when anything makes the page scroll sideways. */
async function noWiderThanTheWindow(what) {
  const { scroll, inner } = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth }));
  assert.ok(scroll <= inner, `${what}: the page is ${scroll} px wide in a ${inner} px window`);
}

test("two calls the model gave one id are two cards, each approved on its own, also after a reload", async () => {
  await say('call refund {"orderId":"HIDDEN"} as dup1\ncall refund {"orderId":"shown"} as dup1');
  const hidden = card("HIDDEN"), shown = card("shown");
  await shown.getByRole("button", { name: "Approve" }).waitFor();
  assert.equal(await hidden.getByRole("button", { name: "Approve" }).count(), 1, "the hidden call has its own Approve");
  assert.equal(await shown.getByRole("button", { name: "Approve" }).count(), 1);
  assert.notEqual(await hidden.getAttribute("data-call"), await shown.getAttribute("data-call"));
  await shot("hostile-dup-ids");
  await shown.getByRole("button", { name: "Approve" }).click();
  await shown.locator(".result").waitFor();
  await hidden.locator(".result").waitFor();
  assert.match(await shown.locator(".result").textContent(), /"refunded":"shown"/);
  assert.match(await hidden.locator(".result").textContent(), /was not run/);
  assert.equal(await page.locator("#chat-log .approval button").count(), 0, "no Approve left once both are answered");

  // A call needing approval and one that runs by itself, sharing an id:
  // after a reload the approval is still on the call that needs it.
  await say('call add {"a":1,"b":2} as dup2\ncall refund {"orderId":"v-1"} as dup2');
  await card("v-1").getByRole("button", { name: "Approve" }).waitFor();
  await page.reload();
  const pending = card("v-1");
  await pending.getByRole("button", { name: "Approve" }).waitFor();
  const add = page.locator("#chat-log .tool-call", { has: page.locator(".args", { hasText: '"a": 1' }) }).last();
  assert.equal(await add.getByRole("button", { name: "Approve" }).count(), 0, "the auto-run call shows no approval");
  assert.match(await add.locator(".result").textContent(), /"sum":3/);
  await shot("hostile-dup-ids-reloaded");
  await pending.getByRole("button", { name: "Refuse" }).click();
  await pending.locator(".result").waitFor();
  assert.match(await pending.locator(".result").textContent(), /refused/);
  noConsoleErrors();
});

test("an approval's arguments cannot hide: bidi controls, invisible characters and padding are shown", async () => {
  await say('call refund {"orderId":"report\\u202Efdp.exe","note":"a\\u200Bb"}');
  const bidi = card("report");
  await bidi.getByRole("button", { name: "Approve" }).waitFor();
  const text = await bidi.locator(".args").textContent();
  assert.match(text, /report⟨U\+202E⟩fdp\.exe/);
  assert.match(text, /a⟨U\+200B⟩b/);
  assert.ok(!/[\u202E\u200B]/.test(text), "no raw bidi or zero-width character is left in the card");
  await bidi.getByRole("button", { name: "Refuse" }).click();
  await bidi.locator(".result").waitFor();

  await say(`call refund {"orderId":"${" ".repeat(3000)}x","then":"rm -rf ~"}`);
  const padded = card("rm -rf ~");
  await padded.getByRole("button", { name: "Approve" }).waitFor();
  assert.match(await padded.locator(".args").textContent(), /⟨3000 spaces⟩x/);
  const danger = padded.locator(".args").getByText("rm -rf ~");
  const box = await danger.boundingBox();
  const width = await page.evaluate(() => window.innerWidth);
  assert.ok(box && box.x >= 0 && box.x + box.width <= width, `"rm -rf ~" is outside the window: ${JSON.stringify(box)}`);
  await noWiderThanTheWindow("padded arguments");
  await shot("hostile-hidden-arguments");
  await padded.getByRole("button", { name: "Refuse" }).click();
  await padded.locator(".result").waitFor();
  noConsoleErrors();
});

test("a 20,000-character token wraps in the chat and on its run's page", async () => {
  const token = "x".repeat(20000);
  await say(token);
  await page.locator("#chat-log .msg.assistant", { hasText: "echo: xxxx" }).last().waitFor();
  await noWiderThanTheWindow("the chat");
  await shot("hostile-long-token");
  const runs = await (await fetch(`${base}/api/runs?limit=5`)).json();
  const run = runs.items.find((r) => r.agent === "helper" && JSON.stringify(r.output ?? "").includes(token));
  assert.ok(run, "the turn's run");
  await page.goto(`${base}/#/runs/${run.runId}`);
  await page.locator("#run").waitFor();
  await noWiderThanTheWindow("the run page");
  await page.goto(base + "/#/chat/helper");
  await page.getByLabel("Message").waitFor();
  noConsoleErrors();
});

test("Stop ends a turn the provider never answers: the page is free again and the turn is recorded as stopped", async () => {
  await say("hang");
  const stop = page.locator(".chat-status").getByRole("button", { name: "Stop" });
  await stop.waitFor();
  await stop.click();
  await page.locator("#chat-log .stopped", { hasText: "Stopped." }).waitFor();
  assert.equal(await page.getByRole("button", { name: "Send" }).isDisabled(), false);
  await shot("hostile-stopped");
  let stopped;
  for (let i = 0; i < 100 && !stopped; i++) {
    const runs = await (await fetch(`${base}/api/runs?agent=helper&status=cancelled&limit=5`)).json();
    stopped = runs.items.find((r) => r.agent === "helper" && r.status === "cancelled" && r.error?.name === "Stopped");
    if (!stopped) await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(stopped, "the stopped turn is a cancelled run");
  // The thread goes on.
  await say("after the stop");
  await page.locator("#chat-log .msg.assistant", { hasText: "echo: after the stop" }).waitFor();
  noConsoleErrors();
});
