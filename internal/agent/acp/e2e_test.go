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
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// permissionCase is what one agent does with an answered command approval.
type permissionCase struct {
	// allowDone: after an allow the model is asked again and answers
	// "done" (the turn goes on).
	allowDone bool
	// denyMessage, when set, is in turn.completed's message after a deny
	// (codex-acp cancels the turn itself).
	denyMessage string
}

// testPermissions runs fakellm's permission scenario (one shell command,
// printf approved > approved.txt) in a fresh session per decision and
// checks what the API shows: one command request naming its item, one
// resolution by the user, the command item completed (allow: the file is
// written) or declined (deny: no file), a turn that ends (end_turn), and a
// session that takes the next turn.
func testPermissions(t *testing.T, st *agenttest.Stack, pc permissionCase) {
	for _, decision := range []string{"allow", "deny"} {
		t.Run(decision, func(t *testing.T) {
			st.SetScenario(fakellm.ScenarioPermission)
			ses, cwd := st.Create(t, client.PermissionDefault, nil)
			defer func() { _ = st.C.DeleteSession(context.Background(), ses.ID, false) }()
			tc, evs := st.Turn(t, ses.ID, "Create the file please", st.Answer(t, ses.ID, decision))
			if tc.StopReason != event.StopEndTurn {
				t.Fatalf("stop reason %s\n%s", tc.StopReason, agenttest.Dump(evs))
			}
			var (
				reqs []event.PermissionRequested
				ress []event.PermissionResolved
			)
			for _, e := range evs {
				switch p, _ := e.Decode(); p := p.(type) {
				case *event.PermissionRequested:
					reqs = append(reqs, *p)
				case *event.PermissionResolved:
					ress = append(ress, *p)
				}
			}
			if len(reqs) != 1 || len(ress) != 1 {
				t.Fatalf("%d requests and %d resolutions, want one each\n%s", len(reqs), len(ress), agenttest.Dump(evs))
			}
			req, res := reqs[0], ress[0]
			if req.Kind != event.PermCommand || req.ItemID == "" || !strings.Contains(req.Title, "approved.txt") || len(req.Options) == 0 {
				t.Errorf("permission request %+v, want a command request for the printf with its item and options", req)
			}
			if res.ID != req.ID || string(res.Decision) != decision || res.By != event.ByUser {
				t.Errorf("resolution %+v of %s, want %s by user", res, req.ID, decision)
			}
			its := agenttest.Items(t, evs)
			var cmd *event.Item
			for i := range its {
				if its[i].ID == req.ItemID {
					cmd = &its[i]
				}
			}
			b, err := os.ReadFile(filepath.Join(cwd, "approved.txt"))
			switch decision {
			case "allow":
				if err != nil || string(b) != "approved" {
					t.Errorf("allowed: approved.txt %q, %v", b, err)
				}
				if cmd == nil || cmd.Kind != event.ItemCommand || cmd.Status != event.StatusCompleted ||
					!strings.Contains(cmd.Command, "approved.txt") || (cmd.ExitCode != nil && *cmd.ExitCode != 0) {
					t.Errorf("allowed: the request's item %+v, want the completed command", cmd)
				}
				if got := agenttest.LastMessage(its); pc.allowDone && got != "done" {
					t.Errorf("allowed: last message %q, want \"done\"", got)
				}
			case "deny":
				if err == nil {
					t.Errorf("denied, but approved.txt exists (%q)", b)
				}
				if cmd == nil || cmd.Kind != event.ItemCommand || cmd.Status != event.StatusDeclined {
					t.Errorf("denied: the request's item %+v, want the declined command", cmd)
				}
				if pc.denyMessage != "" && !strings.Contains(tc.Message, pc.denyMessage) {
					t.Errorf("denied: turn.completed message %q, want it to say %q", tc.Message, pc.denyMessage)
				}
			}
			if t.Failed() {
				t.Logf("events:\n%s", agenttest.Dump(evs))
			}
			// The session goes on.
			st.SetScenario(fakellm.ScenarioText)
			tc, evs = st.Turn(t, ses.ID, "hello", nil)
			if tc.StopReason != event.StopEndTurn || agenttest.LastMessage(agenttest.Items(t, evs)) != "done" {
				t.Errorf("the turn after the %s: %+v\n%s", decision, tc, agenttest.Dump(evs))
			}
		})
	}
}

// TestE2EClaudeCodePermissions: claude-code-acp asks through the API;
// allowing runs the command, denying declines its item and leaves no file.
// claude-code-acp 0.16.2 denies with interrupt: true, so the turn ends
// there (end_turn) rather than going back to the model.
func TestE2EClaudeCodePermissions(t *testing.T) {
	t.Parallel()
	bin := installed(t, NameClaudeCode)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameClaudeCode,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return ClaudeCode(Config{Binary: bin, DataDir: t.TempDir(), AnthropicBaseURL: llm.URL(""), AnthropicAPIKey: llm.Key()})
		},
	})
	testPermissions(t, st, permissionCase{allowDone: true})
}

// TestE2ECodexPermissions: codex-acp asks through the API; allowing runs
// the command (in Codex's workspace-write sandbox) and the model is asked
// again; its only rejection ("abort") cancels the turn, which ends with
// the command declined, no file, and the agent's own cancellation said.
func TestE2ECodexPermissions(t *testing.T) {
	t.Parallel()
	bin := installed(t, NameCodex)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: NameCodex,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return Codex(codexConfigFor(bin, codexDataDir(t), llm))
		},
		URLSuffix: "/v1",
	})
	testPermissions(t, st, permissionCase{allowDone: true, denyMessage: "cancelled the turn itself"})
}
