package claude

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/agentbox/agentbox/internal/agent"
)

// mcpConfig is the session's MCP servers in the CLI's own form: the JSON
// of --mcp-config and the environment
// that holds their env and header values. The JSON never holds a value:
// it names a variable of the CLI's environment ("${AGENTBOX_MCP_…}",
// which the CLI expands), so that no value is on a command line other
// processes of the host can read.
//
// --strict-mcp-config is always given, with or without servers: no other
// MCP configuration applies. The workspace is the agent's (a hostile
// repository's): its .mcp.json with project settings that enable its
// servers would otherwise start any command it names, asking no one.
func mcpConfig(servers []agent.MCPServer) (args []string, env map[string]string, err error) {
	if len(servers) == 0 {
		return []string{"--strict-mcp-config"}, nil, nil
	}
	env = map[string]string{}
	ref := func(i int, kind, k, v string) string {
		name := fmt.Sprintf("AGENTBOX_MCP_%d_%s_%d", i, kind, len(env))
		env[name] = v
		return "${" + name + "}"
	}
	conf := map[string]any{}
	for i, s := range servers {
		switch s.Type {
		case agent.MCPStdio:
			e := map[string]string{}
			for _, k := range slices.Sorted(maps.Keys(s.Env)) {
				e[k] = ref(i, "ENV", k, s.Env[k])
			}
			conf[s.Name] = map[string]any{"type": "stdio", "command": s.Command, "args": nonNil(s.Args), "env": e}
		case agent.MCPHTTP, agent.MCPSSE:
			h := map[string]string{}
			for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
				h[k] = ref(i, "HDR", k, s.Headers[k])
			}
			conf[s.Name] = map[string]any{"type": s.Type, "url": s.URL, "headers": h}
		default:
			return nil, nil, fmt.Errorf("claude: MCP server %s: unknown type %q", s.Name, s.Type)
		}
	}
	b, err := json.Marshal(map[string]any{"mcpServers": conf})
	if err != nil {
		return nil, nil, err
	}
	return []string{"--mcp-config", string(b), "--strict-mcp-config"}, env, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
