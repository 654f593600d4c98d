// Package ui holds the web dashboard's static files, embedded in the
// binary, and the handler that serves them under /ui/. It has no logic of
// its own: the pages call the JSON API (SPEC §6) from the browser, with
// the caller's token, so they show exactly what the API answers.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is the path the dashboard is served under.
const Prefix = "/ui/"

// csp forbids inline script and style and every other origin: the pages
// load only their own files and call only their own API.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the dashboard: the files under Prefix, and a redirect
// from Prefix without its slash. It answers GET and HEAD only; the
// caller mounts it on /ui and /ui/.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has it
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if r.URL.Path == Prefix[:len(Prefix)-1] {
			target := Prefix
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			http.Redirect(w, r, target, http.StatusMovedPermanently)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary, which has no build time to
		// offer as Last-Modified: revalidate every time.
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
