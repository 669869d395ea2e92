package main

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
)

// consoleFiles is the web console (DESIGN §10): plain HTML, CSS and
// JavaScript modules, no bundler, no framework, no CDN.
//
//go:embed console
var consoleFiles embed.FS

// consoleAssetPrefix is the URL prefix of the console's files; index.html
// is served at "/" and refers to them relatively.
const consoleAssetPrefix = "/console/"

// Placeholders in index.html, replaced (HTML-escaped) when it is served.
const (
	// consoleAPIBaseMark is the API base the pages call.
	consoleAPIBaseMark = "{{API_BASE}}"
	// consoleTokenURLMark is where the pages get an identity token for
	// the API ("" = they need none): the control plane's deeplink.
	consoleTokenURLMark = "{{TOKEN_URL}}"
	// consoleSignInMark is where the token URL's 401 sends the browser.
	consoleSignInMark = "{{SIGN_IN_URL}}"
)

// consoleAsset is one embedded file, ready to serve.
type consoleAsset struct {
	body        []byte
	contentType string
	etag        string
}

// newConsoleAsset is body served as contentType, its ETag a hash of body.
func newConsoleAsset(body []byte, contentType string) consoleAsset {
	sum := sha256.Sum256(body)
	return consoleAsset{body: body, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

// consoleAssets is the embedded files by URL path (/console/...), read
// once; index.html is there with its placeholders (consoleIndex fills
// them).
var consoleAssets = sync.OnceValue(func() map[string]consoleAsset {
	assets := map[string]consoleAsset{}
	err := fs.WalkDir(consoleFiles, "console", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := consoleFiles.ReadFile(p)
		if err == nil {
			assets["/"+p] = newConsoleAsset(b, mime.TypeByExtension(path.Ext(p)))
		}
		return err
	})
	if err != nil {
		panic("console: embedded files unreadable: " + err.Error()) // the build embeds them: cannot happen
	}
	return assets
})

// consoleIndex is index.html with the API base the pages call and, for
// the control plane's deeplink, the token and sign-in URLs (else "").
func consoleIndex(apiBase, tokenURL, signInURL string) consoleAsset {
	raw := consoleAssets()[consoleAssetPrefix+"index.html"]
	r := strings.NewReplacer(consoleAPIBaseMark, html.EscapeString(apiBase), consoleTokenURLMark, html.EscapeString(tokenURL),
		consoleSignInMark, html.EscapeString(signInURL))
	return newConsoleAsset([]byte(r.Replace(string(raw.body))), raw.contentType)
}

// consoleHandler serves the web console: index.html at "/" and its files
// under /console/. apiBase is the URL prefix of the runtime API the pages
// call ("" = the server serving them; the box and the control plane may
// pass another origin or path). Files are revalidated by ETag on each
// load, so a rebuilt binary is picked up without a stale cache.
func consoleHandler(apiBase string) http.HandlerFunc {
	index, csp := consoleIndex(apiBase, "", ""), consoleCSP(apiBase)
	return func(w http.ResponseWriter, r *http.Request) { consoleServe(w, r, r.URL.Path, index, csp) }
}

// consoleServe serves the console's file at URL path name: index at "/"
// or /console/index.html, an embedded file under /console/, else 404;
// csp is the page's policy (consoleCSP).
func consoleServe(w http.ResponseWriter, r *http.Request, name string, index consoleAsset, csp string) {
	a, ok := index, name == "/" || name == consoleAssetPrefix+"index.html"
	if !ok && strings.HasPrefix(name, consoleAssetPrefix) {
		a, ok = consoleAssets()[name]
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("ETag", a.etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Security-Policy", csp)
	h.Set("Referrer-Policy", "no-referrer")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// consoleCSP is the console's Content-Security-Policy: its own files only,
// no inline script or style, API calls to this server and to apiBase's
// origin when it names one.
func consoleCSP(apiBase string) string {
	connect := "'self'"
	if u, err := url.Parse(apiBase); err == nil && u.Scheme != "" && u.Host != "" {
		connect += " " + u.Scheme + "://" + u.Host
	}
	return "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src " + connect +
		"; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
}
