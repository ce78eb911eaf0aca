package httpapi

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"

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
}
