package claude_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/daemon/daemontest"
)

// TestSandboxedHTTPMCPServerGoesThroughEgress: an http MCP server is
// network like any other for a sandboxed agent: a URL the session's policy
// does not allow (here a host loopback port, which the sandbox's own
// network namespace does not reach and the egress proxy does not route)
// gets no request, and the agent reports the server as failed.
func TestSandboxedHTTPMCPServerGoesThroughEgress(t *testing.T) {
	agenttest.RequireInstalled(t, claude.Name)
	h := &daemontest.Host{}
	if why := h.Probe(t.Context()); why != "" {
		t.Skipf("this host cannot build sandboxes: %s", why)
	}
	var hits atomic.Int32
	mcp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(mcp.Close)
	st := agenttest.NewStack(t, agenttest.StackOptions{
		Name: claude.Name,
		Host: h,
		New: func(t testing.TB, llm agenttest.LLM) agent.Adapter {
			return claude.New(claude.Options{Binary: install.Binary(claude.Name), BaseURL: llm.URL(""), APIKey: llm.Key(), HomeDir: t.TempDir()})
		},
	})
	ses, _ := st.CreateWith(t, client.CreateSession{PermissionMode: "bypass", MCPServers: []client.MCPServer{
		{Name: "remote", URL: mcp.URL + "/mcp"},
	}})
	_, evs := daemontest.Turn(t, st.C, ses.ID, "hello", true)
	var init string
	for _, e := range evs {
		if strings.Contains(string(e.Data), `"system/init"`) {
			init = string(e.Data)
		}
	}
	if !strings.Contains(init, `"name":"remote","status":"failed"`) {
		t.Errorf("the agent reached the MCP server, or did not say: %s", init)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the MCP server outside the policy got %d requests", n)
	}
}
