// Signing in to svc dev's console from a browser it does not admit by
// itself: another machine under --listen, a system where svc dev cannot
// tell which account a connection comes from, or a console session of an
// earlier svc dev. The link svc dev prints signs a browser in once
// (dom.js signInFromLink); here the developer may paste the dev key.

import { APIError, el, errorBox, setLocalBearer } from "./dom.js";

/**
 * signInPage says why the API refused this browser and takes the dev key,
 * which it trades at once for a console session (POST
 * /api/console/session {"key"}) that dies with svc dev: the key itself is
 * never kept, where a server started later on this host and port could
 * read it.
 */
export function signInPage(err) {
  const key = el("input", { type: "password", id: "dev-key", autocomplete: "off", required: true, "aria-label": "dev key" });
  const msg = el("div", { "aria-live": "polite" });
  const submit = async (e) => {
    e.preventDefault();
    msg.replaceChildren();
    const r = await fetch("/api/console/session", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ key: key.value.trim() }),
    });
    const body = await r.json().catch(() => null);
    key.value = "";
    if (!r.ok) {
      msg.replaceChildren(errorBox(new APIError(r.status, body, `POST /api/console/session: HTTP ${r.status}`)));
      return;
    }
    setLocalBearer(body.token);
    location.reload();
  };
  return el("section", { id: "sign-in" },
    el("h1", {}, "Sign in to svc dev"),
    errorBox(err), msg,
    el("p", {}, "Open the console link svc dev printed (each link signs in one browser), or paste the project's dev key: ",
      el("code", {}, ".svc/dev-api-key"), ", which ", el("code", {}, "svc env"), " prints as ", el("code", {}, "SVC_DEV_KEY"), "."),
    el("form", { onsubmit: submit }, key, " ", el("button", { type: "submit" }, "Sign in")));
}
