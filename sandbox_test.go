package agentbox_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
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
	cwd := t.TempDir()
	srv := start(t, agentbox.Options{GlobalPolicy: globalPolicy(t, cwd)})
	c := srv.Client()
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
// against the fake LLM, with their model traffic through the egress
// proxy: the agent's base URL is its route on the proxy, which adds the
// real API key and forwards to the fake LLM over TLS; the fake LLM refuses
// any other key. The model's shell call runs inside and looks for the key
// in every process's environment and command line and in every file of
// the workspace, the home and /tmp: it must find only the placeholder (and
// the key in the one file the test put there as a control).
// The key is in no event and no audit record either, and the audit log
// names the secret's use.
func TestAgentsInSandbox(t *testing.T) {
	requireSandbox(t)
	realKey := "sk-agentbox-real-" + randomHex(t, 16)
	hexRev := func(s string) string {
		b := []byte(s)
		slices.Reverse(b)
		return hex.EncodeToString(b)
	}
	// The command holds the key reversed and hex-encoded, so nothing it
	// shows in /proc is the key itself.
	scan := `python3 -c '
import glob, os
k = bytes.fromhex("` + hexRev(realKey) + `")[::-1]
def read(p):
    try:
        with open(p, "rb") as f:
            return f.read()
    except OSError:
        return b""
hits = [p for p in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline") if k in read(p)]
for root in {os.getcwd(), os.environ.get("HOME", "/tmp"), "/tmp"}:
    for d, _, files in os.walk(root):
        hits += [os.path.join(d, n) for n in files if k in read(os.path.join(d, n))]
keys = set()
for p in glob.glob("/proc/[0-9]*/environ"):
    for kv in read(p).split(b"\0"):
        if kv.split(b"=")[0] in (b"ANTHROPIC_API_KEY", b"OPENAI_API_KEY", b"GEMINI_API_KEY"):
            keys.add(kv.decode())
print("leaks:", ",".join(sorted(set(hits))) or "none")
print("keys:", ",".join(sorted(keys)))
open("hello.txt", "w").write("hi")
' > scan.txt`
	llm, err := fakellm.Start(t.Context(), fakellm.Options{
		TLS: true, RequireKey: realKey,
		Scenarios: map[string]*fakellm.Scenario{"scan": {Turns: []fakellm.Turn{
			{Calls: []fakellm.Call{{Kind: fakellm.KindShell, Command: scan}}}, {Text: "done"},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = llm.Close() })
	caFile := filepath.Join(t.TempDir(), "fakellm-ca.pem")
	if err := os.WriteFile(caFile, llm.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	base := llm.ScenarioURL("scan")
	t.Setenv("ANTHROPIC_BASE_URL", base)
	t.Setenv("ANTHROPIC_API_KEY", realKey)
	t.Setenv("OPENAI_BASE_URL", base+"/v1")
	t.Setenv("OPENAI_API_KEY", realKey)
	t.Setenv("GOOGLE_GEMINI_BASE_URL", base)
	t.Setenv("GEMINI_API_KEY", realKey)
	dataDir := t.TempDir()
	// The built-in global policy: the egress proxy is the only way out;
	// the sessions' directories are in a workspace root.
	roots := t.TempDir()
	srv := start(t, agentbox.Options{DataDir: dataDir, EgressCAFile: caFile, GlobalPolicy: globalPolicy(t, roots)})
	c := srv.Client()
	for _, tc := range []struct{ name, provider string }{{"claude", "anthropic"}, {"pi", "openai"}, {"gemini", "gemini"}} {
		t.Run(tc.name, func(t *testing.T) {
			agenttest.RequireInstalled(t, tc.name)
			cwd, err := os.MkdirTemp(roots, tc.name+"-")
			if err != nil {
				t.Fatal(err)
			}
			// The control: a file that does hold the key, which the scan
			// must find (and nothing else).
			if err := os.WriteFile(filepath.Join(cwd, "control.txt"), []byte(realKey), 0o600); err != nil {
				t.Fatal(err)
			}
			before := len(llm.Requests())
			s, err := c.CreateSession(t.Context(), client.CreateSession{
				Agent: tc.name, Cwd: cwd, PermissionMode: client.PermissionBypass,
				Policy: json.RawMessage(`{"version":1,"filesystem":{"read_outside_workspace":true},"resources":{"memory":"2Gi","pids":512}}`),
			})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.DeleteSession(context.Background(), s.ID, false) }()
			done, evs := turn(t, c, s.ID, "make hello.txt")
			if done.StopReason != event.StopEndTurn {
				t.Fatalf("turn: %+v\n%s", done, agenttest.Dump(evs))
			}
			if b, err := os.ReadFile(filepath.Join(cwd, "hello.txt")); err != nil || string(b) != "hi" {
				t.Fatalf("hello.txt on the host: %q, %v; events:\n%s", b, err, agenttest.Dump(evs))
			}
			out, err := os.ReadFile(filepath.Join(cwd, "scan.txt"))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the scan inside the sandbox:\n%s", out)
			placeholder := "agentbox-placeholder-" + tc.provider + "-api-key"
			if !strings.Contains(string(out), "leaks: "+filepath.Join(cwd, "control.txt")+"\n") || !strings.Contains(string(out), "API_KEY="+placeholder) {
				t.Errorf("inside the sandbox:\n%s\nwant the key found only in the control file, and the placeholder %s in the agent's environment", out, placeholder)
			}
			// The fake LLM saw only the real key, injected by the proxy.
			reqs := llm.Requests()[before:]
			want := sha256.Sum256([]byte(realKey))
			models := 0
			for _, r := range reqs {
				if r.Status == 401 {
					t.Errorf("the fake LLM refused a request's key: %s %s", r.Method, r.Path)
				}
				if r.API != fakellm.APIOther && r.API != fakellm.APIModels {
					models++
					if r.KeySHA256 != hex.EncodeToString(want[:]) {
						t.Errorf("%s %s carried another key than the real one", r.Method, r.Path)
					}
				}
			}
			if models == 0 || llm.KeyMismatches() != 0 {
				t.Errorf("%d model requests, %d key mismatches; want some, and none", models, llm.KeyMismatches())
			}
			page, err := c.Events(t.Context(), s.ID, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			all, _ := json.Marshal(page.Events)
			if strings.Contains(string(all), realKey) {
				t.Error("the API key is in the session's events")
			}
			p, _ := page.Events[0].Decode()
			st, ok := p.(*event.SessionStarted)
			if !ok || st.Sandbox == nil || st.Sandbox.Runtime != "process" || !slices.ContainsFunc(st.Sandbox.Mechanisms, func(m string) bool { return strings.HasPrefix(m, "egress-proxy") }) {
				t.Errorf("session.started %+v, want the process sandbox with its egress proxy", p)
			}
			aud, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(aud), realKey) {
				t.Error("the API key is in the audit log")
			}
			if !strings.Contains(string(aud), `"type":"secret"`) || !strings.Contains(string(aud), `"secret":"`+tc.provider+`-api-key"`) {
				t.Errorf("the audit log does not record the use of the %s key:\n%s", tc.provider, aud)
			}
		})
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
