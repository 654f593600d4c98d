package ui

import (
	"io/fs"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	for _, tc := range []struct {
		name, method, path string
		code               int
		location, ctype    string
		body               string
	}{
		{"index", "GET", "/ui/", 200, "", "text/html", "<title>cairn · services</title>"},
		{"service page", "GET", "/ui/service.html", 200, "", "text/html", `<table id="endpoints">`},
		{"events page", "GET", "/ui/events.html", 200, "", "text/html", `<table id="events">`},
		{"cluster page", "GET", "/ui/cluster.html", 200, "", "text/html", `<table id="members">`},
		{"script", "GET", "/ui/app.js", 200, "", "text/javascript", "const cairn"},
		{"style", "GET", "/ui/app.css", 200, "", "text/css", ":root"},
		{"head", "HEAD", "/ui/", 200, "", "text/html", ""},
		{"no slash redirects", "GET", "/ui", 301, "/ui/", "", ""},
		{"redirect keeps the query", "GET", "/ui?ns=shop", 301, "/ui/?ns=shop", "", ""},
		{"missing file", "GET", "/ui/nope.js", 404, "", "", ""},
		{"post refused", "POST", "/ui/", 405, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(tc.method, tc.path, nil))
			if w.Code != tc.code {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, w.Code, tc.code)
			}
			if got := w.Header().Get("Location"); got != tc.location {
				t.Errorf("Location %q, want %q", got, tc.location)
			}
			if tc.code != 200 {
				return
			}
			if got := w.Header().Get("Content-Type"); !strings.HasPrefix(got, tc.ctype) {
				t.Errorf("Content-Type %q, want %s", got, tc.ctype)
			}
			if got := w.Header().Get("Content-Security-Policy"); !strings.HasPrefix(got, "default-src 'self'; script-src 'self';") {
				t.Errorf("Content-Security-Policy %q", got)
			}
			if !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("body lacks %q", tc.body)
			}
		})
	}
}

// TestNoInlineCode: the CSP forbids inline script and style, so a page
// that had any would break in the browser; and every file a page loads is
// embedded and local (no other origin).
func TestNoInlineCode(t *testing.T) {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := render()
	if err != nil || len(rendered) < 2 {
		t.Fatalf("pages %v, %v", rendered, err)
	}
	inlineScript := regexp.MustCompile(`<script(\s[^>]*)?>\s*[^<\s]`)
	handlerAttr := regexp.MustCompile(`\son[a-z]+\s*=|\sstyle\s*=|javascript:`)
	ref := regexp.MustCompile(`(?:src|href)="([^"]*)"`)
	for p, b := range rendered {
		s := string(b)
		if m := inlineScript.FindString(s); m != "" {
			t.Errorf("%s: inline script %q", p, m)
		}
		if strings.Contains(s, "<style") {
			t.Errorf("%s: inline <style>", p)
		}
		if m := handlerAttr.FindString(s); m != "" {
			t.Errorf("%s: inline handler or style %q", p, m)
		}
		for _, m := range ref.FindAllStringSubmatch(s, -1) {
			target := strings.SplitN(m[1], "?", 2)[0]
			if target == "./" {
				continue
			}
			if strings.Contains(target, ":") || strings.HasPrefix(target, "/") {
				t.Errorf("%s: %q is not a file of the dashboard", p, m[1])
				continue
			}
			if _, ok := rendered[target]; ok {
				continue
			}
			if _, err := fs.Stat(sub, target); err != nil {
				t.Errorf("%s loads %q: %v", p, m[1], err)
			}
		}
	}
}
