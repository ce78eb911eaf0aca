package daemon

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
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
		"nesting bomb":      {"secrets: " + strings.Repeat("[", 200_000), ":1:73: collections are nested more than 64 levels deep"},
		"anchor":            {"x: &a [1]\nsecrets: *a\n", ":1:4: YAML anchors (&name) are not accepted"},
		"alias":             {"secrets: *a\n", ":1:10: YAML aliases (*name) are not accepted"},
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
	providers := []agent.Provider{
		agent.Anthropic(map[string]string{"ANTHROPIC_API_KEY": "sk-real", "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat-real"}, "", ""),
		agent.OpenAI(nil, "http://127.0.0.1:9000/s/shell/v1", ""),
		agent.Anthropic(nil, "https://elsewhere.example", "ignored: a second anthropic"),
		agent.Gemini(map[string]string{"GOOGLE_API_KEY": "AIza-real"}, "", ""),
	}
	routes, env, err := providerRoutes(3128, providers)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 3 || routes[0].Name != "anthropic" || routes[0].Upstream.String() != "https://api.anthropic.com" ||
		routes[1].Upstream.String() != "http://127.0.0.1:9000/s/shell/v1" || len(routes[1].Credentials) != 0 ||
		routes[2].Name != "gemini" {
		t.Fatalf("routes %+v", routes)
	}
	type cred struct{ name, value, header, format string }
	got := func(r egress.Route) []cred {
		var out []cred
		for _, s := range r.Credentials {
			out = append(out, cred{s.Name, s.Value, s.Header, s.Format})
		}
		return out
	}
	for i, want := range [][]cred{
		{{"anthropic-api-key", "sk-real", "x-api-key", ""}, {"anthropic-oauth-token", "sk-ant-oat-real", "Authorization", "Bearer {value}"}},
		nil,
		{{"gemini-google-api-key", "AIza-real", "x-goog-api-key", ""}, {"gemini-google-api-key", "AIza-real", "Authorization", "Bearer {value}"}},
	} {
		if g := got(routes[i]); !slices.Equal(g, want) {
			t.Errorf("route %s credentials %+v, want %+v", routes[i].Name, g, want)
		}
	}
	want := map[string]string{
		"ANTHROPIC_BASE_URL":      "http://127.0.0.1:3128/llm/anthropic",
		"ANTHROPIC_API_KEY":       egress.Placeholder("anthropic-api-key"),
		"CLAUDE_CODE_OAUTH_TOKEN": egress.Placeholder("anthropic-oauth-token"),
		"OPENAI_BASE_URL":         "http://127.0.0.1:3128/llm/openai",
		"GOOGLE_GEMINI_BASE_URL":  "http://127.0.0.1:3128/llm/gemini",
		"GOOGLE_API_KEY":          egress.Placeholder("gemini-google-api-key"),
	}
	// What Create gives the agent: the placeholders of every network
	// mode, with the routes' base URLs on top.
	all := credentialEnv(providers)
	maps.Copy(all, env)
	if !maps.Equal(all, want) {
		t.Errorf("env %v, want %v (unset credentials stay unset)", all, want)
	}
	if _, _, err := providerRoutes(3128, []agent.Provider{agent.OpenAI(nil, "ftp://x", "")}); err == nil {
		t.Error("a non-http base URL was accepted")
	}
}

// TestSandboxCA: a sandbox whose policy names a secret that opts in to TLS
// interception gets a CA of its own: a bundle (the host's roots, then the
// CA; no key) bound read-only into it and named by the TLS clients'
// variables; a sandbox whose secrets do not opt in gets nothing.
func TestSandboxCA(t *testing.T) {
	store := egress.NewSecrets()
	for _, s := range []egress.Secret{
		{Name: "gh", Value: "v1", Host: "github.com", Header: "Authorization", InterceptTLS: true},
		{Name: "npm", Value: "v2", Host: "*.npmjs.org", Header: "Authorization"},
	} {
		if err := store.Put(s, "test"); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "egress-ca")
	spec := sandbox.Spec{Env: map[string]string{"PATH": "/bin"}, Network: sandbox.Network{Secrets: map[string]string{"NPM_TOKEN": "npm"}}}
	if ca, release, err := sandboxCA(store, []byte("ROOTS\n"), dir, "ses_1", &spec); ca != nil || release != nil || err != nil || len(spec.ReadPaths) != 0 || len(spec.Env) != 1 {
		t.Fatalf("no intercepting secret: CA %v, release %v, %v, %+v", ca, release != nil, err, spec)
	}
	spec.Network.Secrets["GH_TOKEN"] = "gh"
	ca, release, err := sandboxCA(store, []byte("ROOTS\n"), dir, "ses_1", &spec)
	if err != nil || ca == nil {
		t.Fatal(err)
	}
	d := filepath.Join(dir, "ses_1")
	bundle := filepath.Join(d, caBundleName)
	if len(spec.ReadPaths) != 1 || spec.ReadPaths[0] != d {
		t.Errorf("read paths %v, want %s", spec.ReadPaths, d)
	}
	for _, k := range []string{"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"} {
		if spec.Env[k] != bundle {
			t.Errorf("%s=%q, want %s", k, spec.Env[k], bundle)
		}
	}
	b, err := os.ReadFile(bundle)
	if err != nil || !strings.HasPrefix(string(b), "ROOTS\n") || !strings.Contains(string(b), string(ca.CertPEM())) || strings.Contains(string(b), "PRIVATE") {
		t.Errorf("bundle %q, %v", b, err)
	}
	if got := ca.Certificate().PermittedDNSDomains; len(got) != 1 || got[0] != "github.com" {
		t.Errorf("the CA is constrained to %v, want the intercepting secret's host only", got)
	}
	for p, mode := range map[string]os.FileMode{d: 0o755 | os.ModeDir, bundle: 0o644} {
		if st, err := os.Stat(p); err != nil || st.Mode() != mode {
			t.Errorf("%s: %v, %v; want mode %v", p, st.Mode(), err, mode)
		}
	}
	release()
	if _, err := os.Stat(d); !os.IsNotExist(err) {
		t.Errorf("the bundle is still there after release: %v", err)
	}
}
