package pi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// newStack is the daemon's stack with the pi adapter, for the tests the
// conformance suite does not cover.
func newStack(t *testing.T) *agenttest.Stack {
	t.Helper()
	agenttest.RequireInstalled(t, Name)
	home := t.TempDir()
	return agenttest.NewStack(t, agenttest.StackOptions{
		Name:      Name,
		URLSuffix: "/v1",
		New: func(_ testing.TB, llm agenttest.LLM) agent.Adapter {
			return New(Options{Binary: install.Binary(Name), BaseURL: llm.URL(""), APIKey: llm.Key(), Home: home})
		},
	})
}

// TestE2E runs the real CLI through the stack: thinking becomes a
// reasoning item (Reasoning), plan mode refuses a command without asking,
// an edit in accept_edits carries its diff, and a session ended and
// resumed continues pi's conversation (Resume).
func TestE2E(t *testing.T) {
	s := newStack(t)

	t.Run("thinking", func(t *testing.T) {
		s.SetScenario(fakellm.ScenarioThinking)
		ses, _ := s.Create(t, client.PermissionDefault, nil)
		tc, evs := s.Turn(t, ses.ID, "hello", nil)
		its := agenttest.Items(t, evs)
		r := agenttest.FindItem(its, event.ItemReasoning)
		if tc.StopReason != event.StopEndTurn || r == nil || r.Text() != "The user wants an answer. I will say done." {
			t.Fatalf("reasoning item %+v, stop %s\n%s", r, tc.StopReason, agenttest.Dump(evs))
		}
	})

	t.Run("plan_mode", func(t *testing.T) {
		s.SetScenario(fakellm.ScenarioPermission)
		ses, cwd := s.Create(t, client.PermissionPlan, nil)
		tc, evs := s.Turn(t, ses.ID, "Create the file please", s.Answer(t, ses.ID, "allow"))
		cmd := agenttest.FindItem(agenttest.Items(t, evs), event.ItemCommand)
		if tc.StopReason != event.StopEndTurn || cmd == nil || cmd.Status != event.StatusDeclined {
			t.Fatalf("command %+v, stop %s\n%s", cmd, tc.StopReason, agenttest.Dump(evs))
		}
		for _, e := range evs {
			if e.Type == event.TypePermissionRequested {
				t.Errorf("plan mode asked: %s", e.Data)
			}
		}
		if _, err := os.Stat(filepath.Join(cwd, "approved.txt")); err == nil {
			t.Error("plan mode ran the command")
		}
	})

	t.Run("edit_diff", func(t *testing.T) {
		s.SetScenario(fakellm.ScenarioEdit)
		ses, cwd := s.Create(t, client.PermissionAcceptEdits, nil)
		tc, evs := s.Turn(t, ses.ID, "Create the file please", nil)
		var edit *event.Item
		for _, it := range agenttest.Items(t, evs) {
			if it.Kind == event.ItemFileChange && len(it.Changes) == 1 && it.Changes[0].Kind == event.FileUpdate {
				edit = &it
			}
		}
		want := "--- a/hello.txt\n+++ b/hello.txt\n@@ -1 +1 @@\n-hi\n\\ No newline at end of file\n+hello\n\\ No newline at end of file\n"
		if tc.StopReason != event.StopEndTurn || edit == nil || edit.Changes[0].Diff != want {
			t.Fatalf("edit item %+v\n%s", edit, agenttest.Dump(evs))
		}
		if b, _ := os.ReadFile(filepath.Join(cwd, "hello.txt")); string(b) != "hello" {
			t.Errorf("hello.txt = %q", b)
		}
	})

	t.Run("resume", func(t *testing.T) {
		s.SetScenario(fakellm.ScenarioMulti)
		ses, _ := s.Create(t, client.PermissionAcceptEdits, nil)
		if tc, evs := s.Turn(t, ses.ID, "first", nil); tc.StopReason != event.StopEndTurn {
			t.Fatalf("first turn %+v\n%s", tc, agenttest.Dump(evs))
		}
		ctx := context.Background()
		if err := s.C.DeleteSession(ctx, ses.ID, false); err != nil {
			t.Fatal(err)
		}
		res, err := s.C.Resume(ctx, ses.ID, client.ResumeSession{})
		if err != nil {
			t.Fatalf("resume: %v", err)
		}
		if res.NativeSessionID != ses.NativeSessionID || ses.NativeSessionID == "" {
			t.Errorf("native session id %q after resume, was %q", res.NativeSessionID, ses.NativeSessionID)
		}
		// The fake model answers "second answer" only to a history that
		// holds the first exchange: pi loaded its session file.
		tc, evs := s.Turn(t, ses.ID, "second", nil)
		if got := agenttest.LastMessage(agenttest.Items(t, evs)); tc.StopReason != event.StopEndTurn || got != "second answer" {
			t.Fatalf("after resume: %q, %+v\n%s", got, tc, agenttest.Dump(evs))
		}
	})
}

// TestE2EModelSwitch: pi lists the models its provider declares
// (get_available_models) and switches with set_model between turns; a
// resumed session starts with the new model.
func TestE2EModelSwitch(t *testing.T) {
	agenttest.RequireInstalled(t, Name)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name:      Name,
		URLSuffix: "/v1",
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return New(Options{Binary: install.Binary(Name), BaseURL: llm.URL(""), APIKey: llm.Key(), Home: t.TempDir(), Models: []string{"gpt-5"}})
		},
	})
	agenttest.Switch(t, st, Name, agenttest.SwitchCase{Model: "gpt-5", Wire: "gpt-5", Resume: true})
}

// TestE2EModelListRefused: a pi that refuses get_available_models still
// runs the session, without a model list (like codex without model/list).
// The real pi runs behind a filter that turns that one command into one pi
// refuses (set_model of an unknown provider, answered with its id and
// success false).
func TestE2EModelListRefused(t *testing.T) {
	in := agenttest.RequireInstalled(t, Name)
	sed, err := exec.LookPath("sed")
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(t.TempDir(), "pi")
	script := "#!/bin/sh\nexport PATH=" + filepath.Dir(in.Binary) + ":$PATH\n" +
		sed + ` -u 's/"type":"get_available_models"/"type":"set_model","provider":"agentbox-refused","modelId":"none"/' | exec ` + in.Binary + ` "$@"` + "\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name:      Name,
		URLSuffix: "/v1",
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			bin := func() (string, string, error) { return wrapper, in.Version, nil }
			return New(Options{Binary: bin, BaseURL: llm.URL(""), APIKey: llm.Key(), Home: t.TempDir(), Models: []string{"gpt-5"}})
		},
	})
	ses, _ := st.Create(t, client.PermissionDefault, nil)
	page, err := st.C.Events(t.Context(), ses.ID, 0, 1)
	if err != nil || len(page.Events) == 0 {
		t.Fatalf("events: %v %+v", err, page)
	}
	p, _ := page.Events[0].Decode()
	if started, ok := p.(*event.SessionStarted); !ok || len(started.Models) != 0 {
		t.Fatalf("first event %+v, want session.started without models", p)
	}
	if det, err := st.C.Agent(t.Context(), Name); err != nil || len(det.Models) != 0 {
		t.Fatalf("GET /v1/agents/pi: %+v %v, want no models", det, err)
	}
	st.SetScenario(fakellm.ScenarioText)
	if tc, evs := st.Turn(t, ses.ID, "hello", nil); tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v\n%s", tc, agenttest.Dump(evs))
	}
}
