// Package inspector is the daemon's web inspector: the static page at
// GET /ui (HTML, CSS and JavaScript written by hand in web/, embedded in
// the binary gzip-compressed from assets/, which a test keeps equal to
// web/), and the security headers it is served with. The page is a
// client of the public HTTP API like any other: it holds no state of the
// daemon's and knows nothing of agentbox but the API's wire format.
//
// The assets are public (they carry no secret and no session data); the
// page sends the API's bearer token in the Authorization header of each
// request, never in a URL and never in a cookie, so the browser never
// attaches a credential by itself and no other site can drive the API
// through it. Everything the API returns is put into the page as text,
// never parsed as HTML; the Content-Security-Policy makes that a rule the
// browser enforces (Trusted Types with no policy: every HTML sink throws).
// docs/ARCHITECTURE.md ("The inspector") has the whole design.
package inspector

import (
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/api"
)

// Path is where the page is served; its assets are under Path + "/".
const Path = "/ui"

// assets are the files of web/, each gzip-compressed as NAME.gz
// (TestAssetsUpToDate writes them with -update): a third of the bytes in
// the binary, and sent as they are to a browser, which takes gzip.
//
//go:embed assets/*.gz
var assets embed.FS

// ContentSecurityPolicy is the policy of every answer of the handler:
// only this origin's own script and style files (no inline script or
// style, no eval), fetch only to this origin, no plugins, frames, forms
// or base URL, never framed, and Trusted Types with no policy, so that a
// string can never reach an HTML or script sink (innerHTML,
// insertAdjacentHTML, document.write, a script's src or text).
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// asset is one embedded file as served.
type asset struct {
	body        []byte // decompressed, for a client that takes no gzip
	gz          []byte // as embedded
	contentType string
	etag        string // of body; the gzip form's ends in "-gz"
}

// handler serves the page and its assets.
type handler struct {
	files func() map[string]asset // by URL path, read on first use
}

// contentTypes are the only kinds of file the page is made of.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// Handler returns the handler of GET /ui and GET /ui/{asset}. It answers
// only the embedded files, at fixed paths (index.html at /ui and /ui/);
// anything else is a 404.
func Handler() http.Handler {
	return &handler{files: sync.OnceValue(readAssets)}
}

// readAssets reads the embedded files; a broken embed is a build mistake,
// caught by the tests.
func readAssets() map[string]asset {
	files := map[string]asset{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		gz, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		b, err := api.Gunzip(gz)
		if err != nil {
			return err
		}
		name := strings.TrimSuffix(strings.TrimPrefix(p, "assets/"), ".gz")
		ct, ok := contentTypes[path.Ext(name)]
		if !ok {
			panic("inspector: an asset of unknown type: " + p)
		}
		sum := sha256.Sum256(b)
		a := asset{body: b, gz: gz, contentType: ct, etag: base64.RawURLEncoding.EncodeToString(sum[:12])}
		if name == "index.html" {
			files[Path] = a
			files[Path+"/"] = a
		} else {
			files[Path+"/"+name] = a
		}
		return nil
	})
	if err != nil {
		panic("inspector: reading the embedded assets: " + err.Error())
	}
	return files
}

// setSecurityHeaders sets the headers every answer of the handler carries,
// the 404 too.
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
	// Revalidated on every load (the ETag makes that cheap), so a new
	// binary's page is never mixed with an old script.
	h.Set("Cache-Control", "no-cache")
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	setSecurityHeaders(hdr)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		hdr.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	a, ok := h.files()[r.URL.Path]
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	body, etag := a.body, `"`+a.etag+`"`
	hdr.Set("Vary", "Accept-Encoding")
	if api.AcceptsGzip(r.Header.Values("Accept-Encoding")) {
		body, etag = a.gz, `"`+a.etag+`-gz"`
		hdr.Set("Content-Encoding", "gzip")
	}
	hdr.Set("Content-Type", a.contentType)
	hdr.Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && inm == etag {
		hdr.Del("Content-Encoding")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	hdr.Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

// AssetsSize is the total size of the embedded (compressed) assets: what
// the page adds to the binary, besides this package's code.
func AssetsSize() (int64, error) {
	var n int64
	err := fs.WalkDir(assets, "assets", func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n += fi.Size()
		return nil
	})
	return n, err
}
