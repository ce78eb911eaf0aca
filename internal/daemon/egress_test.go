package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
)

func TestLoadSecrets(t *testing.T) {
	dir := t.TempDir()
	valueFile := filepath.Join(dir, "npm")
	if err := os.WriteFile(valueFile, []byte("npm-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GITHUB_TOKEN": "ghp-secret"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	write := func(body string) string {
		p := filepath.Join(t.TempDir(), "secrets.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write(`secrets:
  - {name: github, host: api.github.com, header: Authorization, format: "Bearer {value}", value_env: GITHUB_TOKEN}
  - {name: npm, host: "*.npmjs.org", header: Authorization, value_file: ` + valueFile + `}
`)
	store, err := loadSecrets(good, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := store.Secret("github"); !ok || s.Value != "ghp-secret" || s.Host != "api.github.com" || s.Format != "Bearer {value}" {
		t.Errorf("github: %+v %v", s, ok)
	}
	if s, ok := store.Secret("npm"); !ok || s.Value != "npm-secret" {
		t.Errorf("npm: the file's value without its newline, got %q", s.Value)
	}
	if list := store.List(); len(list) != 2 || list[0].Source != "env:GITHUB_TOKEN" || list[1].Source != "file:"+valueFile {
		t.Errorf("sources %+v", list)
	}
	if store, err := loadSecrets("", getenv); err != nil || len(store.List()) != 0 {
		t.Errorf("no file: %v %v", store.List(), err)
	}
	for name, tc := range map[string]struct{ body, want string }{
		"value in the file": {"secrets: [{name: x, host: a.example, header: X, value: v}]", "unknown field"},
		"no value source":   {"secrets: [{name: x, host: a.example, header: X}]", "value_env or value_file is required"},
		"both sources":      {"secrets: [{name: x, host: a.example, header: X, value_env: A, value_file: /b}]", "not both"},
		"unset variable":    {"secrets: [{name: x, host: a.example, header: X, value_env: NOPE}]", "has no NOPE"},
		"missing file":      {"secrets: [{name: x, host: a.example, header: X, value_file: /nonexistent/x}]", "no such file"},
		"bad host":          {"secrets: [{name: x, host: 'a b', header: X, value_env: GITHUB_TOKEN}]", "host"},
		"twice":             {"secrets: [{name: x, host: a.example, header: X, value_env: GITHUB_TOKEN}, {name: x, host: b.example, header: X, value_env: GITHUB_TOKEN}]", "defined twice"},
		"nesting bomb":      {"secrets: " + strings.Repeat("[", 200_000), ":1:74: collections are nested more than 64 levels deep"},
		"alias":             {"x: &a [1]\nsecrets: *a\n", ":2:10: YAML aliases (*name) are not accepted"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadSecrets(write(tc.body), getenv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "ghp-secret") {
				t.Errorf("the error shows a secret value: %v", err)
			}
		})
	}
}

func TestProviderRoutes(t *testing.T) {
	routes, env, err := providerRoutes(3128, []agent.Provider{
		agent.Anthropic(map[string]string{"ANTHROPIC_API_KEY": "sk-real"}, "", ""),
		agent.OpenAI(nil, "http://127.0.0.1:9000/s/shell/v1", ""),
		agent.Anthropic(nil, "https://elsewhere.example", "ignored: a second anthropic"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 2 || routes[0].Name != "anthropic" || routes[0].Upstream.String() != "https://api.anthropic.com" ||
		routes[1].Upstream.String() != "http://127.0.0.1:9000/s/shell/v1" || routes[1].Secret != nil {
		t.Fatalf("routes %+v", routes)
	}
	if s := routes[0].Secret; s == nil || s.Value != "sk-real" || s.Header != "x-api-key" || s.Host != "api.anthropic.com" {
		t.Errorf("anthropic secret %+v", s)
	}
	want := map[string]string{
		"ANTHROPIC_BASE_URL": "http://127.0.0.1:3128/llm/anthropic",
		"ANTHROPIC_API_KEY":  egress.Placeholder("anthropic-api-key"),
		"OPENAI_BASE_URL":    "http://127.0.0.1:3128/llm/openai",
	}
	if len(env) != len(want) {
		t.Errorf("env %v, want %v", env, want)
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("env %s = %q, want %q", k, env[k], v)
		}
	}
	if _, _, err := providerRoutes(3128, []agent.Provider{agent.OpenAI(nil, "ftp://x", "")}); err == nil {
		t.Error("a non-http base URL was accepted")
	}
}
