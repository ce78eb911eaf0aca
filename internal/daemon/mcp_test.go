package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
)

// mcpMock is the resumable mock declaring the mcp capability: the engine's
// and the API's handling of MCP servers, whatever an agent does with them.
type mcpMock struct{ resumable }

func (m mcpMock) Info(ctx context.Context) agent.Info {
	in := m.resumable.Info(ctx)
	in.Capabilities.MCP = true
	return in
}

// TestMCPServersThroughTheAPI: MCP servers are validated (422
// invalid-mcp-server), refused for an agent without the mcp capability
// (422 mcp-unsupported naming it), and their values are in neither the
// daemon's database nor its log; after a restart a resume without them
// answers 422 mcp-required naming each value, and works with them.
func TestMCPServersThroughTheAPI(t *testing.T) {
	dataDir := t.TempDir()
	logs := &syncBuffer{}
	run := func() (*client.Client, func()) {
		reg := agent.NewRegistry()
		reg.Register("mock", resumable{mock.New()})
		reg.Register("mcp", mcpMock{resumable{mock.New()}})
		d, err := New(t.Context(), Config{Listen: "127.0.0.1:0", DataDir: dataDir, Agents: reg,
			Log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Serve(ctx) }()
		c, err := client.New(d.URL(), client.WithToken(d.Token()))
		if err != nil {
			t.Fatal(err)
		}
		stopped := false
		stop := func() {
			if !stopped {
				stopped = true
				cancel()
				if err := <-done; err != nil {
					t.Errorf("daemon: %v", err)
				}
			}
		}
		t.Cleanup(stop)
		return c, stop
	}
	const secret = "mcp-secret-value"
	servers := []client.MCPServer{
		{Name: "docs", Command: "/bin/sh", Args: []string{"-c", "cat"}, Env: map[string]string{"DOCS_TOKEN": secret + "e"}},
		{Name: "remote", URL: "https://mcp.example/v1", Headers: map[string]string{"Authorization": "Bearer " + secret + "h"}},
	}
	problem := func(err error, typ string) *client.APIError {
		t.Helper()
		var apiErr *client.APIError
		if !asAPIError(err, &apiErr) || apiErr.Status != 422 || apiErr.Type != typ {
			t.Fatalf("%v, want 422 %s", err, typ)
		}
		return apiErr
	}
	c, stop := run()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", MCPServers: servers})
	if p := problem(err, client.ProblemMCPUnsupported); !strings.Contains(p.Detail, "agent mock") {
		t.Errorf("detail %q does not name the agent", p.Detail)
	}
	_, err = c.CreateSession(ctx, client.CreateSession{Agent: "mcp", MCPServers: []client.MCPServer{{Name: "a", Command: "/bin/sh"}, {Name: "a", Command: "/bin/sh"}}})
	if p := problem(err, client.ProblemInvalidMCPServer); !strings.Contains(p.Detail, "mcp_servers[1]") {
		t.Errorf("detail %q does not name the server", p.Detail)
	}
	ses, err := c.CreateSession(ctx, client.CreateSession{Agent: "mcp", MCPServers: servers})
	if err != nil {
		t.Fatal(err)
	}
	stop()

	c, _ = run()
	_, err = c.Resume(ctx, ses.ID, client.ResumeSession{})
	if p := problem(err, client.ProblemMCPRequired); !strings.Contains(p.Detail, "docs.env.DOCS_TOKEN, remote.headers.Authorization") {
		t.Errorf("detail %q does not name the values", p.Detail)
	}
	if _, err := c.Resume(ctx, ses.ID, client.ResumeSession{MCPServers: servers}); err != nil {
		t.Fatalf("resume with the servers: %v", err)
	}

	var disk []byte
	files, _ := filepath.Glob(filepath.Join(dataDir, "*"))
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			disk = append(disk, b...)
		}
	}
	if !bytes.Contains(disk, []byte("DOCS_TOKEN")) {
		t.Error("the servers' definitions are not in the data directory (is it the right one?)")
	}
	if bytes.Contains(disk, []byte(secret)) {
		t.Error("an MCP server's value is in the daemon's data directory")
	}
	if bytes.Contains(logs.Bytes(), []byte(secret)) {
		t.Error("an MCP server's value is in the daemon's log")
	}
}
