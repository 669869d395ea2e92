// The console's small shared helpers: building elements, calling the
// runtime API, formatting values and times.

/** meta is the content of the page's <meta name=name> ("" if none). */
const meta = (name) => document.querySelector(`meta[name="${name}"]`)?.content ?? "";

/** The URL prefix of the runtime API ("" = the server of this page). */
export const apiBase = meta("svc-api-base");

/**
 * tokenURL is where the page gets the API's bearer: set when the control
 * plane serves the console at svc dev's deeplink (an identity token for
 * the installation, minted for the console cookie); "" = none needed.
 */
const tokenURL = meta("svc-token-url");

/** token is a promise of the identity token: { value, renewAt } (ms). */
let token = null;

/**
 * localKey is where svc dev's console keeps its bearer: a console session
 * traded for the one-time code of the link svc dev printed or for the
 * dev key typed in (never the key itself). localStorage belongs to this origin (scheme, host and
 * port): a page on another port of this host cannot read it, as it
 * would receive a cookie.
 */
const localKey = "svc-console-bearer";

/** devConsole is true when svc dev serves this page (no control plane in between). */
export const devConsole = !tokenURL && !apiBase;

/**
 * localBearer is this console's bearer for svc dev ("" = none yet): only
 * ever a console session (svcc_…). A dev key that an earlier console kept
 * here is forgotten on sight: the key outlives svc dev, a session does not.
 */
export function localBearer() {
  if (!devConsole) return "";
  const v = localStorage.getItem(localKey) ?? "";
  if (v && !v.startsWith("svcc_")) {
    localStorage.removeItem(localKey);
    return "";
  }
  return v;
}

/** setLocalBearer keeps (or, with "", forgets) the bearer for svc dev. */
export function setLocalBearer(value) {
  if (value) localStorage.setItem(localKey, value);
  else localStorage.removeItem(localKey);
}

/**
 * signInFromLink trades the one-time code of svc dev's console link
 * (#code=… in the address, which the browser never sends) for a console
 * session, keeps it, and takes the code out of the address and history.
 * A used or stale code leaves any bearer already kept in place; the error
 * is returned for the page to show.
 */
export async function signInFromLink() {
  const m = /^#code=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!devConsole || !m) return null;
  try {
    const r = await fetch(apiBase + "/api/console/session", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ code: m[1] }),
    });
    const body = await r.json().catch(() => null);
    if (!r.ok) return new APIError(r.status, body, `POST /api/console/session: HTTP ${r.status}`);
    setLocalBearer(body.token);
    return null;
  } finally {
    history.replaceState(null, "", location.pathname + location.search + "#/overview");
  }
}

/**
 * authHeaders is the credential header every API call carries. For svc
 * dev: the kept bearer, else fallback (svc dev then admits the developer's
 * own account on its machine). Served by the control plane: its identity
 * token, fetched once and renewed a minute (at most half its life) before
 * it expires; a browser not signed in to the control plane is sent to its
 * sign-in page, which comes back to this page once signed in.
 */
export async function authHeaders(fallback = {}) {
  if (devConsole) {
    const b = localBearer();
    return b ? { authorization: `Bearer ${b}` } : fallback;
  }
  if (!tokenURL) return fallback;
  let t = await currentToken();
  if (Date.now() >= t.renewAt) {
    token = null;
    t = await currentToken();
  }
  return { authorization: `Bearer ${t.value}` };
}

/** currentToken is the pending or current token; a failed fetch is forgotten. */
function currentToken() {
  token ??= fetchToken().catch((err) => {
    token = null;
    throw err;
  });
  return token;
}

/** fetchToken asks the control plane (same origin, cookie) for an identity token. */
async function fetchToken() {
  const r = await fetch(tokenURL, { method: "POST", credentials: "same-origin" });
  const body = await r.json().catch(() => null);
  if (r.status === 401) {
    const signIn = new URL(meta("svc-sign-in-url"), location.href);
    signIn.searchParams.set("return", location.pathname + location.search + location.hash);
    location.assign(signIn);
    throw new APIError(401, body, "sign in to the control plane first");
  }
  if (!r.ok) throw new APIError(r.status, body, `POST ${tokenURL}: HTTP ${r.status}`);
  const now = Date.now(), expires = Date.parse(body.expires_at);
  return { value: body.identity_token, renewAt: expires - Math.min(60_000, (expires - now) / 2) };
}

/**
 * el builds an element: attrs are attributes, except on* (listeners) and
 * value (the live property, so a textarea shows it); false, null and
 * undefined attributes are left out; children are nodes or text.
 */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "value") e.value = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  e.append(...nodes(children));
  return e;
}

/**
 * fill replaces node's children with children, as el takes them: nested
 * arrays flattened, undefined, null and false left out (replaceChildren
 * itself would show them as text).
 */
export function fill(node, ...children) {
  node.replaceChildren(...nodes(children));
  return node;
}

/** nodes is children flattened, without undefined, null and false, text as strings. */
const nodes = (children) => children.flat(Infinity).filter((c) => c !== undefined && c !== null && c !== false).map((c) => (c instanceof Node ? c : String(c)));

/** APIError is a refused API call: the runtime's error code, message and schema violations. */
export class APIError extends Error {
  constructor(status, body, fallback) {
    super(body?.error?.message ?? fallback);
    this.status = status;
    this.code = body?.error?.code ?? "http_" + status;
    this.violations = body?.error?.violations ?? [];
  }
}

/**
 * api calls the runtime API and returns the decoded JSON body; body is a
 * value (sent as JSON) or a string (sent as is). A refusal throws APIError.
 */
export async function api(method, path, body) {
  const init = { method, credentials: "same-origin", headers: await authHeaders() };
  if (body !== undefined) {
    init.headers["content-type"] = "application/json";
    init.body = typeof body === "string" ? body : JSON.stringify(body);
  }
  const r = await fetch(apiBase + path, init);
  const text = await r.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!r.ok) throw new APIError(r.status, data, `${method} ${path}: HTTP ${r.status}`);
  return data;
}

/**
 * health is GET /api/health's report, also when it answers 503 (a part is
 * down: the report says which).
 */
export async function health() {
  const r = await fetch(apiBase + "/api/health", { credentials: "same-origin", headers: await authHeaders() });
  const data = await r.json().catch(() => null);
  // 503 still describes the parts; a refusal (401) describes nothing.
  if (!data || (!r.ok && r.status !== 503)) throw new APIError(r.status, data, `GET /api/health: HTTP ${r.status}`);
  return data;
}

/** pretty is v as indented JSON ("" for undefined). */
export const pretty = (v) => (v === undefined ? "" : JSON.stringify(v, null, 2));

/** when formats an RFC 3339 time for people, in local time. */
export const when = (t) => (t ? new Date(t).toLocaleString() : "");

/** duration formats milliseconds briefly: 850 ms, 3.2 s, 4 min 5 s, 2 h 1 min. */
export function duration(ms) {
  if (ms === undefined || ms === null || Number.isNaN(ms)) return "";
  if (ms < 1) return "<1 ms"; // a step of microseconds ran: "0 ms" said it did not
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** badge is a run or step status as a coloured label. */
export const badge = (status) => el("span", { class: `badge ${status}` }, status);

/** errorBox shows a failure: its message and, for a schema violation, each path and message. */
export function errorBox(err) {
  const list = (err.violations ?? []).map((v) => el("li", {}, el("code", {}, v.path || "/"), " ", v.message));
  return el("div", { class: "error", role: "alert" }, el("p", {}, err.message), list.length ? el("ul", { class: "violations" }, list) : null);
}

/** codeBlock shows a JSON value in a <pre>. */
export const codeBlock = (v, attrs = {}) => el("pre", { class: "json", ...attrs }, pretty(v));
