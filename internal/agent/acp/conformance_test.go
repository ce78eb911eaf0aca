package acp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// installed returns Config.Binary for the agent cache, failing (never
// skipping) the test when an agent is missing.
func installed(t *testing.T, names ...string) func(string) func() (string, string, error) {
	t.Helper()
	bins := map[string]func() (string, string, error){}
	for _, n := range names {
		in := agenttest.RequireInstalled(t, n)
		bins[n] = func() (string, string, error) { return in.Binary, in.Version, nil }
	}
	return func(name string) func() (string, string, error) {
		if b := bins[name]; b != nil {
			return b
		}
		return func() (string, string, error) { return "", "", nil }
	}
}

// TestConformanceGemini runs the shared adapter suite against Gemini CLI
// in ACP mode and the fake LLM's Gemini API.
func TestConformanceGemini(t *testing.T) {
	t.Parallel()
	bin := installed(t, "gemini")
	agenttest.Run(t, agenttest.Target{
		Name: NameGemini,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			return Gemini(Config{Binary: bin, DataDir: t.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(),
				GeminiMaxAttempts: 1})
		},
		Caps:     geminiCaps,
		Protocol: fakellm.APIGemini,
	})
}

// TestConformanceClaudeCode runs the shared suite against claude-code-acp
// and the fake LLM's Anthropic API. claude-code-acp ends the turn on every
// rejected permission (it denies with interrupt: true), which the shared
// permission_deny subtest does not accept: the suite runs with Permissions
// off, and TestE2EClaudeCodePermissions checks both answers instead.
func TestConformanceClaudeCode(t *testing.T) {
	t.Parallel()
	bin := installed(t, NameClaudeCode)
	caps := claudeCaps
	caps.Permissions = false
	agenttest.Run(t, agenttest.Target{
		Name: NameClaudeCode,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			return overrideCaps(ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()}), caps)
		},
		Caps:     caps,
		Protocol: fakellm.APIAnthropic,
		Sandboxed: agenttest.Sandboxed{
			// Its home is mounted into the session's sandbox: the data
			// directory must lie in the daemon's (as daemon.Agents puts it).
			New: func(_ *testing.T, llm agenttest.LLM, stateDir string) agent.Adapter {
				return overrideCaps(ClaudeCode(Config{Binary: bin, DataDir: stateDir, AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()}), caps)
			},
		},
	})
}

// capsOverride reports other capabilities than its adapter (to run the
// shared suite without the subtests an agent cannot pass).
type capsOverride struct {
	agent.Adapter
	caps agent.Capabilities
}

func (c capsOverride) Info(ctx context.Context) agent.Info {
	info := c.Adapter.Info(ctx)
	info.Capabilities = c.caps
	return info
}

// overrideCaps wraps a in a capsOverride that keeps a's optional
// agent.SandboxNeeder and agent.ProviderUser (the paths and the model
// routes a sandboxed session needs), which the embedding alone would hide.
func overrideCaps(a agent.Adapter, caps agent.Capabilities) agent.Adapter {
	o := capsOverride{a, caps}
	n, needs := a.(agent.SandboxNeeder)
	p, uses := a.(agent.ProviderUser)
	switch {
	case needs && uses:
		return struct {
			capsOverride
			agent.SandboxNeeder
			agent.ProviderUser
		}{o, n, p}
	case needs:
		return struct {
			capsOverride
			agent.SandboxNeeder
		}{o, n}
	case uses:
		return struct {
			capsOverride
			agent.ProviderUser
		}{o, p}
	}
	return o
}

// TestConformanceOpenCode runs the shared suite against `opencode acp` and
// the fake LLM's Chat Completions API.
func TestConformanceOpenCode(t *testing.T) {
	t.Parallel()
	bin := installed(t, "opencode")
	agenttest.Run(t, agenttest.Target{
		Name: NameOpenCode,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			return OpenCode(Config{Binary: bin, DataDir: t.TempDir(), OpenAIBaseURL: retryAfterProxy(t, llm.URL("")), OpenAIAPIKey: llm.Key()})
		},
		Caps:      openCodeCaps,
		Protocol:  fakellm.APIChat,
		URLSuffix: "/v1",
	})
}

// retryAfterProxy returns the URL of a proxy to base that adds
// "retry-after-ms: 100" to server errors, as providers do. OpenCode
// retries a 5xx five times, by default with a backoff from 2 s to 30 s
// (about 70 s in all, not configurable), unless the provider says when to
// retry; it still fails the turn after its fifth retry.
func retryAfterProxy(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: u.Scheme, Host: u.Host})
			pr.Out.Host = u.Host
		},
		// One request per connection, as the stack's own switcher does
		// (see agenttest's proxyTransport): Bun reuses sockets an aborted
		// stream left half-closed.
		Transport: &http.Transport{DisableKeepAlives: true},
		ModifyResponse: func(r *http.Response) error {
			if r.StatusCode >= 500 {
				r.Header.Set("Retry-After-Ms", "100")
			}
			return nil
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + u.Path
}

// codexDataDir is a Config.DataDir outside the temp dir (t.TempDir is
// under /tmp, where Codex cannot create its sandbox helper).
func codexDataDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "agentbox-codex-acp-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// codexTestModel has real metadata in codex-acp 0.16.0 (its default), so
// Codex offers apply_patch (file changes) as well as its shell tool.
const codexTestModel = "gpt-5.5"

func codexConfigFor(bin func(string) func() (string, string, error), dataDir string, llm agenttest.LLM) Config {
	return Config{Binary: bin, DataDir: dataDir, OpenAIBaseURL: llm.URL(""), OpenAIAPIKey: llm.Key(), CodexModel: codexTestModel}
}

// TestConformanceCodex runs the shared suite against codex-acp and the
// fake LLM's Responses API. codex-acp offers no way to decline a command
// and go on: its only rejection ("abort") cancels the turn, which the
// shared permission_deny subtest does not accept. The suite runs with
// Permissions off; TestE2ECodexPermissions checks both answers instead.
func TestConformanceCodex(t *testing.T) {
	t.Parallel()
	bin := installed(t, NameCodex)
	caps := codexCaps
	caps.Permissions = false
	agenttest.Run(t, agenttest.Target{
		Name: NameCodex,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			return overrideCaps(Codex(codexConfigFor(bin, codexDataDir(t), llm)), caps)
		},
		Sandboxed: agenttest.Sandboxed{
			// Its home is mounted into the session's sandbox: the data
			// directory must lie in the daemon's (as daemon.Agents puts it),
			// which the sandbox's root leaves room for, not in a read-only
			// host path.
			New: func(_ *testing.T, llm agenttest.LLM, stateDir string) agent.Adapter {
				return overrideCaps(Codex(codexConfigFor(bin, stateDir, llm)), caps)
			},
		},
		Caps:      caps,
		Protocol:  fakellm.APIResponses,
		URLSuffix: "/v1",
	})
}
