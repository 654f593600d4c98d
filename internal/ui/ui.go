// Package ui holds the web dashboard's static files, embedded in the
// binary, and the handler that serves them under /ui/. It has no logic of
// its own: the pages call the JSON API (SPEC §6) from the browser, with
// the caller's token, so they show exactly what the API answers.
//
// A leaf. The handler serves embedded, read-only files and is safe for
// concurrent use.
package ui

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// static holds what is served as it is (scripts, style, icon); pages the
// HTML pages, each rendered once into pages/layout.html, the frame they
// share (see there). Rendering is Go's html/template at start: no build
// step, and what is served is still what the repository holds.
//
//go:embed static
var static embed.FS

//go:embed pages
var pages embed.FS

// render returns every page of pages/ rendered into the layout, by file
// name.
func render() (map[string][]byte, error) {
	names, err := fs.Glob(pages, "pages/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, name := range names {
		if path.Base(name) == "layout.html" {
			continue
		}
		t, err := template.ParseFS(pages, "pages/layout.html", name)
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := t.ExecuteTemplate(&b, "layout.html", nil); err != nil {
			return nil, err
		}
		out[path.Base(name)] = b.Bytes()
	}
	return out, nil
}

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
	rendered, err := render()
	if err != nil {
		panic(err) // the embedded templates parse (TestHandler)
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
		name := strings.TrimPrefix(r.URL.Path, Prefix)
		if name == "" {
			name = "index.html"
		}
		if page, ok := rendered[name]; ok {
			http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(page))
			return
		}
		files.ServeHTTP(w, r)
	})
}
