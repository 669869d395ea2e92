// Issue 12's walkthrough in headless Chromium (Debian's chromium, driven by
// playwright-core) and a coding agent's MCP client. Run twice by
// TestDeeplinkWalkthrough (deeplink_walkthrough_test.go), which starts the
// control plane, `svc login`, the relay and `svc dev` between the runs; the
// browser's cookies are kept in SVC_BROWSER_STATE from one run to the next,
// as a browser keeps them.
//
// SVC_WALK_STEP=login: open SVC_DEVICE_URL (the link `svc login` shows),
// sign in with the first boot's one-time code SVC_SIGN_IN_CODE; the page
// shows who is signed in and the terminal's request (host, address);
// confirm having started it, approve.
//
// SVC_WALK_STEP=console: open SVC_DEEPLINK (svc dev's payload) with
// *.tun.test resolved to the relay (SVC_RESOLVER_RULES) and the relay's
// certificate trusted by its SPKI hash (SVC_SPKI): a browser not signed in
// is sent to the sign-in page with the way back, signs in there with the
// code of `svc login --browser` (SVC_BROWSER_CODE) and lands back on the
// console page it asked for; the browser signed in earlier gets
// the console through the relay: the playground's start, the run's
// timeline to completed, the chat with the project's assistant (a streamed
// answer, a tool call, an approval). Then @modelcontextprotocol/sdk's
// client over `svc mcp` (SVC_BIN, in SVC_PROJECT) on the same session:
// start_workflow, get_run with a wait, message_agent with an approval.
//
// Any browser console error fails the test; screenshots go to SVC_ARTIFACTS.
import { test } from "node:test";
import assert from "node:assert/strict";
import { hostname } from "node:os";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { useBrowser } from "./browser.mjs";

const env = process.env;
const step = env.SVC_WALK_STEP;
// In the console step only the relay's names go to the relay, and only
// its certificate is trusted beyond the system's roots.
const extraFlags = step === "console" ? [`--host-resolver-rules=${env.SVC_RESOLVER_RULES}`, `--ignore-certificate-errors-spki-list=${env.SVC_SPKI}`] : [];
const { newPage, expectConsoleError, noConsoleErrors, shot } = useBrowser({ extraFlags });

/** openPage opens a page in a new context, with the kept cookies when signedIn. */
const openPage = (signedIn) => newPage({ storageState: signedIn ? env.SVC_BROWSER_STATE : undefined });

if (step === "login") {
  test("svc login: the device page signs the browser in with the one-time code and approves the terminal's code", async () => {
    const page = await openPage(false);
    await page.goto(env.SVC_DEVICE_URL);
    await page.getByLabel("One-time sign-in code").fill(env.SVC_SIGN_IN_CODE);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.waitForURL(/\/device\?code=/);
    // Signed in, the page says as whom and what asks: the terminal's host
    // and address; an approval needs the user's confirmation.
    assert.match(await page.locator("#signed-in").textContent(), /Signed in as admin/);
    const request = await page.locator("#request").textContent();
    assert.ok(request.includes(hostname()) && request.includes("127.0.0.1"), `the request shows the host and address: ${request}`);
    await shot(page, "device-signed-in");
    const confirm = page.getByLabel(/I started this sign-in/);
    assert.ok(await confirm.evaluate((e) => e.validity.valueMissing), "the form is valid without the confirmation");
    await confirm.check();
    await page.getByRole("button", { name: "Approve" }).click();
    await page.getByText("Approved. Return to your terminal.").waitFor();
    await shot(page, "device-approved");
    await page.context().storageState({ path: env.SVC_BROWSER_STATE });
    noConsoleErrors();
  });
}

if (step === "console") {
  const deeplink = new URL(env.SVC_DEEPLINK);
  const publicURL = deeplink.searchParams.get("url");
  let page, browserRun;

  test("a browser not signed in is sent to the sign-in page and, signed in there, comes back to the console", async () => {
    const fresh = await openPage(false);
    expectConsoleError(/status of 401/); // the token call's, which sends the browser to sign in
    await fresh.goto(deeplink.href + "#/workflows/greet");
    await fresh.waitForURL(/\/device\?return=/);
    const back = await fresh.locator('input[name="return"]').inputValue();
    assert.equal(back, deeplink.pathname + deeplink.search + "#/workflows/greet");
    assert.equal(await fresh.locator('form[action="/device/approve"]').count(), 0);
    await shot(fresh, "sign-in-with-return");
    noConsoleErrors();
    // The code `svc login --browser` printed in the terminal.
    await fresh.getByLabel("One-time sign-in code").fill(env.SVC_BROWSER_CODE);
    await fresh.getByRole("button", { name: "Sign in" }).click();
    await fresh.waitForURL((u) => u.href === deeplink.href + "#/workflows/greet");
    await fresh.getByRole("button", { name: "Start run" }).waitFor();
    await shot(fresh, "signed-in-back-on-the-playground");
    await fresh.context().close();
    noConsoleErrors();
  });

  test("the deeplink opens the console on the session, through the relay", async () => {
    page = await openPage(true);
    const calls = [];
    page.on("request", (r) => r.url().startsWith(publicURL) && calls.push(r.url()));
    await page.goto(deeplink.href);
    await page.locator("#overview").waitFor(); // the console opens on the overview
    await page.getByRole("link", { name: "Workflows" }).click();
    await page.locator("#workflows").waitFor();
    const names = await page.locator("#workflows tbody tr td:first-child").allTextContents();
    for (const n of ["greet", "ping"]) assert.ok(names.includes(n), `${n} in ${names}`);
    assert.ok(calls.some((u) => u.startsWith(publicURL + "/api/")), `API calls through the relay: ${calls}`);
    await shot(page, "workflows");
    noConsoleErrors();
  });

  test("playground: fill the form, start, see the receipt, watch the timeline reach completed", async () => {
    await page.getByRole("link", { name: "greet", exact: true }).click();
    await page.getByLabel("name", { exact: true }).fill("Ada");
    assert.deepEqual(JSON.parse(await page.locator("#input-json").inputValue()), { name: "Ada" });
    await shot(page, "playground");
    await page.getByRole("button", { name: "Start run" }).click();
    const link = page.locator("#run-link");
    await link.waitFor();
    await shot(page, "receipt");
    browserRun = await link.textContent();
    await link.click();
    await page.locator("#timeline li.sleep").waitFor();
    await shot(page, "timeline-live");
    await page.locator("#run-status .badge", { hasText: "completed" }).waitFor();
    assert.deepEqual(await page.locator("#timeline li.call b").allTextContents(), ["step", "step", "sleep"]);
    assert.match(await page.locator("#run-output").textContent(), /Hello, Ada!/);
    await shot(page, "timeline-completed");
    noConsoleErrors();
  });

  test("chat: a streamed answer, a tool call, Approve, the result", async () => {
    await page.getByRole("link", { name: "Chat" }).click();
    await page.locator("#chat-agent").selectOption("assistant");
    await page.waitForURL(/#\/chat\/assistant$/);
    const say = async (text) => {
      await page.locator(".chat-form button[type=submit]:enabled").waitFor(); // the turn before has ended
      await page.getByLabel("Message").fill(text);
      await page.getByLabel("Message").press("Enter");
    };
    const answer = (want) => page.locator("#chat-log .msg.assistant", { hasText: want }).last();
    await say("hello through the relay");
    await answer("echo: hello through the relay").waitFor();
    const pieces = await answer("echo: hello through the relay").evaluate((m) => m.querySelector("span").childNodes.length);
    assert.ok(pieces > 1, `the answer arrived in ${pieces} piece(s); want it streamed in several`);
    await say('call add {"a":2,"b":3}');
    const add = page.locator("#chat-log .tool-call", { hasText: "add" }).last();
    await add.locator(".result").waitFor();
    assert.match(await add.locator(".result").textContent(), /"sum":5/);
    await say('call refund {"orderId":"w-1"}');
    const refund = page.locator("#chat-log .tool-call", { hasText: "refund" }).last();
    await refund.getByRole("button", { name: "Approve" }).waitFor();
    await shot(page, "chat-approval");
    await refund.getByRole("button", { name: "Approve" }).click();
    await refund.locator(".result").waitFor();
    assert.match(await refund.locator(".result").textContent(), /"refunded":"w-1"/);
    await answer('tool refund said: {"refunded":"w-1"}').waitFor();
    await shot(page, "chat");
    noConsoleErrors();
  });

  test("a coding agent over svc mcp drives the same session", async (t) => {
    const client = new Client({ name: "walkthrough", version: "1" });
    await client.connect(new StdioClientTransport({ command: env.SVC_BIN, args: ["mcp"], cwd: env.SVC_PROJECT, stderr: "pipe" }));
    t.after(() => client.close());
    const call = async (name, args) => {
      const res = await client.callTool({ name, arguments: args });
      assert.ok(!res.isError, `${name}: ${res.content?.[0]?.text}`);
      return res.structuredContent;
    };
    const runs = await call("list_runs", { workflow: "greet" });
    assert.ok(runs.runs.some((r) => r.runId === browserRun), `the browser's run ${browserRun} in ${JSON.stringify(runs.runs)}`);
    const rc = await call("start_workflow", { name: "greet", input: { name: "Grace" } });
    assert.equal(rc.status, "started");
    const { run, terminal } = await call("get_run", { runId: rc.runId, waitSeconds: 20 });
    assert.ok(terminal);
    assert.equal(run.status, "completed");
    assert.equal(run.output.greeting, "Hello, Grace!");
    const session = "walkthrough-mcp";
    const ask = await call("message_agent", { agent: "assistant", session, message: 'call refund {"orderId":"m-1"}' });
    assert.equal(ask.pendingToolCalls.length, 1);
    assert.equal(ask.pendingToolCalls[0].kind, "approval");
    const done = await call("message_agent", { agent: "assistant", session, approvals: [{ toolCallId: ask.pendingToolCalls[0].id, approved: true }] });
    assert.match(done.text, /tool refund said: .*m-1/);
    assert.deepEqual(done.pendingToolCalls, []);
    // The coding agent's run shows in the browser's console too.
    await page.goto(deeplink.href + "#/runs");
    await page.locator(`#runs a[href$="${rc.runId}"]`).waitFor();
    await shot(page, "runs-with-mcp-run");
    noConsoleErrors();
  });
}
