// Headless Chromium for the console suites: Debian's chromium (SVC_CHROMIUM,
// default /usr/bin/chromium) driven by playwright-core, never a browser
// download. useBrowser launches it with the first page and registers its
// close as a node:test hook; pages it opens record every browser console error, which fails
// the step at noConsoleErrors unless a step allowed it with
// expectConsoleError. Screenshots go to SVC_ARTIFACTS, each after a check
// that the page shows no stray null, undefined or [object Object]
// (noStrayText).
import { after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

/** flags are the Chromium flags of every suite (the project's rules). */
const flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"];

/** timeout bounds every wait of a page. */
const timeout = 30_000;

/**
 * useBrowser returns the suite's helpers over one Chromium, launched with
 * flags plus extraFlags at the first page and closed after the suite.
 * ignore(message) drops console errors a suite does not count (e.g. a
 * favicon a foreign page lacks).
 */
export function useBrowser({ extraFlags = [], ignore = () => false } = {}) {
  const artifacts = process.env.SVC_ARTIFACTS;
  const errors = [];
  const expected = []; // patterns of console errors a step provokes, each allowed once
  let launched; // the browser's promise, from the first page on
  after(async () => {
    await (await launched)?.close();
  });
  return {
    /** newPage opens a page in a new context (storageState: a file of kept cookies; extraHTTPHeaders: sent with every request). */
    async newPage({ storageState, extraHTTPHeaders } = {}) {
      launched ??= chromium.launch({ executablePath: process.env.SVC_CHROMIUM ?? "/usr/bin/chromium", args: [...flags, ...extraFlags] });
      const context = await (await launched).newContext({ viewport: { width: 1280, height: 900 }, storageState, extraHTTPHeaders });
      context.setDefaultTimeout(timeout);
      const page = await context.newPage();
      page.on("console", (m) => {
        if (m.type() !== "error" || ignore(m)) return;
        const text = `${m.text()} (${m.location().url})`;
        const i = expected.findIndex((re) => re.test(text));
        if (i >= 0) expected.splice(i, 1);
        else errors.push(text);
      });
      page.on("pageerror", (e) => errors.push(`uncaught: ${e.message}`));
      return page;
    },
    /** expectConsoleError allows one console error matching re (a refusal the step provokes). */
    expectConsoleError: (re) => expected.push(re),
    /** noConsoleErrors fails the step when a page logged an error not allowed. */
    noConsoleErrors() {
      assert.deepEqual(errors, [], "browser console errors");
    },
    noStrayText,
    /** shot checks the page's text (noStrayText), then saves a full-page screenshot of it under SVC_ARTIFACTS and prints its path. */
    async shot(page, name) {
      await noStrayText(page);
      mkdirSync(artifacts, { recursive: true });
      const path = join(artifacts, `${name}.png`);
      await page.screenshot({ path, fullPage: true });
      console.log(`screenshot: ${path}`);
    },
  };
}

/**
 * strayText matches what a page shows when it printed a value it should
 * not have: null, undefined or NaN as words, an object as [object Object].
 */
const strayText = /\b(null|undefined|NaN)\b|\[object Object\]/;

/**
 * noStrayText fails the step when a text node of page, outside code, pre
 * and form fields (where a value is shown as such), matches strayText.
 */
async function noStrayText(page) {
  const found = await page.evaluate((source) => {
    const re = new RegExp(source);
    const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    const out = [];
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (re.test(n.data) && !n.parentElement.closest("code, pre, textarea, script, style")) out.push(n.data.trim());
    }
    return out;
  }, strayText.source);
  assert.deepEqual(found, [], `stray text on ${page.url()}`);
}
