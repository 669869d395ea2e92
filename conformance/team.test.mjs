// The control plane's team page (/team/{org}, cp_team.go) in headless
// Chromium (Debian's chromium, driven by playwright-core), run by
// TestCPTeamPageInChromium (cp_team_test.go) against a real control plane
// whose owner ("admin") and member (bob@example.com) the test made with the
// CLI, with an agent "demo" whose deployment is linked. A member signs in
// (sent to the sign-in page and back) and sees the members and the agents
// with their deployments only; the owner signs in, is refused a hostile
// email, invites carol@example.com as admin (the one-time code shown
// once), sees the invitation and the audit log (intact), removes bob, and
// sees the removal in the log; is refused the delete of the linked agent,
// creates and renames another, creates an API key with an expiry (shown
// once) and revokes it; renames the organization and creates another,
// whose page it lands on.
//
// Environment: SVC_CP_URL, SVC_OWNER_CODE and SVC_MEMBER_CODE (one-time
// browser sign-in codes of `svc login --browser`), SVC_ARTIFACTS. Any
// browser console error fails the test but the 401 that sends a browser
// to sign in, the 400 the hostile email provokes and the 409 of the
// refused delete.
import { test } from "node:test";
import assert from "node:assert/strict";
import { useBrowser } from "./browser.mjs";

const env = process.env;
const cp = env.SVC_CP_URL;
const { newPage, noConsoleErrors, expectConsoleError, shot } = useBrowser();

/** signIn opens the team page of default, is sent to sign in with code, and comes back. */
async function signIn(code) {
  const page = await newPage();
  expectConsoleError(/status of 401 .*\/api\/whoami/); // the page's first call, before the sign-in
  await page.goto(`${cp}/team/default`);
  await page.waitForURL(new RegExp(`^${cp}/device\\?return=%2Fteam%2Fdefault`));
  await page.getByLabel("One-time sign-in code").fill(code);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL(`${cp}/team/default`);
  return page;
}

/** cells is the text of column i of table sel's rows. */
/** cells is column i of table sel's rows, once the table has a row (the page fills its tables one request after another). */
async function cells(page, sel, i) {
  await page.locator(`${sel} tbody tr`).first().waitFor();
  return page.locator(`${sel} tbody tr td:nth-child(${i})`).allTextContents();
}

test("a member sees the members, not the invitations or the audit log", async () => {
  const page = await signIn(env.SVC_MEMBER_CODE);
  await page.getByText("Signed in as bob@example.com: member of organization default.").waitFor();
  assert.deepEqual((await cells(page, "#members", 1)).sort(), ["admin", "bob@example.com"]);
  assert.equal(await page.locator("#admin").isHidden(), true);
  assert.equal(await page.getByRole("button", { name: /Remove/ }).count(), 0);
  assert.deepEqual(await cells(page, "#agents", 1), ["demo"]);
  assert.match((await cells(page, "#agents", 3))[0], /^registered at http:\/\/127\.0\.0\.1:9, tag 1\.0\.0; 1 links/);
  assert.equal(await page.getByRole("button", { name: /Delete|Rename/ }).count(), 0);
  await shot(page, "member");
  noConsoleErrors();
});

test("the owner invites, reads the audit log and removes a member", async () => {
  const page = await signIn(env.SVC_OWNER_CODE);
  await page.getByText("Signed in as admin: owner of organization default.").waitFor();
  await page.locator("#audit-verify.ok").waitFor();
  assert.match(await page.locator("#audit-verify").textContent(), /intact/);

  expectConsoleError(/400/);
  await page.getByLabel("Email").fill("carol@@example.com");
  await page.evaluate(() => document.querySelector("#invite input[name=email]").setAttribute("type", "text"));
  await page.getByRole("button", { name: "Invite" }).click();
  await page.locator("#notice").getByText(/want a plain address/).waitFor();

  await page.getByLabel("Email").fill("carol@example.com");
  await page.getByLabel("Role", { exact: true }).selectOption("admin");
  await page.getByRole("button", { name: "Invite" }).click();
  const code = await page.locator("#invitation-code").textContent();
  assert.match(code, /^[A-Z]{4}(-[A-Z]{4}){4}$/);
  await page.locator("#invitations tbody tr", { hasText: "carol@example.com" }).waitFor();
  await page.locator("#audit tbody tr", { hasText: "member.invited" }).first().waitFor();
  await shot(page, "owner-invited");

  page.on("dialog", (d) => d.accept());
  await page.getByRole("button", { name: "Remove bob@example.com" }).click();
  await page.locator("#audit tbody tr", { hasText: "member.removed" }).waitFor();
  assert.deepEqual(await cells(page, "#members", 1), ["admin"]);
  const text = await page.locator("#audit").textContent();
  assert.ok(!text.includes(code.replaceAll("-", "")) && !text.includes(code), "the invitation's code is in the audit log");
  await shot(page, "owner-removed");

  // Agents: the linked one's delete refused; another created and renamed.
  expectConsoleError(/409/);
  await page.getByRole("button", { name: "Delete demo" }).click();
  await page.locator("#notice").getByText(/has a deployment linked/).waitFor();
  await page.getByLabel("Agent slug").fill("support");
  await page.getByLabel("Agent name").fill("Support");
  await page.getByRole("button", { name: "Create agent" }).click();
  await page.getByLabel("Name of support").fill("Support Desk");
  await page.getByRole("button", { name: "Rename support" }).click();
  await page.locator("#agents tbody tr td:nth-child(2)", { hasText: "Support Desk" }).waitFor();

  // API keys: created with an expiry, shown once, revoked.
  await page.getByLabel("Key name").fill("page-key");
  await page.getByLabel("Expires in days").fill("30");
  await page.getByRole("button", { name: "Create key" }).click();
  const key = await page.locator("#key-value").textContent();
  assert.match(key, /^svc_key_/);
  await page.locator("#keys tbody tr", { hasText: "page-key" }).waitFor();
  await shot(page, "owner-key");
  await page.getByRole("button", { name: "Revoke page-key" }).click();
  await page.locator("#audit tbody tr", { hasText: "api_key.revoked" }).waitFor();
  assert.equal(await page.locator("#keys tbody tr", { hasText: "page-key" }).count(), 0);
  assert.ok(!(await page.locator("body").textContent()).includes(key), "the revoked key is still on the page");

  // Organizations: this one renamed (its slug stays), another created, whose page opens.
  await page.getByLabel("Organization name", { exact: true }).fill("Default Team");
  await page.getByRole("button", { name: "Rename organization" }).click();
  await page.locator("#orgs li", { hasText: "Default Team (default) · owner" }).waitFor();
  await page.locator("#audit tbody tr", { hasText: "org.renamed" }).waitFor();
  await page.getByLabel("New organization slug").fill("acme-eu");
  await page.getByLabel("New organization name").fill("Acme Europe");
  await page.getByRole("button", { name: "Create organization" }).click();
  await page.waitForURL(`${cp}/team/acme-eu`);
  await page.getByText("Signed in as admin: owner of organization acme-eu.").waitFor();
  assert.deepEqual(await page.locator("#orgs li").allTextContents(), ["Acme Europe (acme-eu) · owner", "Default Team (default) · owner"]);
  await page.locator("#audit tbody tr", { hasText: "org.created" }).waitFor();
  await shot(page, "owner-orgs");
  noConsoleErrors();
});
