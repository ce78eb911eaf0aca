package opencode_test

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agent/opencode"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/daemon/daemontest"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// TestSandboxedSessions runs two opencode sessions with the agent-default
// policy in a real daemon against the fake LLM, which answers only the
// daemon's key (so every model request went through the egress proxy's
// route). Each session gets an `opencode serve` of its own inside its
// sandbox, with a home of its own, reached through relays on stdio: a file
// write is asked for, allowed and lands in the workspace on the host, a
// second turn runs on the same session, and once the sessions are deleted
// none of their processes remains.
func TestSandboxedSessions(t *testing.T) {
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
	agenttest.RequireInstalled(t, opencode.Name)
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
	dataDir, err := os.MkdirTemp("/var/tmp", "agentbox-opencode-sandbox-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) }) // after the daemon's shutdown
	reg := agent.NewRegistry()
	home := filepath.Join(dataDir, "agents", opencode.Name, "home")
	reg.Register(opencode.Name, opencode.New(opencode.Options{
		Binary: install.Binary(opencode.Name), Home: home,
		BaseURL: llm.ScenarioURL("s") + "/v1", APIKey: key, MaxRetries: -1, Logf: t.Logf,
	}))
	c := daemontest.Start(t, dataDir, reg)

	// The process runtime only: these checks read the servers' host
	// processes (/proc/PID/environ), which gVisor does not show as such;
	// the conformance suite runs opencode on gVisor (Sandboxed.Runtimes).
	type row struct{ name, policy string }
	rows := []row{{"process-1", `"agent-default"`}, {"process-2", `"agent-default"`}}
	var ids []string
	for i, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			cwd := filepath.Join(dataDir, "workspaces", "w"+string(rune('a'+i)))
			if err := os.MkdirAll(cwd, 0o700); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			s, err := c.CreateSession(t.Context(), client.CreateSession{
				Agent: opencode.Name, Cwd: cwd, Policy: json.RawMessage(r.policy),
			})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, s.ID)
			t.Logf("session %s created in %s", s.ID, time.Since(start).Round(time.Millisecond))
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
		})
	}
	// One server per session, each with its own home, none shared.
	procs := daemontest.SessionProcs(home, "HOME")
	t.Logf("processes by session: %v", procs)
	for _, id := range ids {
		if len(procs[id]) == 0 {
			t.Errorf("session %s: no opencode server runs with its own home (processes by session: %v)", id, procs)
		}
	}
	if len(procs[""]) > 0 {
		t.Errorf("a shared opencode server runs for sandboxed sessions: pids %v", procs[""])
	}
	for _, id := range ids {
		if err := c.DeleteSession(t.Context(), id, false); err != nil {
			t.Fatal(err)
		}
	}
	if left := daemontest.SessionProcs(home, "HOME"); len(left) > 0 {
		t.Errorf("processes of the deleted sessions remain: %v", left)
	}
	for _, r := range llm.Requests() {
		if r.Status == 401 {
			t.Errorf("the fake LLM refused a request's credentials: %s %s", r.Method, r.Path)
		}
	}
	if len(llm.Requests()) == 0 {
		t.Error("the fake LLM got no request")
	}
}
