// Signing in to svc dev's console from a browser it does not admit by
// itself: another machine under --listen, a system where svc dev cannot
// tell which account a connection comes from, or a console session of an
// earlier svc dev. The link svc dev prints signs a browser in once
// (dom.js signInFromLink); here the developer may paste the dev key.

import { el, errorBox, setLocalBearer } from "./dom.js";

/** signInPage says why the API refused this browser and takes the dev key. */
export function signInPage(err) {
  const key = el("input", { type: "password", id: "dev-key", autocomplete: "off", required: true, "aria-label": "dev key" });
  const submit = (e) => {
    e.preventDefault();
    setLocalBearer(key.value.trim());
    location.reload();
  };
  return el("section", { id: "sign-in" },
    el("h1", {}, "Sign in to svc dev"),
    errorBox(err),
    el("p", {}, "Open the console link svc dev printed (each link signs in one browser), or paste the project's dev key: ",
      el("code", {}, ".svc/dev-api-key"), ", which ", el("code", {}, "svc env"), " prints as ", el("code", {}, "SVC_DEV_KEY"), "."),
    el("form", { onsubmit: submit }, key, " ", el("button", { type: "submit" }, "Sign in")));
}
