// Package console is jetway's web console: a small single-page app (plain
// HTML, CSS and JavaScript, embedded in the binary, no build step) that the
// dispatcher serves at "/". It holds no secrets and serves nothing but its
// own files: every page reads the dispatcher's HTTP API with the bearer token
// the person signs in with, so the console sees exactly what that token may
// see. The token lives in the tab's sessionStorage and travels only in the
// Authorization header, never in a URL.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console's files are served; "/" serves its page.
const Prefix = "/console/"

// ContentSecurityPolicy allows only the console's own files: no inline
// script or style, no other origin, no framing. A script injected through a
// session's text could neither run nor send the token anywhere.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// types are the content types of the files the console has; anything else
// is not served.
var types = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Handler serves the console: its page at "/" and its files under Prefix.
// Mount it for GET / and GET Prefix.
func Handler() http.Handler {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return &handler{files: sub}
}

type handler struct{ files fs.FS }

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := "index.html"
	if r.URL.Path != "/" {
		name = strings.TrimPrefix(path.Clean(r.URL.Path), Prefix)
	}
	ctype, ok := types[path.Ext(name)]
	b, err := fs.ReadFile(h.files, name)
	if !ok || err != nil || name == "index.html" && r.URL.Path != "/" {
		setHeaders(w.Header())
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	hd := w.Header()
	setHeaders(hd)
	hd.Set("Content-Type", ctype)
	// The page and its files change with the binary: revalidate each time
	// rather than run a stale script against a newer API.
	hd.Set("Cache-Control", "no-cache")
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(b) // the client went away: nothing to tell it
}

// setHeaders sets the security headers every console answer carries.
func setHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
}
