// The settings page: the project, the boot gate, the health of
// PostgreSQL, the journal and object storage, the model-provider
// credential (stored encrypted; opens a closed gate without a restart),
// and svc dev's local services (URLs; keys on request).

import { api, apiBase, el, errorBox, health as readHealth } from "./dom.js";

/** settingsPage shows the project and gate and stores a model-provider credential; onGate gets the new gate state. */
export async function settingsPage(ctx, onGate) {
  const health = await readHealth();
  const gate = el("span", { id: "gate-state" }, gateText(health.gate));
  const msg = el("div", { id: "provider-result", "aria-live": "polite" });
  const submit = async (e) => {
    e.preventDefault();
    const body = Object.fromEntries(new FormData(e.target));
    if (!body.baseUrl) delete body.baseUrl;
    try {
      const r = await api("PUT", "/api/settings/model-provider", body);
      gate.textContent = gateText(r.gate);
      onGate(r.gate);
      msg.replaceChildren(el("p", { class: "note" }, "Stored."));
      e.target.reset();
    } catch (err) {
      msg.replaceChildren(errorBox(err));
    }
  };
  return el("section", {},
    el("h1", {}, "Settings"),
    el("dl", { class: "facts" }, el("dt", {}, "Project"), el("dd", {}, el("code", {}, health.project_dir)), el("dt", {}, "Boot gate"), el("dd", {}, gate),
      el("dt", {}, "PostgreSQL"), el("dd", { id: "health-postgres" }, partText(health.postgres)),
      el("dt", {}, "Journal"), el("dd", { id: "health-journal" }, partText(health.journal)),
      el("dt", {}, "Object storage"), el("dd", { id: "health-storage" }, partText(health.storage))),
    el("h2", {}, "Model provider"),
    el("form", { id: "provider", class: "stack", onsubmit: submit },
      el("label", {}, "Provider ", el("select", { name: "provider" }, el("option", { value: "openai" }, "openai"), el("option", { value: "anthropic" }, "anthropic"), el("option", { value: "openai-compatible" }, "OpenAI-compatible server"))),
      el("label", {}, "API key ", el("input", { name: "apiKey", type: "password", autocomplete: "off" })),
      el("label", {}, "Base URL (optional) ", el("input", { name: "baseUrl", placeholder: "http://127.0.0.1:11434/v1" })),
      el("p", {}, el("button", { type: "submit" }, "Store credential"))),
    msg,
    await localServices());
}

/**
 * localServices lists svc dev's local services (GET /api/dev/services)
 * with their secrets hidden; "Show keys" asks for them (POST
 * /api/dev/services/reveal, one request per click) and "Hide keys" forgets
 * them. svc dev serves these routes to this machine only: a console served
 * elsewhere (the box, the control plane, through the tunnel) says so.
 */
async function localServices() {
  const head = el("h2", {}, "Local services");
  const elsewhere = () => el("section", { id: "local-services" }, head,
    el("p", { class: "note" }, "Local service URLs and keys are shown by svc dev, in the console opened on its own machine."));
  if (apiBase) return elsewhere();
  let list;
  try {
    list = await api("GET", "/api/dev/services");
  } catch (err) {
    // 404: not svc dev (the box); 403: not from this machine (--listen, the tunnel).
    return err.status === 404 || err.status === 403 ? elsewhere() : el("section", { id: "local-services" }, head, errorBox(err));
  }
  const secrets = []; // [variable, the element showing its value]
  /** show puts into each secret's element its value from env, or (no env) its placeholder. */
  const show = (env) => {
    for (const [v, node] of secrets) {
      // A console session is never shown the dev key itself: svc env prints it.
      node.replaceChildren(env ? env[v.name] ?? "(not shown to a console session: svc env prints it)" : v.value || "••••••••");
      node.classList.toggle("hidden", !env);
    }
  };
  const table = (svc) => el("table", { class: "list vars" }, el("tbody", {}, svc.vars.map((v) => {
    const value = el("code", { class: v.secret ? "secret hidden" : false, "data-var": v.name }, v.value || (v.secret ? "••••••••" : ""));
    if (v.secret) secrets.push([v, value]);
    return el("tr", {}, el("th", {}, v.name), el("td", {}, value));
  })));
  const msg = el("div", { "aria-live": "polite" });
  const toggle = el("button", { type: "button", class: "small", id: "reveal-keys", onclick: async () => {
    msg.replaceChildren();
    if (toggle.dataset.shown) {
      show(null);
      delete toggle.dataset.shown;
      toggle.textContent = "Show keys";
      return;
    }
    toggle.disabled = true;
    try {
      const r = await api("POST", "/api/dev/services/reveal");
      show(r.env);
      toggle.dataset.shown = "1";
      toggle.textContent = "Hide keys";
    } catch (err) {
      msg.replaceChildren(errorBox(err));
    } finally {
      toggle.disabled = false;
    }
  } }, "Show keys");
  return el("section", { id: "local-services" }, head,
    el("p", { class: "note" }, "What ", el("code", {}, "svc env"), " prints for tools such as psql and aws. Keys stay hidden until you ask."),
    list.services.map((svc) => el("div", { class: "service" }, el("h3", {}, svc.name, " ", el("code", { class: "url" }, svc.url)), svc.vars.length ? table(svc) : null)),
    el("p", {}, toggle), msg);
}

/** gateText describes the boot gate. */
export const gateText = (g) => (g.open ? `open (${g.reason})` : `closed (${g.reason}): store a model provider below`);

/** partText is a part's health as the page says it: "ok", or its state and what to know. */
function partText(part) {
  if (!part) return "unknown";
  if (part.state === "ok") return "ok";
  return [part.state, part.message ?? part.error].filter(Boolean).join(": ");
}
