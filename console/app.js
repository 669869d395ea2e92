// The svc web console (DESIGN §10): hash-routed pages over the runtime
// API, plain ES modules, no framework. Each page is an async function
// (ctx, ...route captures) returning its element; ctx.params is the
// route's query, ctx.every(ms, fn) polls fn while the page is shown (until
// fn returns false) and ctx.signal aborts once it is left.

import { devConsole, el, errorBox, health, localBearer, setLocalBearer, signInFromLink } from "./dom.js";
import { signInPage } from "./signin.js";
import { workflowsPage, playgroundPage } from "./workflows.js";
import { runsPage, runPage } from "./runs.js";
import { settingsPage } from "./settings.js";
import { chatPage } from "./chat.js";
import { overviewPage } from "./overview.js";
import { sessionPage } from "./sessions.js";

/** routes maps a hash path to its page and nav entry. */
const routes = [
  [/^\/overview$/, "overview", overviewPage],
  [/^\/workflows$/, "workflows", workflowsPage],
  [/^\/workflows\/([^/]+)$/, "workflows", playgroundPage],
  [/^\/runs$/, "runs", runsPage],
  [/^\/runs\/([^/]+)$/, "runs", runPage],
  [/^\/sessions\/([^/]+)\/([^/]+)$/, "runs", sessionPage],
  [/^\/chat$/, "chat", chatPage],
  [/^\/chat\/([^/]+)$/, "chat", chatPage],
  [/^\/settings$/, "settings", (ctx) => settingsPage(ctx, showGate)],
];

let visit = 0; // the current navigation; older pages stop polling and never draw
let pageLeft = new AbortController(); // aborted when the page is left: its open streams end
let interactive = false;

/** showGate shows the boot gate in the header when it is closed. */
function showGate(g) {
  const node = document.getElementById("gate");
  node.replaceChildren(g.open ? "" : el("a", { href: "#/settings", class: "badge failed" }, `gate closed: ${g.reason}`));
}

/**
 * every polls fn each ms after it settles while visit n is current, until
 * fn returns false; while the tab is hidden it asks nothing, and asks at
 * once when the tab is shown again.
 */
function every(n, ms, fn) {
  const tick = async () => {
    if (n !== visit) return;
    if (document.hidden) {
      document.addEventListener("visibilitychange", tick, { once: true });
      return;
    }
    let again = true;
    try {
      again = (await fn()) !== false;
    } catch {
      again = true; // a transient failure (the runtime restarting): try again
    }
    if (again && n === visit) setTimeout(tick, ms);
  };
  setTimeout(tick, ms);
}

/** signingIn is the sign-in of the last console link opened (its refusal, or null). */
let signingIn = Promise.resolve(null);

/** signInIfLink starts the sign-in of a console link's #code= in the address (null: none). */
function signInIfLink() {
  if (!/^#code=/.test(location.hash)) return null;
  signingIn = signInFromLink().catch((err) => err);
  return signingIn;
}

/** route draws the page of location.hash; a console link's #code= signs in first. */
async function route() {
  const n = ++visit;
  const refused = await signInIfLink();
  const hash = location.hash.slice(1) || "/overview"; // the console opens on the overview
  const q = hash.indexOf("?");
  const path = q < 0 ? hash : hash.slice(0, q);
  const params = new URLSearchParams(q < 0 ? "" : hash.slice(q + 1));
  const main = document.getElementById("page");
  const match = routes.map(([re, nav, page]) => [path.match(re), nav, page]).find(([m]) => m);
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("current", a.dataset.page === match?.[1]);
  let node;
  if (!match) {
    node = el("section", {}, el("h1", {}, "Not found"), el("p", {}, "No page at ", el("code", {}, path), ". ", el("a", { href: "#/workflows" }, "Workflows")));
  } else {
    pageLeft.abort();
    pageLeft = new AbortController();
    const ctx = { params, every: (ms, fn) => every(n, ms, fn), signal: pageLeft.signal };
    try {
      node = await match[2](ctx, ...match[0].slice(1).map(decodeURIComponent));
    } catch (err) {
      if (err.code === "console_session" && localBearer()) {
        setLocalBearer(""); // a session of an earlier svc dev: try without it
        return route();
      }
      node = devConsole && err.status === 401 ? signInPage(err) : el("section", {}, el("h1", {}, "Could not load this page"), errorBox(err));
    }
  }
  if (n !== visit) return;
  main.replaceChildren(node);
  window.scrollTo(0, 0); // a page opens at its top, wherever the last one was scrolled
  if (refused && !localBearer()) main.prepend(errorBox(refused));
  document.body.dataset.page = match?.[1] ?? "none";
  if (!interactive) {
    interactive = true;
    performance.mark("svc-console-interactive");
  }
}

/**
 * The keyboard: "/" focuses the page's search box; on a runs list, j and k
 * move through the runs and Enter opens the one focused (a link). Keys
 * typed into a field are the field's.
 */
document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey || e.target.closest?.("input, textarea, select, [contenteditable]")) return;
  if (e.key === "/") {
    const search = document.querySelector("input[type=search]");
    if (search) {
      e.preventDefault();
      search.focus();
    }
    return;
  }
  if (e.key !== "j" && e.key !== "k") return;
  const links = [...document.querySelectorAll("#runs tbody tr a")];
  if (!links.length) return;
  const i = links.indexOf(document.activeElement);
  e.preventDefault();
  links[i < 0 ? 0 : Math.max(0, Math.min(links.length - 1, i + (e.key === "j" ? 1 : -1)))].focus();
});

window.addEventListener("hashchange", route);
route();
// Beside the page, once a link's sign-in is done: one identity token
// fetch serves both when the control plane serves the console.
signingIn.then(() => health()).then((h) => showGate(h.gate), () => {});
