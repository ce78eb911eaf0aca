package agent

import "testing"

// TestProviderKey: Key is the first credential with a value, in the order
// the provider lists them; the session's env wins over the default.
func TestProviderKey(t *testing.T) {
	codex := func(env map[string]string, def string) Provider {
		return OpenAI(env, "", def).With(Credential{ID: "codex-api-key", Env: "CODEX_API_KEY", Value: env["CODEX_API_KEY"], Headers: Bearer})
	}
	for _, tc := range []struct {
		name string
		p    Provider
		want string
	}{
		{"none", OpenAI(nil, "", ""), ""},
		{"default", OpenAI(nil, "", "daemon"), "daemon"},
		{"session over default", OpenAI(map[string]string{"OPENAI_API_KEY": "session"}, "", "daemon"), "session"},
		{"second credential", codex(map[string]string{"CODEX_API_KEY": "codex"}, ""), "codex"},
		{"first wins", codex(map[string]string{"CODEX_API_KEY": "codex"}, "daemon"), "daemon"},
	} {
		if got := tc.p.Key(); got != tc.want {
			t.Errorf("%s: Key() = %q, want %q", tc.name, got, tc.want)
		}
	}
}
