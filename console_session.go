package main

// The local console's sessions (issue 29). The link svc dev prints
// carries a one-time code in its fragment (/#code=…), which browsers never
// send to a server. The console's page trades it once (POST
// /api/console/session) for a session token it keeps in its origin's
// localStorage and sends as its bearer. No cookie is involved: browsers
// send cookies to every port of a host, so a server another account runs
// on 127.0.0.1:8000 would receive one, while localStorage belongs to one
// origin (scheme, host and port). A used code is dead, so a link seen in
// a browser's command line or history opens nothing. Sessions live as
// long as this svc dev.

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Names and limits of the console's sessions.
const (
	// consoleSessionPath is where a page trades a code for a token.
	consoleSessionPath = "/api/console/session"
	// consoleTokenPrefix starts every session token, so that the guard can
	// tell a token of an earlier svc dev (refused, for the page to drop)
	// from a chat credential of the developer's own.
	consoleTokenPrefix = "svcc_"
	// consolePrincipal is who a console session acts for on the chat
	// wires: one principal for the console's chats, whichever way the page
	// was admitted (the same placeholder its pages send without a token).
	consolePrincipal = "console"
	// consoleMaxCodes and consoleMaxTokens bound what is kept: the oldest
	// code or token is forgotten first.
	consoleMaxCodes  = 8
	consoleMaxTokens = 64
	// consoleTradeMaxBody bounds the body of a trade.
	consoleTradeMaxBody = 1 << 10
)

// consoleSessions holds the unused codes and the tokens of one svc dev.
// Codes and tokens are kept as their SHA-256, so a lookup's timing says
// nothing about a secret. Safe for concurrent use.
type consoleSessions struct {
	mu     sync.Mutex
	codes  []consoleSecret // oldest first
	tokens []consoleSecret // oldest first
}

// consoleSecret is the SHA-256 of a code or token.
type consoleSecret [sha256.Size]byte

// consoleHash is the stored form of s.
func consoleHash(s string) consoleSecret { return sha256.Sum256([]byte(s)) }

// mintCode returns a new one-time code for a console link.
func (c *consoleSessions) mintCode() string {
	code := randomID("", devTokenBytes)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.codes = consoleKeep(c.codes, consoleHash(code), consoleMaxCodes)
	return code
}

// pending reports whether code is still unused.
func (c *consoleSessions) pending(code string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return consoleFind(c.codes, consoleHash(code)) >= 0
}

// trade spends code and returns a new session token; false when the code
// was never minted or was already used.
func (c *consoleSessions) trade(code string) (string, bool) {
	if !c.spend(code) {
		return "", false
	}
	return c.newToken(), true
}

// spend forgets code and reports whether it was an unused one.
func (c *consoleSessions) spend(code string) bool {
	h := consoleHash(code)
	c.mu.Lock()
	defer c.mu.Unlock()
	i := consoleFind(c.codes, h)
	if code == "" || i < 0 {
		return false
	}
	c.codes = append(c.codes[:i], c.codes[i+1:]...)
	return true
}

// valid reports whether token is a session token of this svc dev.
func (c *consoleSessions) valid(token string) bool {
	if !strings.HasPrefix(token, consoleTokenPrefix) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return consoleFind(c.tokens, consoleHash(token)) >= 0
}

// consoleKeep appends h to list, dropping the oldest beyond max.
func consoleKeep(list []consoleSecret, h consoleSecret, max int) []consoleSecret {
	list = append(list, h)
	if len(list) > max {
		list = append(list[:0], list[len(list)-max:]...)
	}
	return list
}

// consoleFind is the position of h in list, or -1.
func consoleFind(list []consoleSecret, h consoleSecret) int {
	for i, x := range list {
		if x == h {
			return i
		}
	}
	return -1
}

// endAll forgets every code and token: the dev key was rotated (issue 36,
// item 1), and whatever was made from it ends. It returns how many
// sessions ended.
func (c *consoleSessions) endAll() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.tokens)
	c.codes, c.tokens = nil, nil
	return n
}

// newToken mints a session token and keeps it.
func (c *consoleSessions) newToken() string {
	token := randomID(consoleTokenPrefix, devTokenBytes)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens = consoleKeep(c.tokens, consoleHash(token), consoleMaxTokens)
	return token
}

// consoleTrade is the body of POST /api/console/session: a console link's
// code, or the dev key pasted on the sign-in page (which the page then
// forgets, keeping only the session: issue 36, item 6).
type consoleTrade struct {
	Code string `json:"code"`
	Key  string `json:"key,omitempty"`
}

// consoleTradeAllowed reports whether r may trade a link's code. A link
// opened from a terminal puts its code on the browser's command line,
// which every account reads in /proc (issue 36, item 1): from this machine
// (loopback, or one of its own addresses under --listen) only a socket of
// the developer's own account may trade one, where the kernel can say so.
// A browser on another machine (--listen) keeps the old rule: whoever
// holds the code. Servers that admit nobody by account (keys.owner nil)
// keep it too.
func consoleTradeAllowed(r *http.Request, keys *httpGuardKeys) bool {
	if keys.owner == nil || !httpPeerKnown() || !httpPeerFromThisHost(r) {
		return true
	}
	return httpGuardOwnerOnThisHost(r)
}

// serveTrade answers POST /api/console/session {"code": "…"} or {"key":
// "…"}: 200 with a session token; 401 when the code is not an unused one
// of this svc dev, the key not the dev key, or the code comes from
// another account of this machine (the code stays unused then).
func (c *consoleSessions) serveTrade(w http.ResponseWriter, r *http.Request, keys *httpGuardKeys) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeAPIError(w, http.StatusMethodNotAllowed, apiError{Code: "method_not_allowed", Message: "POST a console link's code here"})
		return
	}
	var in consoleTrade
	body, err := io.ReadAll(io.LimitReader(r.Body, consoleTradeMaxBody+1))
	if err == nil && len(body) > consoleTradeMaxBody {
		err = errBodyTooLarge
	}
	if err == nil {
		err = json.Unmarshal(body, &in)
	}
	if err != nil {
		writeAPIError(w, http.StatusBadRequest, apiError{Code: "invalid_json", Message: `send {"code": "<the code after #code= in the console link>"}`})
		return
	}
	var token string
	ok := false
	switch {
	case in.Key != "":
		if ok = keys.isDevKey(in.Key); ok {
			token = c.newToken()
		} else {
			writeAPIError(w, http.StatusUnauthorized, apiError{Code: "auth", Message: "this is not the project's dev key: `svc env` prints it as SVC_DEV_KEY (it changes with `svc rotate-key`)"})
			return
		}
	case !consoleTradeAllowed(r, keys):
		writeAPIError(w, http.StatusUnauthorized, apiError{Code: "console_link_owner",
			Message: "a console link is opened only by a browser of the account svc dev runs as on this machine; the code is left unused"})
		return
	default:
		token, ok = c.trade(in.Code)
	}
	if !ok {
		writeAPIError(w, http.StatusUnauthorized, apiError{Code: "console_link_used",
			Message: "this console link was already used or is not this svc dev's: each link opens one browser; open the newest link svc dev printed, or sign in with the dev key (.svc/" + devAPIKeyFile + ")"})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"schema_version": schemaVersion, "token": token})
}

// consoleStatic reports whether r fetches the console's page or one of its
// files: code that holds no data, which a browser must load before it can
// show that it may (a navigation carries no bearer).
func consoleStatic(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		(r.URL.Path == "/" || strings.HasPrefix(r.URL.Path, consoleAssetPrefix))
}

// consoleGuardRoutes are the routes the credential check answers itself,
// in front of the route table (http_guard.go admit): listed for the
// contract's readers (docs/http-api.md), never registered.
var consoleGuardRoutes = []route{
	{"POST", consoleSessionPath, `svc dev: trade a console link's one-time code ({"code":"…"}), or the dev key ({"key":"…"}), for a console session {"token":"svcc_…"}; a used or unknown code is 401 console_link_used, another account's browser on this machine 401 console_link_owner`, nil},
}
