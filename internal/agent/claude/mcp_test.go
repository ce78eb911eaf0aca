package claude

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
)

// TestMCPConfigGolden: the CLI's form of MCP servers (--mcp-config JSON,
// --strict-mcp-config), whose values are only in the environment.
func TestMCPConfigGolden(t *testing.T) {
	args, env, err := mcpConfig([]agent.MCPServer{
		{Name: "docs", Type: agent.MCPStdio, Command: "/usr/bin/docs-mcp", Args: []string{"--root", "/w"}, Env: map[string]string{"TOKEN": "s3cret-env"}},
		{Name: "remote", Type: agent.MCPHTTP, URL: "https://mcp.example/v1", Headers: map[string]string{"Authorization": "Bearer s3cret-hdr"}},
		{Name: "events", Type: agent.MCPSSE, URL: "http://127.0.0.1:9/sse"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var pretty strings.Builder
	var conf any
	if err := json.Unmarshal([]byte(args[1]), &conf); err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	fmt.Fprintf(&pretty, "args: %s <json> %s\n%s\nenv:\n", args[0], strings.Join(args[2:], " "), b)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&pretty, "  %s=%s\n", k, env[k])
	}
	if strings.Contains(strings.Join(args, " "), "s3cret") {
		t.Errorf("a secret value is on the command line: %q", args)
	}
	agenttest.Golden(t, "testdata/mcp-config.golden", []byte(pretty.String()), *update)
	// Without servers no other MCP configuration applies either.
	if args, env, err := mcpConfig(nil); err != nil || strings.Join(args, " ") != "--strict-mcp-config" || env != nil {
		t.Errorf("without servers: %q, %v, %v", args, env, err)
	}
}
