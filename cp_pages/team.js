// The team page of the control plane (cp_team.go): the caller's
// organizations (a new one made here, this one renamed by its owners and
// admins), the members of one organization (/team/{org}) and its agents
// with their deployments and,
// for its owners and admins, agents created, renamed and deleted, the API
// keys (created, shown once, revoked), the invite form, the pending
// invitations and the audit log with its verification.
// Every call is the JSON API with the console cookie, which enforces the
// roles; text is set with textContent only, never parsed as HTML.
"use strict";

const org = decodeURIComponent(location.pathname.split("/")[2] || "");
const $ = (sel) => document.querySelector(sel);

/** call sends method path (of the API) with body as JSON; a 401 goes to the sign-in page, which comes back here. */
async function call(method, path, body) {
  const r = await fetch(path, {
    method,
    credentials: "same-origin",
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
  });
  const j = await r.json().catch(() => ({}));
  if (r.status === 401) {
    location.href = "/device?return=" + encodeURIComponent(location.pathname);
    throw new Error("not signed in");
  }
  if (!r.ok) throw new Error(j.error?.message ?? `${r.status} ${r.statusText}`);
  return j;
}

const orgPath = (rest) => `/api/orgs/${encodeURIComponent(org)}${rest}`;

/** row appends a row of cells (strings or nodes) to the body of table sel. */
function row(sel, cells, cls = []) {
  const tr = document.createElement("tr");
  cells.forEach((c, i) => {
    const td = document.createElement("td");
    if (cls[i]) td.className = cls[i];
    if (c instanceof Node) td.append(c);
    else td.textContent = c;
    tr.append(td);
  });
  $(sel + " tbody").append(tr);
}

/** say shows an error, or hides the notice for "". */
function say(msg) {
  $("#notice").textContent = msg;
  $("#notice").hidden = msg === "";
}

/** button returns a button labelled label that runs act, saying what failed. */
function button(label, act) {
  const b = document.createElement("button");
  b.textContent = label;
  b.addEventListener("click", () => act().then(() => say(""), (e) => say(e.message)));
  return b;
}

const when = (t) => new Date(t).toLocaleString();

/** load shows everything the signed-in user may see. */
async function load() {
  const who = await call("GET", "/api/whoami");
  const mine = who.organizations.find((o) => o.slug === org || o.id === org);
  if (!mine) {
    $("#who").textContent = `Signed in as ${who.user.email}, who is no member of organization ${org}.`;
    return;
  }
  const admin = mine.role === "owner" || mine.role === "admin";
  $("#who").textContent = `Signed in as ${who.user.email}: ${mine.role} of organization ${mine.slug}.`;
  $("#orgs").replaceChildren(...who.organizations.map((o) => {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = "/team/" + encodeURIComponent(o.slug);
    a.textContent = o.name === o.slug ? o.slug : `${o.name} (${o.slug})`;
    if (o.id === mine.id) a.setAttribute("aria-current", "page");
    li.append(a, ` · ${o.role}`);
    return li;
  }));
  $("#rename-org").hidden = !admin;
  $("#rename-org").elements.name.value = mine.name;
  const { members } = await call("GET", orgPath("/members"));
  $("#members tbody").replaceChildren();
  for (const m of members) {
    const acts = document.createElement("span");
    if (admin && m.user_id !== who.user.id && (m.role !== "owner" || mine.role === "owner")) {
      const pick = document.createElement("select");
      pick.setAttribute("aria-label", `Role of ${m.email}`);
      for (const r of ["member", "admin", ...(mine.role === "owner" ? ["owner"] : [])]) pick.append(new Option(r, r, false, r === m.role));
      acts.append(pick, " ", button("Change role", async () => {
        await call("PATCH", orgPath("/members/" + encodeURIComponent(m.email)), { role: pick.value });
        await load();
      }), " ", button(`Remove ${m.email}`, async () => {
        if (!confirm(`Remove ${m.email} from ${mine.slug}? Their access ends at once.`)) return;
        await call("DELETE", orgPath("/members/" + encodeURIComponent(m.email)));
        await load();
      }));
    }
    row("#members", [m.email, m.role, when(m.joined_at), acts]);
  }
  const { agents } = await call("GET", orgPath("/agents"));
  $("#agents tbody").replaceChildren();
  for (const a of agents) {
    const path = orgPath("/agents/" + encodeURIComponent(a.slug));
    const v = await call("GET", path + "/deployment/history");
    const d = v.deployment;
    const dep = d ? `${d.status} at ${d.url}, tag ${d.image_tag}; ${v.links.length} links, the last by ${v.links[0]?.actor ?? "-"}` : "none";
    const acts = document.createElement("span");
    if (admin) {
      const name = document.createElement("input");
      name.value = a.name;
      name.maxLength = 200;
      name.setAttribute("aria-label", `Name of ${a.slug}`);
      acts.append(name, " ", button(`Rename ${a.slug}`, async () => {
        await call("PATCH", path, { name: name.value });
        await load();
      }), " ", button(`Delete ${a.slug}`, async () => {
        if (!confirm(`Delete agent ${a.slug}?`)) return;
        await call("DELETE", path);
        await load();
      }));
    }
    row("#agents", [a.slug, a.name, dep, acts]);
  }
  $("#admin").hidden = !admin;
  if (!admin) return;
  const keys = (await call("GET", orgPath("/api-keys"))).api_keys;
  $("#keys tbody").replaceChildren();
  for (const k of keys) {
    const revoke = button(`Revoke ${k.name}`, async () => {
      if (!confirm(`Revoke API key ${k.name}? Its next call is refused.`)) return;
      await call("DELETE", orgPath("/api-keys/" + encodeURIComponent(k.id)));
      if ($("#key").dataset.id === k.id) {
        $("#key").replaceChildren(); // the key shown at its creation is dead now
        $("#key").hidden = true;
      }
      await load();
    });
    row("#keys", [k.name, k.created_by || "-", when(k.created_at), k.last_used_at ? when(k.last_used_at) : "never", k.expires_at ? when(k.expires_at) : "never", revoke]);
  }
  const { invitations } = await call("GET", orgPath("/invitations"));
  $("#invitations tbody").replaceChildren();
  for (const i of invitations) row("#invitations", [i.email, i.role, i.invited_by, when(i.expires_at)]);
  $("#audit tbody").replaceChildren();
  await auditPage(0);
  const v = await call("GET", orgPath("/audit/verify"));
  $("#audit-verify").className = v.ok ? "ok" : "bad";
  $("#audit-verify").textContent = v.ok
    ? `The hash chain is intact: ${v.rows} rows, head row ${v.head_seq}, hash ${v.head_hash}.`
    : `The audit log was tampered with: ${v.problem}`;
}

/**
 * auditPage appends to the audit table, newest first, the page of entries
 * older than before (0: the newest), and offers the page after it with
 * "Older entries" until the log's first row is shown.
 */
async function auditPage(before) {
  const { entries, next_before: next } = await call("GET", orgPath("/audit") + (before ? `?before=${before}` : ""));
  for (const e of entries.reverse()) {
    row("#audit", [String(e.seq), when(e.at), e.action, e.outcome, e.actor || e.actor_id || "-", e.target || "-", e.source || "-", e.detail], ["", "", "", e.outcome === "refused" ? "bad" : "", "", "", "", "detail"]);
  }
  const older = $("#audit-older");
  older.hidden = !next;
  older.onclick = next ? () => auditPage(next) : null;
}

/** onSubmit makes form sel run act with its fields, saying what failed. */
function onSubmit(sel, act) {
  $(sel).addEventListener("submit", (ev) => {
    ev.preventDefault();
    act(new FormData(ev.target)).then(
      async () => {
        say("");
        ev.target.reset();
        await load();
      },
      (e) => say(e.message),
    );
  });
}

onSubmit("#invite", async (f) => {
  const inv = await call("POST", orgPath("/invitations"), { email: f.get("email"), role: f.get("role") });
  const code = document.createElement("code");
  code.id = "invitation-code";
  code.textContent = inv.code;
  $("#invitation").replaceChildren(`Invited ${inv.email} as ${inv.role}. Hand them this one-time code (shown only now, valid until ${when(inv.expires_at)}): `, code, `. They run: ${inv.accept}`);
  $("#invitation").hidden = false;
});

onSubmit("#rename-org", (f) => call("PATCH", orgPath(""), { name: f.get("name") }));

// A new organization: its owner is the caller, and its page opens.
$("#new-org").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  call("POST", "/api/orgs", { slug: f.get("slug"), name: f.get("name") }).then(
    (o) => { location.href = "/team/" + encodeURIComponent(o.slug); },
    (e) => say(e.message),
  );
});

onSubmit("#new-agent", (f) => call("POST", orgPath("/agents"), { slug: f.get("slug"), name: f.get("name") }));

onSubmit("#new-key", async (f) => {
  const body = { name: f.get("name") };
  if (f.get("days")) body.expires_at = new Date(Date.now() + Number(f.get("days")) * 86400e3).toISOString();
  const k = await call("POST", orgPath("/api-keys"), body);
  const code = document.createElement("code");
  code.id = "key-value";
  code.textContent = k.key;
  $("#key").replaceChildren(`API key ${k.name} created (${k.expires_at ? "expires " + when(k.expires_at) : "never expires"}). The key, shown only now: `, code);
  $("#key").dataset.id = k.id;
  $("#key").hidden = false;
});

load().catch((e) => say(e.message));
