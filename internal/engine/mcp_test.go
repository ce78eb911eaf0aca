package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// TestCreateRefusesMCPForAgentWithout: MCP servers for an agent without
// the mcp capability are refused, never dropped; the session is not made.
func TestCreateRefusesMCPForAgentWithout(t *testing.T) {
	m := newManager(t, openStore(t, t.TempDir()), time.Minute)
	_, err := m.Create(t.Context(), engine.CreateParams{Agent: "test", MCPServers: []agent.MCPServer{{Name: "docs", Command: "/bin/sh"}}})
	if !errors.Is(err, engine.ErrMCPUnsupported) {
		t.Fatalf("err %v, want ErrMCPUnsupported", err)
	}
	if list, _ := m.List(t.Context(), engine.ListOptions{}); len(list) != 0 {
		t.Errorf("%d sessions made", len(list))
	}
}

// TestResumeMCPServers: a session's MCP servers are stored without their
// env and header values; a stopped session resumes with the servers kept
// in memory; after a restart, a resume without them is refused with an
// MCPRequiredError naming each value, one with other servers is invalid,
// and one with the servers again starts the agent with them. A session
// whose servers have no values resumes from what is stored.
func TestResumeMCPServers(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	ta := &testAgent{exit: make(chan struct{})}
	reg := agent.NewRegistry()
	reg.Register("mcp", capsAgent{testAgent: ta, caps: agent.Capabilities{Resume: true, MCP: true}})
	const secret = "mcp-secret-value"
	docs := agent.MCPServer{Name: "docs", Command: "/bin/sh", Args: []string{"-c", "cat"}, Env: map[string]string{"TOKEN": secret}}
	remote := agent.MCPServer{Name: "remote", URL: "https://mcp.example/v1", Headers: map[string]string{"Authorization": "Bearer " + secret}}
	plainSrv := agent.MCPServer{Name: "plain", Command: "/bin/sh"}
	old := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir(), IdleTimeout: 50 * time.Millisecond})
	ctx := t.Context()
	withSecrets, err := old.Create(ctx, engine.CreateParams{Agent: "mcp", MCPServers: []agent.MCPServer{docs, remote}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := old.Create(ctx, engine.CreateParams{Agent: "mcp", MCPServers: []agent.MCPServer{plainSrv}})
	if err != nil {
		t.Fatal(err)
	}
	last := func() []agent.MCPServer {
		ta.mu.Lock()
		defer ta.mu.Unlock()
		return ta.mcps[len(ta.mcps)-1]
	}
	if got := last(); len(got) != 1 || got[0].Command != "/bin/sh" {
		t.Fatalf("the agent got %+v", got)
	}
	waitFor(t, old, withSecrets.ID, 0, event.TypeSessionEnded)
	waitFor(t, old, plain.ID, 0, event.TypeSessionEnded)
	// The idle-stopped session resumes with the servers kept in memory.
	if _, err := old.Resume(ctx, withSecrets.ID, nil); err != nil {
		t.Fatal(err)
	}
	if got := last(); len(got) != 2 || got[0].Env["TOKEN"] != secret || got[1].Headers["Authorization"] != "Bearer "+secret {
		t.Fatalf("after an idle stop the agent got %+v", got)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := old.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir()})
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	if _, err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetSession(ctx, withSecrets.ID)
	if err != nil || len(got.MCPServers) == 0 || strings.Contains(string(got.MCPServers), secret) {
		t.Fatalf("stored MCP servers %s, %v", got.MCPServers, err)
	}
	_, err = m.Resume(ctx, withSecrets.ID, nil)
	var me *engine.MCPRequiredError
	if !errors.As(err, &me) || !slices.Equal(me.Names, []string{"docs.env.TOKEN", "remote.headers.Authorization"}) || strings.Contains(err.Error(), secret) {
		t.Fatalf("resume without the servers: %v", err)
	}
	if _, err := m.Resume(ctx, withSecrets.ID, nil, docs); !errors.Is(err, engine.ErrInvalid) {
		t.Errorf("resume with some of the servers: %v, want ErrInvalid", err)
	}
	if _, err := m.Resume(ctx, withSecrets.ID, nil, docs, remote); err != nil {
		t.Fatalf("resume with the servers: %v", err)
	}
	if got := last(); len(got) != 2 || got[0].Env["TOKEN"] != secret {
		t.Errorf("after the resume the agent got %+v", got)
	}
	if _, err := m.Resume(ctx, plain.ID, nil); err != nil {
		t.Fatalf("resume of a session whose servers have no values: %v", err)
	}
	if got := last(); len(got) != 1 || got[0].Name != "plain" || got[0].Command != "/bin/sh" {
		t.Errorf("the agent got %+v", got)
	}
}
