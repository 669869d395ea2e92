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

// consoleAPIBaseMark is the placeholder in index.html replaced by the API
// base the pages call.
const consoleAPIBaseMark = "{{API_BASE}}"

// consoleAsset is one embedded file, ready to serve.
type consoleAsset struct {
	body        []byte
	contentType string
	etag        string
}

// consoleHandler serves the web console: index.html at "/" and its files
// under /console/. apiBase is the URL prefix of the runtime API the pages
// call ("" = the server serving them; the box and the control plane may
// pass another origin or path). Files are revalidated by ETag on each
// load, so a rebuilt binary is picked up without a stale cache.
func consoleHandler(apiBase string) http.HandlerFunc {
	assets := map[string]consoleAsset{}
	err := fs.WalkDir(consoleFiles, "console", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := consoleFiles.ReadFile(p)
		if err != nil {
			return err
		}
		if p == "console/index.html" {
			b = bytes.ReplaceAll(b, []byte(consoleAPIBaseMark), []byte(html.EscapeString(apiBase)))
		}
		sum := sha256.Sum256(b)
		assets["/"+p] = consoleAsset{body: b, contentType: mime.TypeByExtension(path.Ext(p)), etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("console: embedded files unreadable: " + err.Error()) // the build embeds them: cannot happen
	}
	csp := consoleCSP(apiBase)
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path
		if name == "/" {
			name = consoleAssetPrefix + "index.html"
		}
		a, ok := assets[name]
		if !ok || !strings.HasPrefix(name, consoleAssetPrefix) {
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
