// The console of a deployed box in headless Chromium (Debian's chromium,
// driven by playwright-core), run by TestBoxConsoleInChromium
// (box_console_test.go) against real processes: a control plane, a box
// (svc serve of the scaffold) and the CLI. It runs twice, by SVC_PHASE:
//
//   signin   the user approves `svc login` on the control plane's /device
//            page (confirming they started it, having seen its request),
//            signing in there with the first boot's one-time code
//            (the test then runs `svc link` and `svc login --browser`);
//   console  a fresh browser opens the box's URL: the box sends it to its
//            console at the control plane, which sends it to sign in (the
//            code of `svc login --browser`) and back; the console lists
//            the box's workflows, starts ping from the playground and
//            shows its run completed in the timeline. Then the box's URL
//            followed from a page of another site, whose navigation
//            carries no SameSite=Strict cookie, opens the console too.
//
// Environment: SVC_CP_URL, SVC_BOX_URL (another site than the control
// plane's), SVC_USER_CODE and SVC_SIGN_IN_CODE (signin), SVC_BROWSER_CODE
// (console), SVC_ARTIFACTS. Any browser console error fails the test (but
// a favicon's).
import { test } from "node:test";
import assert from "node:assert/strict";
import { useBrowser } from "./browser.mjs";

const env = process.env;
const phase = env.SVC_PHASE;
const cp = env.SVC_CP_URL;
// The box's handshake, the stand-in for another site's page, has no icon: its favicon is a 401.
const { newPage, noConsoleErrors, shot } = useBrowser({ ignore: (m) => m.location().url.endsWith("/favicon.ico") });

test("signin: the one-time code on the device page, then svc login approved", { skip: phase !== "signin" }, async () => {
  const page = await newPage();
  await page.goto(`${cp}/device?code=${encodeURIComponent(env.SVC_USER_CODE)}`);
  await page.locator('input[name="sign_in_code"]').fill(env.SVC_SIGN_IN_CODE);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(/\/device\?code=/);
  assert.equal(await page.locator('input[name="user_code"]').first().inputValue(), env.SVC_USER_CODE);
  assert.match(await page.locator("#signed-in").textContent(), /Signed in as admin/);
  assert.match(await page.locator("#request").textContent(), /127\.0\.0\.1/);
  await page.getByLabel(/I started this sign-in/).check();
  await page.getByRole("button", { name: "Approve" }).click();
  await page.getByText("Approved").waitFor();
  await shot(page, "device-approved");
  noConsoleErrors();
});

test("console: the box's URL, sign-in and back, then ping starts and completes", { skip: phase !== "console" }, async () => {
  const page = await newPage();
  await page.goto(env.SVC_BOX_URL + "/");
  await page.waitForURL(new RegExp(`^${cp}/device\\?return=%2Fbox%2F`));
  await shot(page, "sign-in");
  await page.getByLabel("One-time sign-in code").fill(env.SVC_BROWSER_CODE);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator("#overview").waitFor(); // the console opens on the overview
  await page.getByRole("link", { name: "Workflows" }).click();
  await page.locator("#workflows").waitFor();
  assert.match(page.url(), new RegExp(`^${cp}/box/ins_[^/?]+`));
  const names = await page.locator("#workflows tbody tr td:first-child").allTextContents();
  for (const n of ["greet", "ping"]) assert.ok(names.includes(n), `${n} in ${names}`);
  await shot(page, "workflows");

  await page.getByRole("link", { name: "ping", exact: true }).click();
  await page.getByRole("button", { name: "Start run" }).click();
  const link = page.locator("#run-link");
  await link.waitFor();
  await shot(page, "playground-ping-receipt");
  await link.click();
  await page.locator("#run-status .badge", { hasText: "completed" }).waitFor();
  const kinds = await page.locator("#timeline li.call b").allTextContents();
  assert.deepEqual(kinds, ["step"]);
  assert.match(await page.locator("#run-output").textContent(), /pong/);
  await shot(page, "run-ping-completed");

  // Followed from a page of another site (the box's own handshake here),
  // the navigation comes without the cookie until the control plane's
  // page reloads itself.
  await page.goto(env.SVC_BOX_URL + "/.well-known/svc");
  await page.evaluate((url) => location.assign(url), env.SVC_BOX_URL + "/");
  await page.waitForURL(/\?reloaded/);
  await page.locator("#overview").waitFor();
  noConsoleErrors();
});
