// The settings page: the project, the boot gate, and the model-provider
// credential (stored encrypted; opens a closed gate without a restart).

import { api, el, errorBox } from "./dom.js";

/** settingsPage shows the project and gate and stores a model-provider credential; onGate gets the new gate state. */
export async function settingsPage(ctx, onGate) {
  const health = await api("GET", "/api/health");
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
    el("dl", { class: "facts" }, el("dt", {}, "Project"), el("dd", {}, el("code", {}, health.project_dir)), el("dt", {}, "Boot gate"), el("dd", {}, gate)),
    el("h2", {}, "Model provider"),
    el("form", { id: "provider", class: "stack", onsubmit: submit },
      el("label", {}, "Provider ", el("select", { name: "provider" }, el("option", { value: "openai" }, "openai"), el("option", { value: "anthropic" }, "anthropic"), el("option", { value: "openai-compatible" }, "OpenAI-compatible server"))),
      el("label", {}, "API key ", el("input", { name: "apiKey", type: "password", autocomplete: "off" })),
      el("label", {}, "Base URL (optional) ", el("input", { name: "baseUrl", placeholder: "http://127.0.0.1:11434/v1" })),
      el("p", {}, el("button", { type: "submit" }, "Store credential"))),
    msg);
}

/** gateText describes the boot gate. */
export const gateText = (g) => (g.open ? `open (${g.reason})` : `closed (${g.reason}): store a model provider below`);
