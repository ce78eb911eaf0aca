package vercel_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/provider/vendortest"
)

// TestDocumentRefuses: the derived document is as strict as the SDK it
// comes from: what the SDK never sends, or bounds, fails the fake; what
// the client sends passes.
func TestDocumentRefuses(t *testing.T) {
	spec := vendortest.LoadSpec(t, "testdata/openapi.yaml", "Error")
	const created = `{"sandbox":{"name":"s","persistent":false,"createdAt":1,"updatedAt":1,"currentSessionId":"x","status":"pending"},` +
		`"session":{"id":"x","memory":4096,"vcpus":2,"region":"iad1","timeout":1,"status":"pending","requestedAt":1,"createdAt":1,"cwd":"/vercel/sandbox","updatedAt":1},"routes":[]}`
	for _, tc := range []struct {
		name, method, path, ctype, body, answer string
		header                                  map[string]string
		fail                                    string
	}{
		{"create", "POST", "/v3/sandboxes?teamId=t", "application/json", `{"projectId":"p","ports":[49999],"timeout":60000,"persistent":false,"tags":{"a":"b"}}`, created, nil, ""},
		{"create without a project", "POST", "/v3/sandboxes", "application/json", `{"ports":[1]}`, created, nil, "a request the document does not allow"},
		{"create with six tags", "POST", "/v3/sandboxes", "application/json", `{"projectId":"p","tags":{"a":"","b":"","c":"","d":"","e":"","f":""}}`, created, nil, "a request the document does not allow"},
		{"create with an unknown key", "POST", "/v3/sandboxes", "application/json", `{"projectId":"p","memory":4096}`, created, nil, "a request the document does not allow"},
		{"create with no vcpus", "POST", "/v3/sandboxes", "application/json", `{"projectId":"p","resources":{"vcpus":0}}`, created, nil, "a request the document does not allow"},
		{"an answer without its session", "POST", "/v3/sandboxes", "application/json", `{"projectId":"p"}`, `{"sandbox":{},"routes":[]}`, nil, "an answer the document does not allow"},
		{"an unknown session status", "GET", "/v2/sandboxes/sessions/x", "", "", strings.Replace(created, `"status":"pending","requestedAt"`, `"status":"booting","requestedAt"`, 1), nil, "an answer the document does not allow"},
		{"write", "POST", "/v2/sandboxes/sessions/x/fs/write", "application/gzip", "\x1f\x8b", `{}`, map[string]string{"X-Cwd": "/vercel/sandbox"}, ""},
		{"write without x-cwd", "POST", "/v2/sandboxes/sessions/x/fs/write", "application/gzip", "\x1f\x8b", `{}`, nil, "a request the document does not allow"},
		{"write with a relative x-cwd", "POST", "/v2/sandboxes/sessions/x/fs/write", "application/gzip", "\x1f\x8b", `{}`, map[string]string{"X-Cwd": "sandbox"}, "a request the document does not allow"},
		{"command without args", "POST", "/v2/sandboxes/sessions/x/cmd", "application/json", `{"command":"sh"}`, `{}`, nil, "a request the document does not allow"},
		{"list without a project", "GET", "/v2/sandboxes?limit=1", "", "", `{"sandboxes":[],"pagination":{"count":0,"next":null}}`, nil, "a request the document does not allow"},
		{"list by a tag without a value", "GET", "/v2/sandboxes?project=p&tags=owner", "", "", `{"sandboxes":[],"pagination":{"count":0,"next":null}}`, nil, "a request the document does not allow"},
		{"get without a project", "GET", "/v2/sandboxes/s", "", "", created, nil, "a request the document does not allow"},
		{"delete", "DELETE", "/v2/sandboxes/s?projectId=p", "", "", `{"sandbox":{"name":"s","persistent":false,"createdAt":1,"updatedAt":1,"currentSessionId":"x","status":"stopped"}}`, nil, ""},
		{"an error without its message", "DELETE", "/v2/sandboxes/s?projectId=p", "", "", `{"error":{"code":"not_found"}}`, nil, "an answer the document does not allow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &vendortest.Recorder{TB: t}
			status := http.StatusOK
			if strings.HasPrefix(tc.answer, `{"error"`) {
				status = http.StatusNotFound
			}
			h := spec.Handler(rec, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = w.Write([]byte(tc.answer))
			}))
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			req.Header.Set("Authorization", "Bearer t")
			h.ServeHTTP(httptest.NewRecorder(), req)
			got := rec.Reports()
			if tc.fail == "" && got != "" {
				t.Errorf("reported: %s", got)
			}
			if tc.fail != "" && !strings.Contains(got, tc.fail) {
				t.Errorf("reported %q, want %q", got, tc.fail)
			}
		})
	}
}
