package codex_test

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/codex"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/daemon/daemontest"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// TestSandboxedSessions runs two codex sessions with the agent-default
// policy in a real daemon against the fake LLM, which answers only the
// daemon's key (so every model request went through the egress proxy's
// route). Each session gets an app-server of its own, inside its sandbox,
// with a CODEX_HOME of its own: a file change is asked for, allowed and
// lands in the workspace, a second turn runs on the same thread, and once
// the sessions are deleted none of their processes remains.
func TestSandboxedSessions(t *testing.T) {
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
	in := agenttest.RequireInstalled(t, codex.Name)
	key := "sk-proj-" + rand.Text()
	llm, err := fakellm.Start(t.Context(), fakellm.Options{
		Credentials: []fakellm.Credential{{Header: "Authorization", Value: "Bearer " + key}},
		Scenarios: map[string]*fakellm.Scenario{"s": {Turns: []fakellm.Turn{
			{Calls: []fakellm.Call{{Kind: fakellm.KindWrite, Path: "hello.txt", Content: "hi\n"}}}, {Text: "written"},
			{Text: "second turn"},
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = llm.Close() })
	// Outside /tmp, where Codex cannot make its sandbox helper.
	dataDir, err := os.MkdirTemp("/var/tmp", "agentbox-codex-sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) }) // after the daemon's shutdown
	reg := agent.NewRegistry()
	home := filepath.Join(dataDir, "agents", codex.Name, "home")
	reg.Register(codex.Name, codex.New(codex.Options{
		Binary: func() (string, string, error) { return in.Binary, in.Version, nil },
		Home:   home, BaseURL: llm.ScenarioURL("s") + "/v1", APIKey: key, Model: "gpt-5.5",
	}))
	c := daemontest.Start(t, dataDir, reg)

	var ids []string
	for i := range 2 {
		cwd := filepath.Join(dataDir, "workspaces", "w"+string(rune('a'+i)))
		if err := os.MkdirAll(cwd, 0o700); err != nil {
			t.Fatal(err)
		}
		s, err := c.CreateSession(t.Context(), client.CreateSession{
			Agent: codex.Name, Cwd: cwd, Policy: json.RawMessage(`"agent-default"`),
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
		done, evs := daemontest.Turn(t, c, s.ID, "write hello.txt", true)
		if done.StopReason != event.StopEndTurn {
			t.Fatalf("turn 1: %+v\n%s", done, agenttest.Dump(evs))
		}
		if b, err := os.ReadFile(filepath.Join(s.Cwd, "hello.txt")); err != nil || string(b) != "hi\n" {
			t.Fatalf("hello.txt on the host: %q, %v\n%s", b, err, agenttest.Dump(evs))
		}
		if done, evs := daemontest.Turn(t, c, s.ID, "again", false); done.StopReason != event.StopEndTurn {
			t.Fatalf("turn 2: %+v\n%s", done, agenttest.Dump(evs))
		}
	}
	// One server per session, each with its own home.
	procs := daemontest.SessionProcs(home, "CODEX_HOME")
	t.Logf("processes by session: %v", procs)
	for _, id := range ids {
		if len(procs[id]) == 0 {
			t.Errorf("session %s: no app-server runs with its own CODEX_HOME (servers by session: %v)", id, procs)
		}
	}
	if len(procs[""]) > 0 {
		t.Errorf("a shared app-server runs for sandboxed sessions: pids %v", procs[""])
	}
	for _, id := range ids {
		if err := c.DeleteSession(t.Context(), id, false); err != nil {
			t.Fatal(err)
		}
	}
	if left := daemontest.SessionProcs(home, "CODEX_HOME"); len(left) > 0 {
		t.Errorf("processes of the deleted sessions remain: %v", left)
	}
	for _, r := range llm.Requests() {
		if r.Status == 401 {
			t.Errorf("the fake LLM refused a request's credentials: %s %s", r.Method, r.Path)
		}
	}
}
