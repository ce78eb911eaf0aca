package acp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
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
	bin := installed(t, NameClaudeCode)
	caps := claudeCaps
	caps.Permissions = false
	agenttest.Run(t, agenttest.Target{
		Name: NameClaudeCode,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			return capsOverride{ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()}), caps}
		},
		Caps:     caps,
		Protocol: fakellm.APIAnthropic,
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

// TestE2EClaudeCodePermissions: a permission request of claude-code-acp
// is asked through the API; allowing runs the command, denying declines
// its item and leaves no file (the agent then ends the turn).
func TestE2EClaudeCodePermissions(t *testing.T) {
	bin := installed(t, NameClaudeCode)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameClaudeCode,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()})
		},
	})
	st.SetScenario(fakellm.ScenarioPermission)
	for _, decision := range []string{"allow", "deny"} {
		t.Run(decision, func(t *testing.T) {
			ses, cwd := st.Create(t, client.PermissionDefault, nil)
			defer func() { _ = st.C.DeleteSession(context.Background(), ses.ID, false) }()
			tc, evs := st.Turn(t, ses.ID, "Create the file please", st.Answer(t, ses.ID, decision))
			if tc.StopReason != event.StopEndTurn {
				t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
			}
			var req *event.PermissionRequested
			for _, e := range evs {
				if e.Type == event.TypePermissionRequested {
					p, _ := e.Decode()
					req = p.(*event.PermissionRequested)
				}
			}
			if req == nil || req.Kind != event.PermCommand || req.ItemID == "" {
				t.Fatalf("permission request %+v\n%s", req, agenttest.Dump(evs))
			}
			cmd := agenttest.FindItem(agenttest.Items(t, evs), event.ItemCommand)
			_, err := os.Stat(filepath.Join(cwd, "approved.txt"))
			switch decision {
			case "allow":
				if err != nil || cmd == nil || cmd.Status != event.StatusCompleted || !strings.Contains(cmd.Command, "approved.txt") {
					t.Errorf("allowed: file %v, command %+v\n%s", err, cmd, agenttest.Dump(evs))
				}
			case "deny":
				if err == nil || cmd == nil || cmd.Status != event.StatusDeclined || cmd.ID != req.ItemID {
					t.Errorf("denied: file %v, command %+v\n%s", err, cmd, agenttest.Dump(evs))
				}
			}
		})
	}
}

// TestConformanceOpenCode runs the shared suite against `opencode acp` and
// the fake LLM's Chat Completions API.
func TestConformanceOpenCode(t *testing.T) {
	bin := installed(t, "opencode")
	agenttest.Run(t, agenttest.Target{
		Name: NameOpenCode,
		New: func(t *testing.T, llm agenttest.LLM) agent.Adapter {
			return OpenCode(Config{Binary: bin, DataDir: t.TempDir(), OpenAIBaseURL: llm.URL(""), OpenAIAPIKey: llm.Key()})
		},
		Caps:      openCodeCaps,
		Protocol:  fakellm.APIChat,
		URLSuffix: "/v1",
	})
}
