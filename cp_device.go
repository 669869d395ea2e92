package main

// Device-code sign-in of the control plane (RFC 8628 in shape): `svc
// login` starts it and shows the user code and the page to approve it on;
// a signed-in user approves (the device page with the console cookie, or
// POST /api/login/device/approve with a credential); the CLI's poll then
// receives a fresh credential, once. The admin's first sign-in spends the
// one-time code the first boot printed. A page that sent its browser here
// to sign in (the console at a deeplink) passes ?return=<its path>, where
// the sign-in goes back to: a path of the control plane only (cpReturnPath).

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
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

// handleDeviceStart starts a device sign-in.
func (s *cpServer) handleDeviceStart(w http.ResponseWriter, r *http.Request) {
	device, userCode, err := s.store.startDevice(r.Context())
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
// its user; on failure it answers and returns false.
func (s *cpServer) redeem(w http.ResponseWriter, r *http.Request, code, kind string) (string, bool) {
	user, err := s.store.redeemSignInCode(r.Context(), code)
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusUnauthorized, codeAuth, "the sign-in code is wrong, expired or was already used: `svc login --browser` mints a new one")
		return "", false
	}
	if err == nil {
		var cred string
		if cred, err = s.store.createCredential(r.Context(), user, kind); err == nil {
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
	if s.approve(w, r, in.UserCode) {
		writeJSON(w, http.StatusOK, map[string]bool{"approved": true})
	}
}

// approve approves userCode for the caller; on failure it answers and
// returns false.
func (s *cpServer) approve(w http.ResponseWriter, r *http.Request, userCode string) bool {
	err := s.store.approveDevice(r.Context(), userCode, caller(r).user.ID)
	if errors.Is(err, errCPNotFound) {
		cpError(w, http.StatusNotFound, codeNotFound, "no pending sign-in with that code: it expired or was approved already")
		return false
	}
	if err != nil {
		s.internal(w, r, err)
		return false
	}
	s.log.Info("device sign-in approved", "user", caller(r).user.ID)
	return true
}

// cpDevicePage is the device page: approve a user code when signed in to
// the console, or sign in with a one-time code first.
var cpDevicePage = template.Must(template.New("device").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>svc sign-in</title><link rel="icon" href="data:,">
<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto}input{font-size:1.1rem;margin:.3rem 0}</style></head>
<body><h1>svc sign-in</h1>
{{if .Done}}<p>Approved. Return to your terminal.</p>{{else}}{{if not .Return}}
<form method="post" action="/device/approve"><p>Approve the sign-in showing this code in your terminal:</p>
<input name="user_code" value="{{.Code}}" autocomplete="off" required> <button>Approve</button></form>
<hr>{{end}}<form method="post" action="/device/sign-in"><p>{{if .Return}}Sign in to open the console: enter a one-time sign-in code:{{else}}Not signed in to this control plane yet? Enter a one-time sign-in code:{{end}}</p>
<input type="hidden" name="user_code" value="{{.Code}}"><input type="hidden" name="return" value="{{.Return}}">
<input name="sign_in_code" aria-label="One-time sign-in code" autocomplete="off" required> <button>Sign in</button></form>
{{end}}</body></html>
`))

// cpDevicePageData fills cpDevicePage: the user code to approve, the path
// to go back to after signing in, or Done once approved.
type cpDevicePageData struct {
	Code   string
	Return string
	Done   bool
}

// handleDevicePage serves the device page for ?code= and ?return= (an
// unsafe return is dropped: the page then signs in as if none was given).
func (s *cpServer) handleDevicePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	back, _ := cpReturnPath(q.Get("return"))
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	cpDevicePage.Execute(w, cpDevicePageData{Code: q.Get("code"), Return: back})
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
// the control plane's own origin; on failure it answers and returns false.
func (s *cpServer) parseForm(w http.ResponseWriter, r *http.Request) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBody)
	if o := r.Header.Get("Origin"); o != "" && o != s.origin() {
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
	http.SetCookie(w, &http.Cookie{Name: cpCookie, Value: cred, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: strings.HasPrefix(s.origin(), "https:"), MaxAge: int((30 * 24 * time.Hour) / time.Second)})
	if back, ok := cpReturnPath(r.PostForm.Get("return")); ok {
		w.Header().Set("Location", back) // as is: http.Redirect would path.Clean the fragment too
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/device?code="+url.QueryEscape(r.PostForm.Get("user_code")), http.StatusSeeOther)
}

// handleDevicePageApprove approves the page's user code as the console user.
func (s *cpServer) handleDevicePageApprove(w http.ResponseWriter, r *http.Request) {
	if !s.parseForm(w, r) || !s.approve(w, r, r.PostForm.Get("user_code")) {
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	cpDevicePage.Execute(w, cpDevicePageData{Done: true})
}
