package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/acp"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/agent/pi"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/ids"
	"github.com/agentbox/agentbox/internal/store"
)

// TestPurgeRemovesAgentState: a sandboxed session's home (the real
// adapters' layout) goes when the session is purged, not when it only
// ends (it can be resumed), nor when the operator keeps homes; other
// sessions' homes stay.
func TestPurgeRemovesAgentState(t *testing.T) {
	data := t.TempDir()
	reg := func() *agent.Registry {
		r := agent.NewRegistry()
		r.Register(claude.Name, claude.New(claude.Options{HomeDir: filepath.Join(data, "agents", "claude", "home")}))
		r.Register(pi.Name, pi.New(pi.Options{Home: filepath.Join(data, "agents", "pi")}))
		for name, a := range acp.Agents(acp.Config{DataDir: data}) {
			if name == acp.NameGemini {
				r.Register(name, a)
			}
		}
		return r
	}
	homeOf := map[string]func(id string) string{
		claude.Name:    func(id string) string { return filepath.Join(data, "agents", "claude", "home", "sessions", id) },
		pi.Name:        func(id string) string { return filepath.Join(data, "agents", "pi", "sandboxed", id) },
		acp.NameGemini: func(id string) string { return filepath.Join(data, "agents", acp.NameGemini, "sessions", id) },
	}
	for _, keep := range []bool{false, true} {
		st := openStore(t, t.TempDir())
		m := engine.New(engine.Config{Store: st, Agents: reg(), WorkspaceDir: t.TempDir(), KeepAgentState: keep})
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = m.Shutdown(ctx)
		})
		for name, home := range homeOf {
			purged, other := stored(t, st, name), stored(t, st, name)
			for _, id := range []string{purged, other} {
				if err := os.MkdirAll(filepath.Join(home(id), ".state"), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(home(id), ".state", "transcript.jsonl"), []byte("{}\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Delete(t.Context(), purged, false); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(home(purged)); err != nil {
				t.Errorf("%s: the home of an ended session (it can be resumed) is gone: %v", name, err)
			}
			if err := m.Delete(t.Context(), purged, true); err != nil {
				t.Fatal(err)
			}
			_, err := os.Stat(home(purged))
			if gone := os.IsNotExist(err); gone == keep {
				t.Errorf("%s (keep homes: %v): after the purge the home exists: %v", name, keep, !gone)
			}
			if _, err := os.Stat(filepath.Join(home(other), ".state", "transcript.jsonl")); err != nil {
				t.Errorf("%s: another session's home was touched: %v", name, err)
			}
		}
	}
}

// stored adds an ended session of agent to st.
func stored(t *testing.T, st store.Store, agentName string) string {
	t.Helper()
	now := time.Now().UTC()
	s := store.Session{ID: ids.New(ids.Session), Agent: agentName, Cwd: t.TempDir(), Status: store.StatusEnded, CreatedAt: now, UpdatedAt: now, EndedAt: &now}
	if err := st.CreateSession(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return s.ID
}
