package fakellm_test

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/fakellm"
)

// TestRequireCredentials checks Options.Credentials: a model call is
// answered only with one of the listed credentials in its own header (and
// the headers it requires), and with no other credential beside it.
func TestRequireCredentials(t *testing.T) {
	const (
		key   = "k-api-0123456789"
		oauth = "k-oauth-0123456789"
	)
	srv := start(t, fakellm.Options{Default: "c", Scenarios: map[string]*fakellm.Scenario{"c": {Turns: []fakellm.Turn{{Text: "ok"}}}},
		Credentials: []fakellm.Credential{
			{Header: "x-api-key", Value: key},
			{Header: "Authorization", Value: "Bearer " + oauth, Requires: map[string]string{"anthropic-beta": "oauth-2025-04-20"}},
		}})
	body := map[string]any{"model": "m", "max_tokens": 10, "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	for _, tc := range []struct {
		name   string
		header map[string]string
		status int
		reason string
	}{
		{"api key", map[string]string{"x-api-key": key}, 200, ""},
		{"oauth with its beta", map[string]string{"Authorization": "Bearer " + oauth, "anthropic-beta": "claude-code-20250219, oauth-2025-04-20"}, 200, ""},
		{"both", map[string]string{"x-api-key": key, "Authorization": "Bearer " + oauth, "anthropic-beta": "oauth-2025-04-20"}, 200, ""},
		{"none", nil, 401, "no credential"},
		{"oauth without its beta", map[string]string{"Authorization": "Bearer " + oauth}, 401, "needs anthropic-beta"},
		{"in another header", map[string]string{"Authorization": "Bearer " + key}, 401, "wrong credential in Authorization"},
		{"a placeholder beside the key", map[string]string{"x-api-key": key, "Authorization": "Bearer placeholder"}, 401, "wrong credential in Authorization"},
		{"in the query", map[string]string{"x-api-key": key, "?key": key}, 401, "wrong credential in ?key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := srv.URL() + "/v1/messages"
			h := map[string]string{}
			for k, v := range tc.header {
				if k == "?key" {
					url += "?key=" + v
					continue
				}
				h[k] = v
			}
			status, _, b := post(t, url, body, h)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, b)
			}
			if tc.reason != "" && !strings.Contains(string(b), tc.reason) {
				t.Errorf("answer %s, want %q in it", b, tc.reason)
			}
			if strings.Contains(string(b), key) || strings.Contains(string(b), oauth) {
				t.Errorf("the answer shows a credential: %s", b)
			}
		})
	}
	if n := srv.KeyMismatches(); n != 5 {
		t.Errorf("KeyMismatches %d, want 5", n)
	}
}
