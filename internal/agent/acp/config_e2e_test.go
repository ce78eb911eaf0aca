package acp

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// switchCase is how one agent shows a model and mode switch.
type switchCase struct {
	// model is the model to switch to, wire (part of) the model name the
	// fake LLM then sees in the agent's requests.
	model, wire string
	// mode is the mode to switch to; modeMark is text the agent's next
	// model request carries only in that mode ("": mode not tested).
	mode, modeMark string
}

// testSwitch backs model_list, model_switch and mode_switch with the real
// agent: session.started carries the agent's own lists, GET
// /v1/agents/{name} shows them, a create naming a model not on them fails
// with 422 before any process starts, PATCH /v1/sessions/{id} between turns
// switches the model (and mode), which is recorded (session.configured,
// the session's model) and reaches the agent: its next model request names
// the new model (and carries the mode's mark).
func testSwitch(t *testing.T, st *agenttest.Stack, name string, sc switchCase) {
	ctx := t.Context()
	ses, _ := st.Create(t, client.PermissionDefault, nil)
	defer func() { _ = st.C.DeleteSession(context.Background(), ses.ID, false) }()
	page, err := st.C.Events(ctx, ses.ID, 0, 10)
	if err != nil || len(page.Events) == 0 {
		t.Fatalf("events: %v %+v", err, page)
	}
	p, _ := page.Events[0].Decode()
	started, ok := p.(*event.SessionStarted)
	if !ok {
		t.Fatalf("first event %s, want session.started", page.Events[0].Type)
	}
	t.Logf("%s offers models %v (current %q), modes %v (current %q)", name, started.Models, started.Model, started.Modes, started.Mode)
	if !slices.ContainsFunc(started.Models, func(c event.Choice) bool { return c.ID == sc.model }) {
		t.Fatalf("session.started models %v do not include %q", started.Models, sc.model)
	}
	if sc.mode != "" && !slices.ContainsFunc(started.Modes, func(c event.Choice) bool { return c.ID == sc.mode }) {
		t.Fatalf("session.started modes %v do not include %q", started.Modes, sc.mode)
	}
	det, err := st.C.Agent(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if det.CatalogSession != ses.ID || !slices.Equal(det.Models, started.Models) || !slices.Equal(det.Modes, started.Modes) ||
		!det.Capabilities.ModelList || !det.Capabilities.ModelSwitch {
		t.Fatalf("GET /v1/agents/%s = %+v, want the lists of session %s", name, det, ses.ID)
	}
	// The list is known: a model not on it fails before any process.
	_, err = st.C.CreateSession(ctx, client.CreateSession{Agent: name, Model: "no-such-model", Cwd: st.Host.Workspace(t)})
	if !client.HasProblemType(err, client.ProblemUnknownModel) || !strings.Contains(err.Error(), sc.model) {
		t.Fatalf("create with an unknown model: %v, want 422 unknown-model naming the offered ones", err)
	}

	st.SetScenario(fakellm.ScenarioText)
	if tc, evs := st.Turn(t, ses.ID, "hello", nil); tc.StopReason != event.StopEndTurn {
		t.Fatalf("first turn: %+v\n%s", tc, agenttest.Dump(evs))
	}
	// The agent's main model so far: that of the turn's last request (an
	// agent may make side requests with a small model).
	var prev string
	for _, r := range st.LLM.Requests() {
		if r.Model == "" {
			continue
		}
		if strings.Contains(r.Model, sc.wire) || sc.modeMark != "" && strings.Contains(string(r.Body)+r.BodyText, sc.modeMark) {
			t.Fatalf("the agent asked for %s or in mode %s before the switch: the test cannot tell", sc.wire, sc.mode)
		}
		prev = r.Model
	}
	before := len(st.LLM.Requests())
	upd, err := st.C.UpdateSession(ctx, ses.ID, client.UpdateSession{Model: sc.model, Mode: sc.mode})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if upd.Model != sc.model || upd.Mode != sc.mode {
		t.Fatalf("updated session %+v, want model %q mode %q", upd, sc.model, sc.mode)
	}
	if tc, evs := st.Turn(t, ses.ID, "hello again", nil); tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn after the switch: %+v\n%s", tc, agenttest.Dump(evs))
	}
	// After the switch the agent asks for the new model and no longer for
	// the old one, and (in the new mode) carries its mark.
	var wire, marked bool
	for _, r := range st.LLM.Requests()[before:] {
		switch {
		case r.Model == "":
			continue
		case r.Model == prev:
			t.Errorf("after the switch the agent still asked for %q", prev)
		case strings.Contains(r.Model, sc.wire):
			wire = true
		}
		marked = marked || strings.Contains(string(r.Body)+r.BodyText, sc.modeMark)
	}
	if !wire {
		t.Errorf("after the switch no request asked for %q", sc.wire)
	}
	if sc.modeMark != "" && !marked {
		t.Errorf("after the switch to mode %s no request carries %q", sc.mode, sc.modeMark)
	}
	var configured []event.SessionConfigured
	err = st.C.EventsAll(ctx, ses.ID, 0, func(e event.Event) error {
		if p, _ := e.Decode(); p != nil {
			if c, ok := p.(*event.SessionConfigured); ok {
				configured = append(configured, *c)
			}
		}
		return nil
	})
	if err != nil || len(configured) != 1 || configured[0].Model != sc.model || configured[0].Mode != sc.mode {
		t.Fatalf("session.configured events %+v (%v), want one with model %q mode %q", configured, err, sc.model, sc.mode)
	}
}

// TestE2ECodexSwitch: codex-acp lists Codex's models in session/new (as
// its config option of category model; it offers no modes) and switches
// the model with session/set_config_option between turns.
func TestE2ECodexSwitch(t *testing.T) {
	t.Parallel()
	bin := installed(t, NameCodex)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameCodex,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return Codex(codexConfigFor(bin, codexDataDir(t), llm))
		},
		URLSuffix: "/v1",
	})
	testSwitch(t, st, NameCodex, switchCase{model: "gpt-5.4", wire: "gpt-5.4"})
}

// TestE2EOpenCodeSwitch: opencode-acp lists the models its opencode.json
// declares and its agents (build, plan) as modes in session/new, and
// switches both between turns.
func TestE2EOpenCodeSwitch(t *testing.T) {
	t.Parallel()
	bin := installed(t, "opencode")
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameOpenCode,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return OpenCode(Config{Binary: bin, DataDir: t.TempDir(), OpenAIBaseURL: llm.URL(""), OpenAIAPIKey: llm.Key(), OpenCodeModels: []string{"gpt-5"}})
		},
		URLSuffix: "/v1",
	})
	testSwitch(t, st, NameOpenCode, switchCase{model: "agentbox/gpt-5", wire: "gpt-5", mode: "plan", modeMark: "Plan mode ACTIVE"})
}

// TestE2EClaudeCodeSwitch: claude-code-acp lists Claude's models and its
// permission modes in session/new and switches both between turns.
func TestE2EClaudeCodeSwitch(t *testing.T) {
	t.Parallel()
	bin := installed(t, NameClaudeCode)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameClaudeCode,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()})
		},
	})
	testSwitch(t, st, NameClaudeCode, switchCase{model: "opus", wire: "opus", mode: "plan", modeMark: "Plan mode is active"})
}

// TestE2EGeminiSwitch: Gemini CLI lists its models and approval modes in
// session/new and switches both between turns.
func TestE2EGeminiSwitch(t *testing.T) {
	t.Parallel()
	bin := installed(t, "gemini")
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameGemini,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return Gemini(Config{Binary: bin, DataDir: t.TempDir(), GeminiBaseURL: llm.URL(""), GeminiAPIKey: llm.Key(), GeminiMaxAttempts: 1})
		},
	})
	testSwitch(t, st, NameGemini, switchCase{model: "gemini-2.5-pro", wire: "gemini-2.5-pro", mode: "plan", modeMark: "operating in **Plan Mode**"})
}
