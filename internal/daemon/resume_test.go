package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// resumable is the mock agent declaring that it can resume a session (it
// keeps no conversation, so any native id will do).
type resumable struct{ agent.Adapter }

func (r resumable) Info(ctx context.Context) agent.Info {
	in := r.Adapter.Info(ctx)
	in.Capabilities.Resume = true
	return in
}

// runDaemon starts a daemon on dataDir under the global policy in the
// file globalPolicy and returns its client; stop shuts it down.
func runDaemon(t *testing.T, dataDir, globalPolicy string) (c *client.Client, d *Daemon, stop func()) {
	t.Helper()
	reg := agent.NewRegistry()
	reg.Register("mock", resumable{mock.New()})
	d, err := New(t.Context(), Config{Listen: "127.0.0.1:0", DataDir: dataDir, GlobalPolicy: globalPolicy,
		Agents: reg, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	c, err = client.New(d.URL(), client.WithToken(d.Token()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	}
	t.Cleanup(stop)
	return c, d, stop
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestResumeUnderStricterGlobalPolicy creates sessions under a permissive
// global policy, restarts the daemon with a stricter one and resumes them:
// a session whose policy the new global policy no longer grants is
// refused with a policy problem naming the field; one it still grants is
// resumed with its limits tightened to the new global policy's.
func TestResumeUnderStricterGlobalPolicy(t *testing.T) {
	if pr := process.New(process.Options{}).Probe(t.Context()); !pr.Available {
		t.Skipf("this host cannot build sandboxes: %s", pr.Reason)
	}
	dataDir := t.TempDir()
	const common = "version: 1\nfilesystem: {read_outside_workspace: true}\nenv: {pass: [TERM]}\n"
	permissive := writeFile(t, "permissive.yaml", common+"resources: {memory: 8Gi, pids: 4096}\nnetwork: {mode: proxy, default: ask, allow: [\"*\"]}\n")
	strict := writeFile(t, "strict.yaml", common+"resources: {memory: 1Gi, pids: 4096}\nnetwork: {mode: proxy, default: deny, allow: [\"*.example.com\"]}\n")

	c, _, stop := runDaemon(t, dataDir, permissive)
	create := func(pol string) string {
		s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(pol)})
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	wider := create(`{"version":1,"network":{"allow":["api.github.com","*.example.com"]},"resources":{"memory":"4Gi"}}`)
	narrow := create(`{"version":1,"network":{"allow":["*.example.com"]},"resources":{"memory":"4Gi"}}`)
	asking := create(`{"version":1,"network":{"default":"ask"}}`)
	stop()

	c, d, _ := runDaemon(t, dataDir, strict)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, tc := range []struct{ id, field string }{{wider, "network.allow"}, {asking, "network.default"}} {
		_, err := c.Resume(ctx, tc.id, client.ResumeSession{})
		if !client.HasProblemType(err, client.ProblemPolicy) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("resume %s: %v, want a policy problem naming %s", tc.id, err, tc.field)
		}
		if s, err := c.GetSession(ctx, tc.id); err != nil || s.Status == client.StatusIdle {
			t.Errorf("session %s after a refused resume: %+v, %v", tc.id, s, err)
		}
	}
	if _, err := c.Resume(ctx, narrow, client.ResumeSession{}); err != nil {
		t.Fatalf("resume %s: %v", narrow, err)
	}
	s, err := d.mgr.Get(ctx, narrow)
	if err != nil {
		t.Fatal(err)
	}
	p, err := policy.Parse("stored", s.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if p.Resources.Memory != 1<<30 {
		t.Errorf("resumed session's memory limit %d, want the new global policy's 1Gi", p.Resources.Memory)
	}
}
