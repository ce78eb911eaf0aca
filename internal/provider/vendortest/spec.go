// Package vendortest is what the in-repo fakes of sandbox vendors' APIs
// (e2b, daytona, vercel) share: a handler that validates every request
// and every response against the vendor's vendored OpenAPI document, a
// real data plane (Box: a directory, loopback ports and processes on
// this machine) for the sandboxes they pretend to create, and the part
// of a fake every vendor has alike (Fake: its sandboxes, injected faults,
// what was sent into a sandbox, the box routes' common parts).
package vendortest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	yaml "go.yaml.in/yaml/v4"
)

// A gzipped body (Vercel's fs/write takes a gzipped tar) is checked as the
// binary string its document declares, as application/octet-stream is.
func init() {
	openapi3filter.RegisterBodyDecoder("application/gzip", openapi3filter.FileBodyDecoder)
}

// Spec is a vendor's OpenAPI document, loaded for validation.
type Spec struct {
	doc    *openapi3.T
	router routers.Router
	// errorSchema validates the body of an injected fault (a status the
	// document may not list for that operation, e.g. a rate limiter's
	// 429 in front of every operation).
	errorSchema *openapi3.SchemaRef
}

// LoadSpec loads the OpenAPI 3 (YAML or JSON) or Swagger 2 document at
// path; errorSchema names the components schema of the vendor's error
// body. Its servers are dropped so that routes match any host.
func LoadSpec(t testing.TB, path, errorSchema string) *Spec {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) { // YAML: the loaders below take JSON
		var v any
		if err := yaml.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if b, err = json.Marshal(v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var probe struct {
		Swagger string `json:"swagger"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var doc *openapi3.T
	if probe.Swagger != "" {
		var d2 openapi2.T
		if err := json.Unmarshal(b, &d2); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc, err = openapi2conv.ToV3(&d2); err != nil {
			t.Fatalf("%s: to OpenAPI 3: %v", path, err)
		}
	} else {
		loader := openapi3.NewLoader()
		if doc, err = loader.LoadFromData(b); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	doc.Servers = nil
	r, err := legacy.NewRouter(doc, openapi3.DisableExamplesValidation())
	if err != nil {
		t.Fatalf("%s: router: %v", path, err)
	}
	s := &Spec{doc: doc, router: r}
	if errorSchema != "" {
		ref, ok := doc.Components.Schemas[errorSchema]
		if !ok {
			t.Fatalf("%s: no schema %q", path, errorSchema)
		}
		s.errorSchema = ref
	}
	return s
}

// faultKey marks, in a request's context, that the handler answered with
// an injected fault.
type faultKey struct{}

// MarkFault records that the handler answers r with an injected fault:
// its status is not checked against the operation's, its body is checked
// against the error schema.
func MarkFault(r *http.Request) {
	if p, ok := r.Context().Value(faultKey{}).(*bool); ok {
		*p = true
	}
}

// Handler validates every request against the document before h sees
// it, and every answer of h before the client does. A request the
// document does not allow fails t and is answered 400 (404 for an
// unknown route); an answer the document does not allow fails t.
// Requests whose path starts with one of passthrough are not in the
// document (e.g. Connect-RPC services) and go to h unchecked.
func (s *Spec) Handler(t testing.TB, h http.Handler, passthrough ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, p := range passthrough {
			if strings.HasPrefix(r.URL.Path, p) {
				h.ServeHTTP(w, r)
				return
			}
		}
		route, params, err := s.router.FindRoute(r)
		if err != nil {
			t.Errorf("fake API: %s %s: no such operation in the document: %v", r.Method, r.URL.Path, err)
			http.Error(w, "no such operation", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		in := &openapi3filter.RequestValidationInput{
			Request:    r,
			PathParams: params,
			Route:      route,
			Options: &openapi3filter.Options{
				AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, // the fake checks credentials itself
				MultiError:         true,
			},
		}
		if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
			t.Errorf("fake API: %s %s: a request the document does not allow: %v", r.Method, r.URL.Path, err)
			http.Error(w, "invalid request: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		faulted := new(bool)
		r = r.WithContext(context.WithValue(r.Context(), faultKey{}, faulted))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		res := rec.Result()
		out := rec.Body.Bytes()
		if *faulted {
			s.checkFault(t, r, res.StatusCode, out)
		} else {
			err := openapi3filter.ValidateResponse(r.Context(), &openapi3filter.ResponseValidationInput{
				RequestValidationInput: in,
				Status:                 res.StatusCode,
				Header:                 res.Header,
				Body:                   io.NopCloser(bytes.NewReader(out)),
				Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
			})
			if err != nil {
				t.Errorf("fake API: %s %s: an answer the document does not allow (%d %s): %v", r.Method, r.URL.Path, res.StatusCode, out, err)
			}
		}
		for k, v := range res.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(res.StatusCode)
		_, _ = w.Write(out)
	})
}

// checkFault validates an injected fault's body against the error schema.
func (s *Spec) checkFault(t testing.TB, r *http.Request, status int, body []byte) {
	if s.errorSchema == nil {
		return
	}
	var v any
	err := json.Unmarshal(body, &v)
	if err == nil {
		err = s.errorSchema.Value.VisitJSON(v)
	}
	if err != nil {
		t.Errorf("fake API: %s %s: a fault answer (%d) that is not the document's error: %v", r.Method, r.URL.Path, status, err)
	}
}
