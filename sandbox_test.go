package agentbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// TestSessionInSandbox runs a mock agent session under the agent-default
// policy: its commands run as the sandbox user, its workspace changes reach
// the host at the end of the turn, and a protected file it creates does
// not, with a sandbox.violation event in the log.
func TestSessionInSandbox(t *testing.T) {
	requireSandbox(t)
	t.Setenv("AGENTBOX_TEST_SECRET", "hunter2") // must not reach the sandbox
	srv := start(t, agentbox.Options{})
	c := srv.Client()
	cwd := t.TempDir()
	if err := os.WriteFile(filepath.Join(cwd, "CLAUDE.md"), []byte("be nice\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: cwd, Policy: json.RawMessage(`"agent-default"`)})
	if err != nil {
		t.Fatal(err)
	}
	prompt := mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: "id -u; env; echo made > out.txt; echo evil >> CLAUDE.md; " +
		"mkdir -p .git/hooks && echo x > .git/hooks/post-checkout; echo sneaky > AGENTS.md; true"})
	tc, evs := turn(t, c, s.ID, prompt)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v", tc)
	}
	var out string
	var violations []event.SandboxViolation
	for _, e := range evs {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch d := p.(type) {
		case *event.ItemCompleted:
			if d.Item.Kind == event.ItemCommand {
				out = d.Item.Output
			}
		case *event.SandboxViolation:
			violations = append(violations, *d)
		}
	}
	if !strings.HasPrefix(out, "1000\n") {
		t.Errorf("command output %q, want uid 1000 first", out)
	}
	if strings.Contains(out, "hunter2") || strings.Contains(out, "AGENTBOX_TEST_SECRET") {
		t.Errorf("the daemon's environment leaked into the sandbox:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "out.txt")); err != nil || string(b) != "made\n" {
		t.Errorf("out.txt on the host: %q, %v; want the command's file after the turn", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, "CLAUDE.md")); string(b) != "be nice\n" {
		t.Errorf("CLAUDE.md on the host changed to %q", b)
	}
	for _, p := range []string{"AGENTS.md", ".git/hooks/post-checkout"} {
		if _, err := os.Lstat(filepath.Join(cwd, p)); err == nil {
			t.Errorf("protected %s was created on the host", p)
		}
	}
	if len(violations) < 3 {
		t.Errorf("%d sandbox.violation events, want one per protected change (3): %+v", len(violations), violations)
	}
	for _, v := range violations {
		if v.Kind != event.ViolationFilesystem || v.Action != event.ActionDropped || v.Path == "" || v.Rule == "" {
			t.Errorf("violation %+v, want a dropped filesystem change naming path and rule", v)
		}
	}
	// session.started says what isolation the agent runs under.
	page, err := c.Events(t.Context(), s.ID, 0, 1)
	if err != nil || len(page.Events) != 1 {
		t.Fatal(err)
	}
	p, _ := page.Events[0].Decode()
	st, ok := p.(*event.SessionStarted)
	if !ok || st.Sandbox == nil || st.Sandbox.Runtime != "process" || len(st.Sandbox.Mechanisms) == 0 {
		t.Errorf("session.started %+v, want the sandbox's runtime and mechanisms", p)
	}
}

// TestSessionPolicyRefused checks that a policy is refused with a problem
// naming the field, and that a daemon without sandboxing never accepts one.
func TestSessionPolicyRefused(t *testing.T) {
	srv := start(t, agentbox.Options{})
	c := srv.Client()
	_, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(`{"version":1,"resources":{"pids":"many"}}`)})
	var pe *client.APIError
	if !errors.As(err, &pe) || pe.Type != client.ProblemPolicy || !strings.Contains(pe.Detail, "resources.pids") {
		t.Fatalf("create with a bad policy: %v, want a policy problem naming resources.pids", err)
	}
	_, err = c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", PolicySource: &client.PolicySource{
		Name: "team.yaml", Text: "version: 1\nresources:\n  memory: lots\n"}})
	if !errors.As(err, &pe) || pe.Type != client.ProblemPolicy || !strings.Contains(pe.Detail, "team.yaml:3") {
		t.Fatalf("create with a bad policy file: %v, want a policy problem at team.yaml:3", err)
	}
	_, err = c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(`{"version":1,"network":{"mode":"host"}}`)})
	if !errors.As(err, &pe) || pe.Type != client.ProblemPolicy {
		t.Fatalf("create asking for host network without the operator's leave: %v, want a policy problem", err)
	}
}

// requireSandbox skips on a host whose process runtime cannot run (the
// probe names what is missing); CI's machines can.
func requireSandbox(t *testing.T) {
	t.Helper()
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
}

// turn sends text and collects the turn's events until turn.completed.
func turn(t *testing.T, c *client.Client, sid, text string) (event.TurnCompleted, []event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	after, err := c.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Send(ctx, sid, text)
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	tc, err := c.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error { evs = append(evs, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return tc, evs
}

// TestAgentsInSandbox runs real agent CLIs inside a session's sandbox
// against the fake LLM: the model's shell call runs inside, the file it
// writes reaches the host workspace at the end of the turn, and the host
// network is the operator's explicit grant (the egress proxy is not built
// yet).
func TestAgentsInSandbox(t *testing.T) {
	requireSandbox(t)
	llm, err := fakellm.Start(t.Context(), fakellm.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = llm.Close() })
	shell := llm.ScenarioURL(fakellm.ScenarioShell)
	t.Setenv("ANTHROPIC_BASE_URL", shell)
	t.Setenv("ANTHROPIC_API_KEY", agenttest.FakeKey)
	t.Setenv("OPENAI_BASE_URL", shell+"/v1")
	t.Setenv("OPENAI_API_KEY", agenttest.FakeKey)
	t.Setenv("GOOGLE_GEMINI_BASE_URL", shell)
	t.Setenv("GEMINI_API_KEY", agenttest.FakeKey)
	global := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(global, []byte("version: 1\nfilesystem:\n  read_outside_workspace: true\nnetwork:\n  mode: host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := start(t, agentbox.Options{GlobalPolicy: global})
	c := srv.Client()
	for _, name := range []string{"claude", "pi", "gemini"} {
		t.Run(name, func(t *testing.T) {
			agenttest.RequireInstalled(t, name)
			cwd := t.TempDir()
			s, err := c.CreateSession(t.Context(), client.CreateSession{
				Agent: name, Cwd: cwd, PermissionMode: client.PermissionBypass,
				Policy: json.RawMessage(`{"version":1,"filesystem":{"read_outside_workspace":true},"network":{"mode":"host"},"resources":{"memory":"2Gi","pids":512}}`),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.DeleteSession(context.Background(), s.ID, false) }()
			tc, evs := turn(t, c, s.ID, "make hello.txt")
			if tc.StopReason != event.StopEndTurn {
				t.Fatalf("turn: %+v\n%s", tc, agenttest.Dump(evs))
			}
			if b, err := os.ReadFile(filepath.Join(cwd, "hello.txt")); err != nil || string(b) != "hi" {
				t.Fatalf("hello.txt on the host: %q, %v; events:\n%s", b, err, agenttest.Dump(evs))
			}
			page, err := c.Events(t.Context(), s.ID, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := page.Events[0].Decode()
			if st, ok := p.(*event.SessionStarted); !ok || st.Sandbox == nil || st.Sandbox.Runtime != "process" {
				t.Errorf("session.started %+v, want the process sandbox", p)
			}
		})
	}
}
