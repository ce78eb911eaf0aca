package opencode_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/agenttest"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agent/opencode"
	"github.com/agentbox/agentbox/internal/daemon"
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
	c := startDaemon(t, dataDir, reg)

	// gVisor is not among them: on the development host no process of a
	// gVisor session's agent started (runsc exec exited 128 before
	// running even /bin/sh), whatever the agent.
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
			done, evs := turn(t, c, s.ID, "write hello.txt", true)
			if done.StopReason != event.StopEndTurn {
				t.Fatalf("turn 1: %+v\n%s", done, agenttest.Dump(evs))
			}
			if b, err := os.ReadFile(filepath.Join(s.Cwd, "hello.txt")); err != nil || string(b) != "hi\n" {
				t.Fatalf("hello.txt on the host: %q, %v\n%s", b, err, agenttest.Dump(evs))
			}
			if done, evs := turn(t, c, s.ID, "again", false); done.StopReason != event.StopEndTurn {
				t.Fatalf("turn 2: %+v\n%s", done, agenttest.Dump(evs))
			}
		})
	}
	// One server per session, each with its own home, none shared.
	procs := opencodeProcs(t, home)
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
	if left := opencodeProcs(t, home); len(left) > 0 {
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

// opencodeProcs returns the pids of the processes (servers and relays)
// whose HOME is below home, by the session whose home it is ("" for the
// shared home).
func opencodeProcs(t *testing.T, home string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range envs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			v, ok := strings.CutPrefix(string(kv), "HOME=")
			if !ok {
				continue
			}
			rel, err := filepath.Rel(home, v)
			if err != nil || !filepath.IsLocal(rel) {
				continue
			}
			id := ""
			if r, ok := strings.CutPrefix(rel, "sandboxed/"); ok {
				id, _, _ = strings.Cut(r, "/")
			}
			out[id] = append(out[id], filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}

// startDaemon runs a daemon with the agents of reg, its built-in global
// policy and sandboxes, until t ends.
func startDaemon(t *testing.T, dataDir string, reg *agent.Registry) *client.Client {
	t.Helper()
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", DataDir: dataDir, InsecureNoAuth: true, Agents: reg,
		Log: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	c, err := client.New(d.URL())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// turn sends text and follows the turn to its end, allowing every
// permission request when allow is set.
func turn(t *testing.T, c *client.Client, sid, text string, allow bool) (event.TurnCompleted, []event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
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
	tc, err := c.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error {
		evs = append(evs, e)
		if e.Type == event.TypePermissionRequested {
			if !allow {
				t.Errorf("unexpected permission request: %s", e.Data)
			}
			var p event.PermissionRequested
			if err := json.Unmarshal(e.Data, &p); err != nil {
				return err
			}
			decision := "allow"
			if !allow {
				decision = "deny"
			}
			if _, err := c.AnswerPermission(context.Background(), sid, p.ID, client.PermissionAnswer{Decision: decision}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, agenttest.Dump(evs))
	}
	return tc, evs
}
