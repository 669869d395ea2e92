package main

// Device-code sign-in of the control plane (RFC 8628 in shape): `svc
// login` starts it (with its host name and version) and shows the user
// code and the page to approve it on; a signed-in user approves (the
// device page with the console cookie, which shows who is signed in and
// what asked: time, source address, host name, version, and wants the
// user to confirm they started it, RFC 8628 §5.4; or POST
// /api/login/device/approve with a credential); the CLI's poll then
// receives a fresh credential, once. The sign-in routes anyone may call
// are rate-limited per source (cpSignInRate) and pending codes capped
// (cp_store.go). The admin's first sign-in spends the
// one-time code the first boot printed. A page that sent its browser here
// to sign in (the console at a deeplink) passes ?return=<its path>, where
// the sign-in goes back to: a path of the control plane only (cpReturnPath).

import (
	"cmp"
	"encoding/hex"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// cpDeviceStart is the answer to POST /api/login/device.
type cpDeviceStart struct {
	DeviceCode              string `json:"device_code"`
	UserCode                string `json:"user_code"`
	VerificationURI         string `json:"verification_uri"`
	VerificationURIComplete string `json:"verification_uri_complete"`
	ExpiresIn               int    `json:"expires_in"` // seconds
	Interval                int    `json:"interval"`   // seconds between polls
}

// cpSignedIn is the answer of a sign-in that produced a credential.
type cpSignedIn struct {
	Credential string `json:"credential"`
}

// cpDeviceStartRequest is the optional body of POST /api/login/device:
// what the device page shows of the CLI that asks (its own claims).
type cpDeviceStartRequest struct {
	ClientHost    string `json:"client_host"`
	ClientVersion string `json:"client_version"`
}

// Limits of the unauthenticated sign-in routes (device start and poll,
// one-time codes), per source address (rateLimitSource): a burst of
// cpSignInBurst requests, then cpSignInRate a second; at most
// cpSignInKeys sources are tracked (ratelimit.go).
const (
	cpSignInRate  = 1.0
	cpSignInBurst = 60
	cpSignInKeys  = 100_000
)

// limitSignIn runs h unless r's source has spent its sign-in requests, in
// this process or across the replicas (cp_limits.go): 429 with Retry-After.
func (s *cpServer) limitSignIn(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		src := rateLimitSource(r)
		ok, wait := s.signInLimit.allow(src)
		if ok && s.signInShared != nil {
			ok, wait = s.signInShared.allow(r.Context(), src)
		}
		if !ok {
			rateLimitRefuse(w, wait, "too many sign-in requests from your address")
			return
		}
		h(w, r)
	}
}

// cpClientText is a client's claim (host name, version) as the device
// page may show it: printable characters only, at most max bytes.
func cpClientText(v string, max int) string {
	v = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, strings.TrimSpace(v))
	for len(v) > max {
		_, size := utf8.DecodeLastRuneInString(v)
		v = v[:len(v)-size]
	}
	return v
}

// handleDeviceStart starts a device sign-in for the CLI that asks (an
// empty body is an older CLI's); 429 when its address, or the control
// plane, has too many waiting for approval.
func (s *cpServer) handleDeviceStart(w http.ResponseWriter, r *http.Request) {
	var in cpDeviceStartRequest
	if r.ContentLength != 0 && !cpDecode(w, r, &in) {
		return
	}
	client := cpDeviceClient{Addr: rateLimitPeer(r), Host: cpClientText(in.ClientHost, cpDeviceNameMax), Version: cpClientText(in.ClientVersion, 64)}
	device, userCode, err := s.store.startDevice(r.Context(), client)
	if errors.Is(err, errCPTooMany) {
		rateLimitRefuse(w, cpDeviceTTL/2, "too many sign-ins from your address (or in all) wait for approval: approve them, or let them expire")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	page := s.url + "/device"
	writeJSON(w, http.StatusOK, cpDeviceStart{DeviceCode: device, UserCode: userCode, VerificationURI: page,
		VerificationURIComplete: page + "?code=" + url.QueryEscape(userCode), ExpiresIn: int(cpDeviceTTL / time.Second), Interval: cpDeviceInterval})
}

// handleDevicePoll answers a poll {device_code}: 200 with the credential
// once approved, else 400 with the RFC 8628 error code
// (authorization_pending, slow_down, expired_token, access_denied).
func (s *cpServer) handleDevicePoll(w http.ResponseWriter, r *http.Request) {
	var in struct {
		DeviceCode string `json:"device_code"`
	}
	if !cpDecode(w, r, &in) {
		return
	}
	state, cred, err := s.store.pollDevice(r.Context(), in.DeviceCode)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	switch state {
	case "approved":
		writeJSON(w, http.StatusOK, cpSignedIn{Credential: cred})
	case "pending":
		cpError(w, http.StatusBadRequest, "authorization_pending", "waiting for approval on the sign-in page")
	case "slow_down":
		cpError(w, http.StatusBadRequest, "slow_down", "polling too fast")
	case "denied":
		cpError(w, http.StatusBadRequest, "access_denied", "the sign-in was denied")
	default:
		cpError(w, http.StatusBadRequest, "expired_token", "the device code expired or was used: run svc login again")
	}
}

// handleSignInCode exchanges a one-time sign-in code {code} for a CLI
// credential (the admin's first sign-in without a browser).
func (s *cpServer) handleSignInCode(w http.ResponseWriter, r *http.Request) {
	var in struct{ Code string }
	if !cpDecode(w, r, &in) {
		return
	}
	cred, ok := s.redeem(w, r, in.Code, "cli")
	if ok {
		writeJSON(w, http.StatusOK, cpSignedIn{Credential: cred})
	}
}

// cpSignInCodeTTL is the life of a sign-in code minted for a browser.
const cpSignInCodeTTL = 10 * time.Minute

// cpNewSignInCode is the answer of POST /api/login/codes.
type cpNewSignInCode struct {
	Code      string    `json:"code"`
	SignInURL string    `json:"sign_in_url"` // the page to type it on
	ExpiresAt time.Time `json:"expires_at"`
}

// handleNewSignInCode mints the caller a one-time sign-in code for a
// browser (`svc login --browser`): a user signed in on the command line
// signs a browser in with it on the device page, where approving further
// devices and the console's deeplinks need a signed-in browser.
func (s *cpServer) handleNewSignInCode(w http.ResponseWriter, r *http.Request) {
	expires := s.now().Add(cpSignInCodeTTL).UTC().Truncate(time.Second)
	code, err := s.store.newSignInCode(r.Context(), caller(r).user.ID, expires)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, cpNewSignInCode{Code: code, SignInURL: s.origin() + cpConsoleSignIn, ExpiresAt: expires})
}

// redeem spends a one-time sign-in code and mints a credential of kind for
// its user (a console one's device is "browser"); on failure it answers and returns false.
func (s *cpServer) redeem(w http.ResponseWriter, r *http.Request, code, kind string) (string, bool) {
	user, err := s.store.redeemSignInCode(r.Context(), code)
	if errors.Is(err, errCPNotFound) {
		s.audit(r, cpAuditEvent{Action: "signin.failed", Outcome: cpAuditRefused, Detail: "one-time sign-in code wrong, expired or used"})
		cpError(w, http.StatusUnauthorized, codeAuth, "the sign-in code is wrong, expired or was already used: `svc login --browser` mints a new one")
		return "", false
	}
	if err == nil {
		var cred string
		device := cpCredentialBrowser
		if kind == "cli" {
			device = "one-time sign-in code"
		}
		if cred, err = s.store.createCredential(r.Context(), user.ID, kind, device); err == nil {
			s.audit(r, cpAuditEvent{ActorID: user.ID, Actor: user.Email, Action: "signin", Target: user.Email, Detail: "one-time code, " + kind + " credential"})
			return cred, true
		}
	}
	s.internal(w, r, err)
	return "", false
}

// handleDeviceApprove approves a user code {user_code} as the caller.
func (s *cpServer) handleDeviceApprove(w http.ResponseWriter, r *http.Request) {
	var in struct {
		UserCode string `json:"user_code"`
	}
	if !cpDecode(w, r, &in) {
		return
	}
	err := s.store.decideDevice(r.Context(), in.UserCode, caller(r).user.ID, "approved")
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, codeNotFound, cpNoDeviceRequest)
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	s.log.Info("device sign-in approved", "user", caller(r).user.ID)
	s.audit(r, cpAuditEvent{Action: "signin.device_approved", Target: caller(r).user.Email, Detail: cpAuditCodeTag(in.UserCode)})
	writeJSON(w, http.StatusOK, map[string]bool{"approved": true})
}

// cpNoDeviceRequest says a user code has no pending sign-in.
const cpNoDeviceRequest = "no pending sign-in with that code: it expired or was approved already; run svc login again"

// cpDevicePage is the device page: signed in to the console, who is, and
// the sign-in a code asks for (when, from where, the CLI's host name and
// version) to confirm and approve, or deny; otherwise the form to sign in
// with a one-time code first.
var cpDevicePage = template.Must(template.New("device").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>svc sign-in</title><link rel="icon" href="data:,">
<style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:3rem auto}input{font-size:1.1rem;margin:.3rem 0}
dt{font-weight:bold}dd{margin:0 0 .5rem 0}.notice{border-left:4px solid #b3261e;padding-left:.6rem}.code{font-family:monospace;font-size:1.2rem}</style></head>
<body><h1>svc sign-in</h1>
{{with .Notice}}<p class="notice" role="alert">{{.}}</p>{{end}}
{{- if .Done}}<p>{{.Done}}</p>
{{- else if and .User (not .Return)}}<p id="signed-in">Signed in as <b>{{.User.Email}}</b>{{if ne .User.Name .User.Email}} ({{.User.Name}}){{end}}.</p>
{{- with .Request}}
<form method="post" action="/device/approve">
<p>A terminal asks to sign in to this control plane as you, with the code <span class="code">{{$.Code}}</span>.</p>
<dl id="request"><dt>Asked</dt><dd>{{.CreatedAt.UTC.Format "2006-01-02 15:04:05 UTC"}} ({{$.Age}} ago)</dd>
<dt>From the address</dt><dd>{{.Addr}}</dd>
<dt>Host name, as the asking svc reports it</dt><dd>{{or .Host "(not given)"}}</dd>
<dt>svc version, as it reports it</dt><dd>{{or .Version "(not given)"}}</dd></dl>
<p>Approve only if you ran <code>svc login</code> yourself just now and your terminal shows this code.
Whoever started it gets your access: if someone sent you this link, deny.</p>
<input type="hidden" name="user_code" value="{{$.Code}}">
<p><label><input type="checkbox" name="confirm" value="yes" required> I started this sign-in and my terminal shows {{$.Code}}</label></p>
<p><button name="decision" value="approve">Approve</button> <button name="decision" value="deny" formnovalidate>Deny</button></p></form>
{{- else}}
<form method="get" action="/device"><p>To approve a sign-in, enter the code your terminal shows after <code>svc login</code>:</p>
<input name="code" aria-label="Code from your terminal" autocomplete="off" required> <button>Continue</button></form>
{{- end}}
{{- else}}<form method="post" action="/device/sign-in"><p>{{if .Return}}Sign in to open the console: enter a one-time sign-in code:{{else}}Not signed in to this control plane yet? Enter a one-time sign-in code:{{end}}</p>
<input type="hidden" name="user_code" value="{{.Code}}"><input type="hidden" name="return" value="{{.Return}}">
<input name="sign_in_code" aria-label="One-time sign-in code" autocomplete="off" required> <button>Sign in</button></form>
{{- with .SSO}}<p>Or: <a id="sso" href="{{$.SSOStart}}">Sign in with {{.}}</a></p>{{end}}
{{end}}</body></html>
`))

// cpDevicePageData fills cpDevicePage: the user code, the signed-in user
// (none: the sign-in form), the pending request of the code with its Age,
// the path to go back to after signing in, a Notice (what went wrong), or
// Done (what was decided).
type cpDevicePageData struct {
	Code    string
	User    *cpUser
	Request *cpDeviceRequest
	Age     string
	Return  string
	Notice  string
	Done    string
	// SSO names the single sign-on provider (none: ""), SSOStart the
	// link that starts it and comes back to this page (cp_oidc_flow.go).
	SSO, SSOStart string
}

// cookieUser is the user of r's console cookie; errCPNotFound without a
// live one.
func (s *cpServer) cookieUser(r *http.Request) (cpUser, error) {
	c, err := r.Cookie(cpCookie)
	if err != nil {
		return cpUser{}, errCPNotFound
	}
	u, _, err := s.store.userByCredential(r.Context(), c.Value)
	return u, err
}

// devicePage answers the device page for code, as the console cookie's
// user sees it, with status and notice.
func (s *cpServer) devicePage(w http.ResponseWriter, r *http.Request, status int, code, back, notice string) {
	d := cpDevicePageData{Code: code, Return: back, Notice: notice}
	if s.oidc != nil {
		after := "/device"
		if code != "" {
			after += "?code=" + url.QueryEscape(code)
		}
		d.SSO, d.SSOStart = s.oidc.cfg.Name, "/oidc/start?return="+url.QueryEscape(cmp.Or(back, after))
	}
	u, err := s.cookieUser(r)
	switch {
	case err == nil:
		d.User = &u
	case !errors.Is(err, errCPNotFound):
		s.internal(w, r, err)
		return
	}
	if d.User != nil && code != "" && back == "" {
		req, err := s.store.deviceRequest(r.Context(), code)
		switch {
		case err == nil:
			d.Request, d.Age = &req, max(s.now().Sub(req.CreatedAt), 0).Round(time.Second).String()
		case errors.Is(err, errCPNotFound):
			d.Notice = cmp.Or(d.Notice, "No sign-in waits for the code "+code+": it expired, was typed wrong or was decided already. Run svc login again for a new one.")
		default:
			s.internal(w, r, err)
			return
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	cpDevicePage.Execute(w, d)
}

// handleDevicePage serves the device page for ?code= and ?return= (an
// unsafe return is dropped: the page then signs in as if none was given).
func (s *cpServer) handleDevicePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	back, _ := cpReturnPath(q.Get("return"))
	s.devicePage(w, r, http.StatusOK, q.Get("code"), back, "")
}

// cpReturnMax bounds the length of a return path.
const cpReturnMax = 2048

// cpReturnPath checks that raw is a path of the control plane's own
// origin, where a sign-in may send the browser back: "/" then printable
// ASCII (a browser's location.pathname + search + hash is percent-encoded
// so), never "//" or a backslash at all (which browsers read as another
// host: /\evil.example), no scheme or host; anything else is refused, so
// the device page is no open redirect.
func cpReturnPath(raw string) (string, bool) {
	if len(raw) < 1 || len(raw) > cpReturnMax || raw[0] != '/' || strings.HasPrefix(raw, "//") {
		return "", false
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c >= 0x7f || c == '\\' {
			return "", false
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" || !strings.HasPrefix(u.Path, "/") {
		return "", false
	}
	return raw, true
}

// parseForm parses r's url-encoded form (at most maxRequestBody bytes) from
// the control plane's own origin, which a browser's form post names in
// Origin (none is refused too); on failure it answers and returns false.
func (s *cpServer) parseForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
	if r.Header.Get("Origin") != s.origin() {
		cpError(w, http.StatusForbidden, "forbidden", "a console request must come from "+s.origin())
		return false
	}
	if err := r.ParseForm(); err != nil {
		cpError(w, http.StatusBadRequest, "invalid", "form: "+err.Error())
		return false
	}
	return true
}

// handleDevicePageSignIn spends a one-time sign-in code from the device
// page, sets the console cookie and goes back to the form's return path
// when it is safe (cpReturnPath), else to the device page.
func (s *cpServer) handleDevicePageSignIn(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r) {
		return
	}
	cred, ok := s.redeem(w, r, r.PostForm.Get("sign_in_code"), "console")
	if !ok {
		return
	}
	s.setConsoleCookie(w, cred)
	if back, ok := cpReturnPath(r.PostForm.Get("return")); ok {
		w.Header().Set("Location", back) // as is: http.Redirect would path.Clean the fragment too
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/device?code="+url.QueryEscape(r.PostForm.Get("user_code")), http.StatusSeeOther)
}

// handleDevicePageApprove decides the page's user code as the console
// cookie's user: decision=deny denies it; an approval needs confirm=yes
// (the user says they started it, RFC 8628 §5.4). Without a sign-in, or
// when the code waits no more, it answers the device page saying so.
func (s *cpServer) handleDevicePageApprove(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r) {
		return
	}
	code := r.PostForm.Get("user_code")
	u, err := s.cookieUser(r)
	if errors.Is(err, errCPNotFound) {
		s.devicePage(w, r, http.StatusUnauthorized, code, "", "You are not signed in here (or your sign-in expired): sign in, then approve.")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	status, done := "denied", "Denied. The terminal that asked gets no access."
	if r.PostForm.Get("decision") != "deny" {
		if r.PostForm.Get("confirm") != "yes" {
			s.devicePage(w, r, http.StatusBadRequest, code, "", "Nothing approved: confirm that you started this sign-in yourself.")
			return
		}
		status, done = "approved", "Approved. Return to your terminal."
	}
	err = s.store.decideDevice(r.Context(), code, u.ID, status)
	if errors.Is(err, errCPNotFound) {
		s.devicePage(w, r, http.StatusNotFound, code, "", "")
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	s.log.Info("device sign-in "+status, "user", u.ID)
	s.audit(r, cpAuditEvent{ActorID: u.ID, Actor: u.Email, Action: "signin.device_" + status, Target: u.Email, Detail: cpAuditCodeTag(code)})
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	cpDevicePage.Execute(w, cpDevicePageData{Done: done})
}

// cpAuditCodeTag is what the audit log says of a device's user code: not
// the code (the log holds no code, issue 38 item C) but the start of its
// SHA-256, which matches the code on the screen it was typed from.
func cpAuditCodeTag(code string) string {
	return "user code sha256:" + hex.EncodeToString(cpHash(cpNormalizeCode(code))[:4])
}
