// The developer's browser as the victim of another account of the machine
// (TestDevNeighbourAccount, issue 29): it signs in to svc dev's console
// with a link of `svc console`, then shows a page the neighbour serves on
// another loopback port, which tries svc dev's API with what the browser
// sends on its own. The Go test reads what the neighbour's server got.
// Environment: SVC_URL (svc dev), SVC_CONSOLE_LINK (a console link),
// NEIGHBOUR_URL (the neighbour's page, ?api=<svc dev's port>).
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { useBrowser } from "./browser.mjs";

const base = process.env.SVC_URL;
let onNeighbourPage = false; // its refused fetches log errors, as they should
const { newPage, noConsoleErrors } = useBrowser({ ignore: () => onNeighbourPage });
let page;

before(async () => {
  page = await newPage();
});

test("the console link signs this browser in with no cookie", async () => {
  await page.goto(process.env.SVC_CONSOLE_LINK);
  await page.waitForURL(base + "/#/overview");
  await page.locator("h1", { hasText: "Overview" }).waitFor();
  assert.match(await page.evaluate(() => localStorage.getItem("svc-console-bearer")) ?? "", /^svcc_/);
  assert.deepEqual(await page.context().cookies(), []);
  noConsoleErrors();
});

test("the neighbour's page, shown in the same browser, gets nothing", async () => {
  onNeighbourPage = true;
  await page.goto(process.env.NEIGHBOUR_URL);
  await page.locator("#done").waitFor();
  noConsoleErrors();
});
