package httpapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/golden"
)

var specFile = filepath.Join("..", "..", "api", "openapi.json")

// TestOpenAPIUpToDate keeps the committed contract equal to what the code
// serves. Run `go test ./internal/httpapi -run TestOpenAPIUpToDate -update`
// after changing the API, and review the diff.
func TestOpenAPIUpToDate(t *testing.T) {
	got := specDocument()
	if golden.Update() {
		if err := os.WriteFile(specFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(specFile+".gz", gzipDocument(t, got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(specFile)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("api/openapi.json is stale; run go test ./internal/httpapi -run TestOpenAPIUpToDate -update\n(-committed +code):\n%s",
			cmp.Diff(string(want), string(got)))
	}
	// What the binary embeds: the same document, compressed. Compared
	// decompressed, so a Go release that compresses differently does not
	// make the committed file stale.
	gz, err := os.ReadFile(specFile + ".gz")
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if doc, err := api.Gunzip(gz); err != nil || !bytes.Equal(doc, want) {
		t.Fatalf("api/openapi.json.gz is not api/openapi.json compressed (%v); run go test ./internal/httpapi -run TestOpenAPIUpToDate -update", err)
	}
	if !bytes.Equal(api.OpenAPI(), want) {
		t.Fatal("the embedded document is not api/openapi.json")
	}
}

// gzipDocument compresses doc as api/openapi.json.gz holds it: the best
// compression, and no name or time in the header, so the file changes only
// with the document.
func gzipDocument(t *testing.T, doc []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(doc); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestOpenAPIStable(t *testing.T) {
	if a, b := specDocument(), specDocument(); !bytes.Equal(a, b) {
		t.Fatal("two builds of the spec differ")
	}
}

func TestOpenAPIValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(specDocument())
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi = %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/v1/health", "/v1/agents", "/v1/sessions", "/v1/sessions/{id}", "/v1/sessions/{id}/messages",
		"/v1/sessions/{id}/interrupt", "/v1/sessions/{id}/permissions/{pid}", "/v1/sessions/{id}/questions/{qid}",
		"/v1/sessions/{id}/requests", "/v1/sessions/{id}/events", "/v1/sessions/{id}/events/stream",
		"/openapi.json", "/metrics",
	} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("path %s is not documented", p)
		}
	}
	stream := doc.Paths.Find("/v1/sessions/{id}/events/stream").Get
	if stream.Responses.Status(200).Value.Content.Get("text/event-stream") == nil {
		t.Error("the stream is not documented as text/event-stream")
	}
	if h := doc.Paths.Find("/v1/health").Get; h.Security == nil || len(*h.Security) != 0 {
		t.Error("health should need no auth in the spec")
	}
}

func TestOpenAPIServed(t *testing.T) {
	h := newHarness(t, Config{})
	r := h.do("GET", "/openapi.json", "")
	r.ok(t, 200, nil)
	if !bytes.Equal(r.body, specDocument()) {
		t.Fatal("GET /openapi.json differs from specDocument()")
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/openapi+json" {
		t.Fatalf("Content-Type = %q", ct)
	}
	// Set by hand, Accept-Encoding turns off the client's transparent
	// decompression: what the daemon sends is seen as it is.
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{
		{"identity", false},
		{"gzip", true},
		{"br, gzip;q=0.5", true},
		{"gzip;q=0", false},
		{"GZIP ; Q=1.0", true},
		{"x-gzip", true},
		{"*", false},
	} {
		r := h.do("GET", "/openapi.json", "", "Accept-Encoding", tc.accept)
		r.ok(t, 200, nil)
		body := r.body
		if got := r.Header.Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Errorf("Accept-Encoding %q: gzip %v, want %v", tc.accept, got, tc.gzip)
		}
		if tc.gzip {
			var err error
			if body, err = api.Gunzip(body); err != nil {
				t.Fatalf("Accept-Encoding %q: %v", tc.accept, err)
			}
		}
		if !bytes.Equal(body, specDocument()) {
			t.Errorf("Accept-Encoding %q: the document differs from specDocument()", tc.accept)
		}
		if v := r.Header.Get("Vary"); v != "Accept-Encoding" {
			t.Errorf("Accept-Encoding %q: Vary %q", tc.accept, v)
		}
	}
}
