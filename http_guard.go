package main

// The HTTP guard (issue 8): the one middleware in front of every server.
// On the API it decides, before any route runs, whether a request may reach
// it: its Host (DNS rebinding), its Origin (cross-site requests), CORS
// preflights, and its credential through the host's check (httpGuardAuth:
// dev's keys or loopback here, the box's signatures, identity tokens and
// wire keys in box_auth.go). On the API and on object storage it
// paces request bodies, so a client that sends a byte now and then cannot
// hold a connection open.

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Limits and names of the guard.
const (
	// httpGuardBodyGrace is how long a request body may take before it must
	// keep up with httpGuardBodyMinRate: room for a slow start or a client
	// that waits for 100 Continue.
	httpGuardBodyGrace = 10 * time.Second
	// httpGuardBodyMinRate is the average rate, in bytes per second, a
	// request body must keep after the grace: its n-th byte is due by
	// start + grace + n/rate. 16 KiB/s lets any client that makes progress
	// finish (a 64 MiB upload may take 68 minutes) and cuts a dribbler off
	// after the grace.
	httpGuardBodyMinRate = 16 << 10
	// httpGuardPreflightMaxAge is how long, in seconds, a browser may cache
	// the answer to a CORS preflight.
	httpGuardPreflightMaxAge = 600
	// httpGuardAllowedMethods are the methods a preflight may ask for.
	httpGuardAllowedMethods = "GET, POST, PUT, PATCH, DELETE"
)

// errHTTPSlowBody is the error a request body returns once it fell behind
// the guard's minimum rate; the connection is then closed.
var errHTTPSlowBody = errors.New("request body arrived too slowly")

// httpGuardConfig is what a guard enforces. The zero value paces request
// bodies only.
type httpGuardConfig struct {
	// Access turns on the Host, Origin, CORS and credential checks (the
	// API). Off, the guard only paces bodies: object storage authenticates
	// with SigV4, which signs the Host, and browsers cannot forge it.
	Access bool
	// BindHost is the IP address the server listens on; "" means
	// 127.0.0.1. Bound to the unspecified address (0.0.0.0, --listen), any
	// IP literal is an allowed Host: an IP cannot be DNS-rebound.
	BindHost string
	// AllowedHosts are more Host names to accept (SVC_ALLOWED_HOSTS).
	AllowedHosts []string
	// AllowedOrigins are more browser origins, scheme://host[:port], that
	// may change state and read answers (SVC_ALLOWED_ORIGINS).
	AllowedOrigins []string
	// APIKeys are the keys every route accepts (svc dev: the project's dev
	// key first, then SVC_API_KEYS). Used when Auth is nil: then a request
	// without a key is admitted only from the developer's own account on
	// this machine or through the tunnel (httpGuardKeys.admit). A server
	// bound beyond loopback must have keys.
	APIKeys []string
	// Console, with APIKeys, holds the console's sessions: the one-time
	// codes of the links svc dev prints and the tokens pages trade them
	// for (console_session.go).
	Console *consoleSessions
	// Auth, when set, is the host's own credential check in place of
	// APIKeys (the box: signatures, identity tokens, wire keys).
	Auth httpGuardAuth
	// Public accepts any Host and any Origin and leaves CORS to Auth: for
	// a server facing the internet (the box, which answers CORS for its
	// control plane's console only, cors.go) whose every route asks for an
	// explicit credential (a header, never a cookie or the caller's
	// address), which neither a cross-site page nor a DNS-rebound name can
	// borrow.
	Public bool
}

// httpGuardAuth is a host's credential check, run by the guard after the
// Host and Origin checks and before any route. It answers a refused
// request itself and reports whether r goes on; it may replace r's body
// or headers (r is the guard's own shallow copy).
type httpGuardAuth interface {
	admit(w http.ResponseWriter, r *http.Request) bool
}

// httpGuard is the middleware in front of a server's routes. Built by
// newHTTPGuard; read-only afterwards, except that tests may shrink the body
// pace before serving.
type httpGuard struct {
	next    http.Handler
	access  bool
	public  bool
	bind    netip.Addr
	hosts   map[string]bool // normalized AllowedHosts
	origins map[string]bool // normalized AllowedOrigins
	auth    httpGuardAuth

	// bodyGrace and bodyMinRate pace request bodies (httpGuardBodyGrace,
	// httpGuardBodyMinRate in bytes per second).
	bodyGrace   time.Duration
	bodyMinRate int64
}

// newHTTPGuard checks cfg and returns the guard in front of next. A server
// bound beyond loopback with access checks must have keys.
func newHTTPGuard(next http.Handler, cfg httpGuardConfig) (*httpGuard, error) {
	if next == nil {
		return nil, errors.New("new http guard: no handler")
	}
	bind := cfg.BindHost
	if bind == "" {
		bind = "127.0.0.1"
	}
	addr, err := netip.ParseAddr(bind)
	if err != nil {
		return nil, fmt.Errorf("new http guard: bind address %q is not an IP address", cfg.BindHost)
	}
	g := &httpGuard{next: next, access: cfg.Access, public: cfg.Public, bind: addr.Unmap(), hosts: map[string]bool{}, origins: map[string]bool{},
		auth: cfg.Auth, bodyGrace: httpGuardBodyGrace, bodyMinRate: httpGuardBodyMinRate}
	if cfg.Access && cfg.Auth == nil && len(cfg.APIKeys) == 0 && !g.bind.IsLoopback() {
		return nil, fmt.Errorf("new http guard: a server bound to %s needs API keys", bind)
	}
	for _, h := range cfg.AllowedHosts {
		n, err := httpGuardHost(h)
		if err != nil {
			return nil, fmt.Errorf("new http guard: %w", err)
		}
		g.hosts[n] = true
	}
	for _, o := range cfg.AllowedOrigins {
		n, err := httpGuardParseOrigin(o)
		if err != nil {
			return nil, fmt.Errorf("new http guard: %w", err)
		}
		g.origins[n.String()] = true
	}
	if g.auth == nil {
		keys, err := newHTTPGuardKeys(cfg.APIKeys)
		if err != nil {
			return nil, err
		}
		keys.owner, keys.console = httpGuardOwner, cfg.Console
		g.auth = keys
	}
	return g, nil
}

// httpGuardPrincipalKey is the request-context key under which a
// credential check names who a request acts for when that is not the
// credential's text: the box records an identity token's user, stable
// across the token's renewals.
type httpGuardPrincipalKey struct{}

// httpGuardPrincipal returns who r acts for, which scopes durable
// sessions: what the credential check recorded, else the credential.
func httpGuardPrincipal(r *http.Request) string {
	if p, ok := r.Context().Value(httpGuardPrincipalKey{}).(string); ok {
		return p
	}
	return wireCredential(r)
}

// httpGuardKeys is dev's credential check (admit), and the box's check of
// the wire keys of SVC_API_KEYS (keyValid).
type httpGuardKeys struct {
	mu   sync.RWMutex // guards keys, whose first svc dev rotates (rotateDevKey)
	keys [][]byte
	// owner reports whether a request comes from the developer's own
	// account on this machine (httpGuardOwner); nil: nobody does.
	owner func(*http.Request) bool
	// console holds the console's sessions; nil: none.
	console *consoleSessions
}

// newHTTPGuardKeys returns the check of keys.
func newHTTPGuardKeys(keys []string) (*httpGuardKeys, error) {
	k := &httpGuardKeys{}
	for _, key := range keys {
		if key == "" {
			return nil, errors.New("new http guard: empty API key")
		}
		k.keys = append(k.keys, []byte(key))
	}
	return k, nil
}

// httpGuardList splits a comma-separated list from the environment and
// normalizes each entry with norm; empty entries are skipped.
func httpGuardList(s string, norm func(string) (string, error)) ([]string, error) {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		n, err := norm(e)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// httpGuardHost normalizes an allowed host: a name or IP address without
// scheme or port, lowercase, IPs in canonical form.
func httpGuardHost(s string) (string, error) {
	name := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(s)), ".")
	if addr, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return addr.Unmap().String(), nil
	}
	if name == "" || strings.Trim(name, "abcdefghijklmnopqrstuvwxyz0123456789-._") != "" {
		return "", fmt.Errorf("allowed host %q: want a host name or IP address, without scheme or port", s)
	}
	return name, nil
}

// httpGuardOriginNormalize normalizes an allowed origin to
// scheme://host[:port] (see httpGuardParseOrigin).
func httpGuardOriginNormalize(s string) (string, error) {
	o, err := httpGuardParseOrigin(s)
	if err != nil {
		return "", err
	}
	return o.String(), nil
}

// httpGuardOrigin is a parsed browser origin. port is "" for the scheme's
// default port.
type httpGuardOrigin struct {
	scheme, host, port string
}

// String is the origin as scheme://host[:port].
func (o httpGuardOrigin) String() string {
	switch {
	case o.port != "":
		return o.scheme + "://" + net.JoinHostPort(o.host, o.port)
	case strings.Contains(o.host, ":"):
		return o.scheme + "://[" + o.host + "]"
	}
	return o.scheme + "://" + o.host
}

// httpGuardDefaultPort is the port a URL of scheme means without one.
var httpGuardDefaultPort = map[string]string{"http": "80", "https": "443"}

// httpGuardParseOrigin parses an Origin header or an allowed origin: http
// or https, a host, an optional port, nothing else. "null" is refused.
func httpGuardParseOrigin(s string) (httpGuardOrigin, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || httpGuardDefaultPort[u.Scheme] == "" || u.Host == "" || u.User != nil || u.Opaque != "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return httpGuardOrigin{}, fmt.Errorf("origin %q: want http:// or https:// with a host and an optional port only", s)
	}
	o := httpGuardOrigin{scheme: u.Scheme, host: httpGuardHostname(u.Host), port: u.Port()}
	if o.port == httpGuardDefaultPort[o.scheme] {
		o.port = ""
	}
	return o, nil
}

// httpGuardHostname is the host name of a Host header or host[:port]:
// lowercase, without port, brackets or trailing dot.
func httpGuardHostname(hostport string) string {
	h := strings.TrimSpace(hostport)
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// httpGuardLoopbackName reports whether a host name always means this
// machine: localhost, *.localhost, 127.0.0.0/8 or ::1.
func httpGuardLoopbackName(name string) bool {
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	addr, err := netip.ParseAddr(name)
	return err == nil && addr.Unmap().IsLoopback()
}

// hostAllowed reports whether the Host header names this server: a
// loopback name, the bind address, any IP literal when bound to all
// addresses, or a name of SVC_ALLOWED_HOSTS. Any other name may be an
// attacker's, rebound by DNS to this address.
func (g *httpGuard) hostAllowed(hostport string) bool {
	name := httpGuardHostname(hostport)
	if name == "" {
		return false
	}
	if httpGuardLoopbackName(name) || g.hosts[name] {
		return true
	}
	addr, err := netip.ParseAddr(name)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	return g.bind.IsUnspecified() || addr == g.bind || g.hosts[addr.String()]
}

// originAllowed reports whether a browser page at origin may call this
// server: an origin of SVC_ALLOWED_ORIGINS, any port of a loopback name
// (the console and browser SDKs on another localhost port), or the very
// server the request addressed (host, already allowed, and port).
func (g *httpGuard) originAllowed(origin, reqHost string) bool {
	o, err := httpGuardParseOrigin(origin)
	if err != nil {
		return false
	}
	if g.origins[o.String()] || httpGuardLoopbackName(o.host) {
		return true
	}
	port, reqPort := o.port, ""
	if _, p, err := net.SplitHostPort(reqHost); err == nil {
		reqPort = p
	}
	if port == "" {
		port = httpGuardDefaultPort[o.scheme]
	}
	if reqPort == "" {
		reqPort = httpGuardDefaultPort[o.scheme]
	}
	return port == reqPort && o.host == httpGuardHostname(reqHost)
}

// httpGuardStateChanging reports whether method changes state, so that a
// cross-site page must not send it.
func httpGuardStateChanging(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// httpGuardWire is the chat wire whose error shape answers path, or nil for
// the runtime's own routes and the console.
func httpGuardWire(path string) wireCodec {
	switch {
	case strings.HasPrefix(path, "/openai/"):
		return openAIWire{}
	case strings.HasPrefix(path, "/anthropic/"):
		return anthropicWire{}
	case strings.HasPrefix(path, "/agui/"), path == "/chat":
		return aguiWire{}
	}
	return nil
}

// ServeHTTP paces the request body, admits the request, and serves it.
func (g *httpGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A shallow copy the guard may change: net/http keeps the original
	// request and body for itself (it discards an unread body after the
	// handler, under the deadline the pace armed).
	r = r.WithContext(r.Context())
	g.paceBody(w, r)
	if g.access {
		// No other site may frame the console (clickjacking) or have a
		// response sniffed into another type.
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
	}
	if g.access && !g.admit(w, r) {
		return
	}
	g.next.ServeHTTP(w, r)
}

// admit checks Host and Origin, answers preflights, then asks the host's
// credential check; it reports whether the request goes on to the routes.
func (g *httpGuard) admit(w http.ResponseWriter, r *http.Request) bool {
	if !g.public && !g.hostAllowed(r.Host) {
		writeAPIError(w, http.StatusForbidden, apiError{Code: "host_not_allowed",
			Message: fmt.Sprintf("host %q is not allowed (a DNS-rebinding guard): use localhost (with --listen, an IP address too) or add the name to SVC_ALLOWED_HOSTS", r.Host)})
		return false
	}
	if g.public {
		return g.auth.admit(w, r) // which answers CORS itself
	}
	origin := r.Header.Get("Origin")
	allowed := origin != "" && g.originAllowed(origin, r.Host)
	if r.Method == http.MethodOptions && origin != "" {
		g.preflight(w, r, allowed)
		return false
	}
	if origin != "" && !allowed && httpGuardStateChanging(r.Method) {
		writeAPIError(w, http.StatusForbidden, apiError{Code: "origin_not_allowed",
			Message: fmt.Sprintf("origin %q may not change state here: pages on localhost or on this server may; add others to SVC_ALLOWED_ORIGINS", origin)})
		return false
	}
	if allowed {
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Add("Vary", "Origin")
	}
	return g.auth.admit(w, r)
}

// admit checks the credential and reports whether the request goes on to
// the routes. Admitted are: the console's files and its sign-in (no data
// in them); a key; a console session (which then stands as the console's
// own principal); and, under the emulator's loopback convention (the
// runtime's routes need no credential, the chat wires any non-empty one),
// the developer's own account on this machine (httpGuardOwner) and the
// requests the tunnel vouches for. Anyone else is refused with 401, the
// wire's error shape on a chat wire.
func (g *httpGuardKeys) admit(w http.ResponseWriter, r *http.Request) bool {
	if g.console != nil && r.URL.Path == consoleSessionPath {
		g.console.serveTrade(w, r, g)
		return false
	}
	if consoleStatic(r) || healthProbe(r) {
		return true
	}
	cred := wireCredential(r)
	switch {
	case cred != "" && g.console != nil && g.console.valid(cred):
		r.Header = r.Header.Clone()
		r.Header.Del("x-api-key")
		r.Header.Set("Authorization", "Bearer "+consolePrincipal)
		*r = *r.WithContext(context.WithValue(r.Context(), httpGuardDevKey{}, httpGuardConsoleSession))
		return true
	case cred != "" && g.keyValid(cred):
		if g.isDevKey(cred) {
			*r = *r.WithContext(context.WithValue(r.Context(), httpGuardDevKey{}, httpGuardShowedDevKey))
		}
		return true
	}
	wire := httpGuardWire(r.URL.Path)
	if strings.HasPrefix(cred, consoleTokenPrefix) && g.console != nil {
		const msg = "this console session belongs to an earlier svc dev: open a console link of the running svc dev (`svc console` prints one)"
		if wire != nil {
			wire.writeError(w, &wireError{Status: http.StatusUnauthorized, Kind: wireErrAuth, Message: msg})
		} else {
			writeAPIError(w, http.StatusUnauthorized, apiError{Code: "console_session", Message: msg})
		}
		return false
	}
	if httpGuardVouched(r) || (g.owner != nil && g.owner(r)) {
		if wire == nil || cred != "" {
			return true
		}
		wire.writeError(w, &wireError{Status: http.StatusUnauthorized, Kind: wireErrAuth,
			Message: "missing credential: send Authorization: Bearer <token> or x-api-key: <key>"})
		return false
	}
	msg := "missing or invalid credential: svc dev requires the project's dev key (.svc/" + devAPIKeyFile +
		", which `svc env` prints as SVC_DEV_KEY) on every route from other accounts of this machine and from other machines: " +
		"send Authorization: Bearer <key> or x-api-key: <key>; in a browser, open the console link svc dev printed"
	w.Header().Set("WWW-Authenticate", `Bearer realm="svc"`)
	if wire != nil {
		wire.writeError(w, &wireError{Status: http.StatusUnauthorized, Kind: wireErrAuth, Message: msg})
	} else {
		writeAPIError(w, http.StatusUnauthorized, apiError{Code: "auth", Message: msg})
	}
	return false
}

// httpGuardDevKey is the request-context key set when the request showed
// the project's dev key or a console session traded for the link svc dev
// printed: proof that the caller can read the project's .svc, which the
// dev-only routes that show secrets ask for (devKeyShown). Its value is
// which of the two (an httpGuardProof).
type httpGuardDevKey struct{}

// httpGuardProof is how a request proved it may see the local secrets.
type httpGuardProof int

const (
	httpGuardShowedDevKey   httpGuardProof = iota + 1 // the dev key itself
	httpGuardConsoleSession                           // a console session, which never sees the dev key
)

// httpGuardVouchedKey is the request-context key the tunnel sets on the
// requests it relays: the relay checked the caller's identity token.
type httpGuardVouchedKey struct{}

// httpGuardVouched reports whether the tunnel vouched for r.
func httpGuardVouched(r *http.Request) bool {
	v, _ := r.Context().Value(httpGuardVouchedKey{}).(bool)
	return v
}

// keyValid reports whether cred is one of the keys, comparing each in
// constant time.
func (g *httpGuardKeys) keyValid(cred string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	ok := 0
	for _, k := range g.keys {
		ok |= subtle.ConstantTimeCompare([]byte(cred), k)
	}
	return ok == 1
}

// isDevKey reports whether cred is the first key (svc dev's dev key),
// compared in constant time.
func (g *httpGuardKeys) isDevKey(cred string) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.keys) > 0 && subtle.ConstantTimeCompare([]byte(cred), g.keys[0]) == 1
}

// devKey is the first key ("" when there is none).
func (g *httpGuardKeys) devKey() string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if len(g.keys) == 0 {
		return ""
	}
	return string(g.keys[0])
}

// rotateDevKey replaces the first key: from now on the old one is refused.
func (g *httpGuardKeys) rotateDevKey(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.keys[0] = []byte(key)
}

// preflight answers a CORS preflight: 204 with what the page asked for when
// its origin is allowed, else 403 without any Access-Control header.
func (g *httpGuard) preflight(w http.ResponseWriter, r *http.Request, allowed bool) {
	h := w.Header()
	h.Add("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	if !allowed {
		writeAPIError(w, http.StatusForbidden, apiError{Code: "origin_not_allowed",
			Message: fmt.Sprintf("origin %q is not allowed: pages on localhost or on this server are; add others to SVC_ALLOWED_ORIGINS", r.Header.Get("Origin"))})
		return
	}
	corsPreflight(w, r)
}

// paceBody installs the pacing reader on r's body and arms the
// connection's read deadline for it. A request without a body, or served
// where deadlines are not supported, is left as is.
func (g *httpGuard) paceBody(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody {
		return
	}
	b := &httpGuardBody{ReadCloser: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: g.bodyGrace, minRate: g.bodyMinRate}
	if b.rc.SetReadDeadline(b.due()) != nil {
		return
	}
	r.Body = b
}

// httpGuardBody is a request body that must keep arriving at minRate on
// average after grace. Each Read arms the connection's read deadline for
// the next byte. At EOF the deadline is cleared and never armed again:
// net/http then reads the connection in the background, and a timeout
// there would cancel the request's context (SSE streams, long polls).
// After a timeout the deadline stays, so net/http does not wait for the
// rest and closes the connection. A body the handler leaves unread is
// discarded by net/http under the deadline last armed, so handlers that
// answer for long read their body to the end first (readBody does). Not
// safe for concurrent Reads, like any body.
type httpGuardBody struct {
	io.ReadCloser
	rc      *http.ResponseController
	start   time.Time
	n       int64 // bytes read so far
	grace   time.Duration
	minRate int64
	done    bool // EOF or a timeout: the deadline is no longer moved
}

// due is when the next byte must have arrived.
func (b *httpGuardBody) due() time.Time {
	d := time.Duration(b.n/b.minRate)*time.Second + time.Duration(b.n%b.minRate)*time.Second/time.Duration(b.minRate)
	return b.start.Add(b.grace + d)
}

// Read reads from the body, moving the deadline with the bytes received.
func (b *httpGuardBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	b.rc.SetReadDeadline(b.due())
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	switch {
	case errors.Is(err, io.EOF):
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.done = true
		err = fmt.Errorf("%w: under %d bytes/s on average after %v: %w", errHTTPSlowBody, b.minRate, b.grace, err)
	}
	return n, err
}
