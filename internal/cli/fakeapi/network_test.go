package fakeapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/cli/fakeapi"
)

// TestSecretValueNeverReturned reads every answer of the secret endpoints
// raw, successes and failures alike, and none may hold a value.
func TestSecretValueNeverReturned(t *testing.T) {
	t.Parallel()
	srv := fakeapi.New(t, fakeapi.Config{})
	const value = "v4lue-that-must-not-leak"
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), value) || strings.Contains(string(b), "v4lue") {
			t.Errorf("%s %s answered %d with the value: %s", method, path, resp.StatusCode, b)
		}
		return resp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		method, path, body string
		status             int
	}{
		{"PUT", "/v1/secrets/gh", `{"value":"` + value + `","host":"api.github.com","header":"Authorization","format":"Bearer {value}"}`, 200},
		{"PUT", "/v1/secrets/gh2", `{"value":"` + value + `","host":"api.github.com","header":"X-Key"}`, 200},
		{"GET", "/v1/secrets", "", 200},
		// Invalid: other fields, a value with a line break, a bad name.
		{"PUT", "/v1/secrets/bad", `{"value":"` + value + `","host":"h:1","header":"Bad Header"}`, 422},
		{"PUT", "/v1/secrets/bad", `{"value":"` + value + `\n","host":"h.example","header":"X"}`, 422},
		{"PUT", "/v1/secrets/-bad", `{"value":"` + value + `","host":"h.example","header":"X"}`, 422},
		{"PUT", "/v1/secrets/gh", `{"value":"` + value + `"`, 422},
		{"DELETE", "/v1/secrets/gh2", "", 204},
		{"DELETE", "/v1/secrets/gh2", "", 404},
		{"GET", "/v1/secrets", "", 200},
	} {
		if status, body := do(tt.method, tt.path, tt.body); status != tt.status {
			t.Errorf("%s %s: %d %s, want %d", tt.method, tt.path, status, body, tt.status)
		}
	}
	if v, ok := srv.SecretValue("gh"); !ok || v != value {
		t.Errorf("stored value %q, %v", v, ok)
	}
	if _, ok := srv.SecretValue("bad"); ok {
		t.Error("an invalid secret was stored")
	}

	// Through the SDK as well.
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Secrets(t.Context())
	if err != nil || len(list) != 1 || list[0] != (client.SecretInfo{
		Name: "gh", Host: "api.github.com", Header: "Authorization", Format: "Bearer {value}", Source: "api", Placeholder: "agentbox-placeholder-gh",
	}) {
		t.Errorf("list %+v, %v", list, err)
	}
}

// TestNetworkSemantics checks the fake's network endpoints against the
// API's contract.
func TestNetworkSemantics(t *testing.T) {
	t.Parallel()
	srv := fakeapi.New(t, fakeapi.Config{GlobalAllow: []string{"*.example.com", "api.github.com:443"}})
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	plain := srv.AddSession()
	if _, err := c.Network(ctx, plain); !client.HasProblemType(err, client.ProblemNoSandbox) {
		t.Errorf("unsandboxed GET: %v", err)
	}
	if _, err := c.SetNetwork(ctx, plain, nil); !client.HasProblemType(err, client.ProblemNoSandbox) {
		t.Errorf("unsandboxed PUT: %v", err)
	}
	if _, err := c.Network(ctx, "ses_nope"); !client.IsNotFound(err) {
		t.Errorf("unknown session: %v", err)
	}
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Policy: []byte(`"agent-default"`)})
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Network(ctx, s.ID)
	if err != nil || n.Mode != "proxy" || n.Default != "deny" || n.Allow == nil || len(n.Allow) != 0 || !n.Live {
		t.Fatalf("new sandboxed session: %+v, %v", n, err)
	}
	n, err = c.SetNetwork(ctx, s.ID, []string{"a.example.com:443", "*.b.example.com", "api.github.com:443"})
	if err != nil || len(n.Allow) != 3 {
		t.Fatalf("set: %+v, %v", n, err)
	}
	for _, bad := range [][]string{{"example.com"}, {"api.github.com:80"}, {"*"}, {""}} {
		if _, err := c.SetNetwork(ctx, s.ID, bad); !client.HasProblemType(err, client.ProblemPolicy) {
			t.Errorf("%q: %v, want a policy problem", bad, err)
		}
	}
	if err := c.DeleteSession(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	n, err = c.SetNetwork(ctx, s.ID, nil)
	if err != nil || len(n.Allow) != 0 || n.Live {
		t.Errorf("ended session: %+v, %v", n, err)
	}
}
