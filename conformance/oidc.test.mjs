// The control plane's single sign-on (cp_oidc_flow.go) in headless Chromium
// (Debian's chromium, driven by playwright-core), run by TestCPOIDCInChromium
// (cp_oidc_test.go) against a real control plane and a real OpenID provider
// (zitadel/oidc's example provider, tools/oidcop): a browser sent to sign in
// by the team page signs in with the provider's login form and lands on the
// team page as a new member of default; a browser opening the page `svc
// login` printed signs in the same way and approves the terminal's code;
// a user of another email domain is refused on the sign-in page, saying why.
//
// Environment: SVC_CP_URL, SVC_OP_URL (the provider's issuer), SVC_DEVICE_URL
// (the page of the waiting `svc login`), SVC_OP_PASSWORD, SVC_ARTIFACTS. Any
// browser console error fails the test but the 401 that sends a browser to
// sign in, the 403 of the refusal and the provider's missing favicon.
import { test } from "node:test";
import assert from "node:assert/strict";
import { useBrowser } from "./browser.mjs";

const env = process.env;
const cp = env.SVC_CP_URL;
// The provider's login page has no favicon: its 404 is the provider's, not ours.
const { newPage, noConsoleErrors, expectConsoleError, shot } = useBrowser({ ignore: (m) => m.location().url === `${env.SVC_OP_URL}favicon.ico` });

/** providerLogin clicks "Sign in with Test IdP" on page and signs in as username at the provider. */
async function providerLogin(page, username) {
  await page.getByRole("link", { name: "Sign in with Test IdP" }).click();
  await page.waitForURL((u) => u.href.startsWith(`${env.SVC_OP_URL}login/username`));
  await page.getByLabel("Username").fill(username);
  await page.getByLabel("Password").fill(env.SVC_OP_PASSWORD);
  await page.getByRole("button", { name: "Login" }).click();
}

test("a browser sent to sign in by the team page signs in through the provider", async () => {
  const page = await newPage();
  expectConsoleError(/status of 401 .*\/api\/whoami/); // the page's first call, before the sign-in
  await page.goto(`${cp}/team/default`);
  await page.waitForURL(new RegExp(`^${cp}/device\\?return=%2Fteam%2Fdefault`));
  await shot(page, "sign-in-page");
  await providerLogin(page, "alice");
  await page.waitForURL(`${cp}/team/default`);
  await page.getByText("Signed in as alice@example.com: member of organization default.").waitFor();
  await shot(page, "team-page-after-sso");
  noConsoleErrors();
});

test("svc login's code is approved by a browser signed in through the provider", async () => {
  const page = await newPage();
  await page.goto(env.SVC_DEVICE_URL);
  await page.getByLabel("One-time sign-in code").waitFor();
  await providerLogin(page, "bob");
  await page.waitForURL(env.SVC_DEVICE_URL);
  await page.getByText("Signed in as bob@example.com").waitFor();
  const code = new URL(env.SVC_DEVICE_URL).searchParams.get("code");
  assert.match(await page.locator("form").textContent(), new RegExp(`A terminal asks to sign in .* with the code ${code}`));
  await page.getByLabel(`I started this sign-in and my terminal shows ${code}`).check();
  await shot(page, "device-approve-after-sso");
  await page.getByRole("button", { name: "Approve" }).click();
  await page.getByText("Approved. Return to your terminal.").waitFor();
  noConsoleErrors();
});

test("a user outside the allowed domain and groups is refused, saying why", async () => {
  const page = await newPage();
  await page.goto(`${cp}/device`);
  expectConsoleError(/status of 403/);
  await providerLogin(page, "mallory");
  await page.waitForURL((u) => u.href.startsWith(`${cp}/oidc/callback`));
  await page.getByRole("alert").getByText(/Single sign-on refused: mallory@evil\.example may not sign in to this control plane/).waitFor();
  assert.equal(await page.getByRole("link", { name: "Sign in with Test IdP" }).count(), 1);
  await shot(page, "refused");
  noConsoleErrors();
});
