package inspector

import (
	"bytes"
	"os"

	"github.com/agentbox/agentbox/api"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// maxAssets is the budget for what the inspector adds to the
// binary: 400 KiB. The assets are embedded gzip-compressed, and their
// sum is what they add; the package's code is a few KiB more
// (measured with scripts/build: docs/ARCHITECTURE.md, "The inspector").
const maxAssets = 400 << 10

func TestAssetBudget(t *testing.T) {
	n, err := AssetsSize()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("embedded assets: %d bytes (budget %d)", n, maxAssets)
	if n == 0 {
		t.Fatal("no assets embedded")
	}
	if n > maxAssets {
		t.Fatalf("the inspector's assets are %d bytes, above the %d-byte budget", n, maxAssets)
	}
}

func TestServe(t *testing.T) {
	h := Handler()
	tests := []struct {
		method, path string
		status       int
		ctype        string
		contains     string
	}{
		{"GET", "/ui", 200, "text/html; charset=utf-8", `<script src="/ui/app.js"`},
		{"GET", "/ui/", 200, "text/html; charset=utf-8", `<link rel="stylesheet" href="/ui/app.css">`},
		{"GET", "/ui/app.js", 200, "text/javascript; charset=utf-8", "'use strict';"},
		{"GET", "/ui/app.css", 200, "text/css; charset=utf-8", ":root"},
		{"HEAD", "/ui/app.js", 200, "text/javascript; charset=utf-8", ""},
		{"GET", "/ui/index.html", 404, "text/plain; charset=utf-8", "not found"},
		{"GET", "/ui/nothere.js", 404, "text/plain; charset=utf-8", "not found"},
		{"GET", "/ui/assets/app.js", 404, "text/plain; charset=utf-8", "not found"},
		{"POST", "/ui", 405, "text/plain; charset=utf-8", "method not allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d", rec.Code, tc.status)
			}
			hdr := rec.Header()
			if got := hdr.Get("Content-Type"); got != tc.ctype {
				t.Errorf("Content-Type %q, want %q", got, tc.ctype)
			}
			if !strings.Contains(rec.Body.String(), tc.contains) {
				t.Errorf("body does not contain %q", tc.contains)
			}
			if tc.method == "HEAD" && rec.Body.Len() != 0 {
				t.Errorf("HEAD sent a body")
			}
			// Every answer, errors included, carries the headers.
			for k, want := range map[string]string{
				"Content-Security-Policy": ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"X-Frame-Options":         "DENY",
				"Referrer-Policy":         "no-referrer",
			} {
				if got := hdr.Get(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestNotModified(t *testing.T) {
	h := Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/app.js", nil))
	etag := rec.Header().Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	req := httptest.NewRequest("GET", "/ui/app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified || rec.Body.Len() != 0 {
		t.Fatalf("status %d with %d bytes, want 304 and none", rec.Code, rec.Body.Len())
	}
}

// TestServeGzip: a browser that takes gzip gets the embedded bytes as
// they are, with their own ETag, and they say what the identity answer
// says; Vary tells caches the two apart.
func TestServeGzip(t *testing.T) {
	h := Handler()
	plain := httptest.NewRecorder()
	h.ServeHTTP(plain, httptest.NewRequest("GET", "/ui/app.js", nil))
	req := httptest.NewRequest("GET", "/ui/app.js", nil)
	req.Header.Set("Accept-Encoding", "br, gzip;q=0.8")
	gz := httptest.NewRecorder()
	h.ServeHTTP(gz, req)
	if gz.Code != 200 || gz.Header().Get("Content-Encoding") != "gzip" || gz.Header().Get("Vary") != "Accept-Encoding" {
		t.Fatalf("gzip answer: %d %v", gz.Code, gz.Header())
	}
	if plain.Header().Get("Content-Encoding") != "" || plain.Header().Get("ETag") == gz.Header().Get("ETag") {
		t.Fatalf("identity answer %v, gzip ETag %q", plain.Header(), gz.Header().Get("ETag"))
	}
	body, err := api.Gunzip(gz.Body.Bytes())
	if err != nil || !bytes.Equal(body, plain.Body.Bytes()) || gz.Body.Len() >= plain.Body.Len() {
		t.Fatalf("gzip body (%d bytes, err %v) does not hold the %d-byte identity body", gz.Body.Len(), err, plain.Body.Len())
	}
	req.Header.Set("If-None-Match", gz.Header().Get("ETag"))
	nm := httptest.NewRecorder()
	h.ServeHTTP(nm, req)
	if nm.Code != http.StatusNotModified || nm.Body.Len() != 0 {
		t.Fatalf("revalidated gzip answer: %d with %d bytes, want 304", nm.Code, nm.Body.Len())
	}
}

// TestPolicy checks the Content-Security-Policy directive by directive:
// what each one closes is named in ContentSecurityPolicy's comment.
func TestPolicy(t *testing.T) {
	got := map[string]string{}
	for _, d := range strings.Split(ContentSecurityPolicy, ";") {
		name, val, _ := strings.Cut(strings.TrimSpace(d), " ")
		got[name] = val
	}
	want := map[string]string{
		"default-src":               "'none'",
		"script-src":                "'self'",
		"style-src":                 "'self'",
		"connect-src":               "'self'",
		"base-uri":                  "'none'",
		"form-action":               "'none'",
		"frame-ancestors":           "'none'",
		"require-trusted-types-for": "'script'",
		"trusted-types":             "'none'",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if strings.Contains(v, "unsafe") || strings.Contains(v, "*") || strings.Contains(v, "data:") {
			t.Errorf("%s %s: loosens the policy", k, v)
		}
	}
}

// TestNoInlineCode checks the page against what the policy would block
// anyway, so that a mistake shows here rather than as a blank page: no
// inline script or style, no event-handler attributes, no HTML sinks in
// the script (the Trusted Types policy makes them throw).
func TestNoInlineCode(t *testing.T) {
	html, err := os.ReadFile("web/index.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`).FindAllSubmatch(html, -1) {
		if !strings.Contains(string(m[1]), ` src="/ui/`) || len(m[2]) != 0 {
			t.Errorf("index.html: an inline script: %s", m[0])
		}
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)<style`),
		regexp.MustCompile(`(?i)\son[a-z]+\s*=`),
		regexp.MustCompile(`(?i)\sstyle\s*=`),
		regexp.MustCompile(`(?i)javascript:`),
	} {
		for _, m := range re.FindAll(html, -1) {
			t.Errorf("index.html: %s", m)
		}
	}
	web := os.DirFS("web")
	err = fs.WalkDir(web, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(p, ".js") {
			return err
		}
		b, err := fs.ReadFile(web, p)
		if err != nil {
			return err
		}
		for _, sink := range []string{".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "createContextualFragment", "DOMParser"} {
			if strings.Contains(string(b), sink) {
				t.Errorf("%s uses %s: put text into the page with el() and text nodes", p, sink)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
