package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/credential"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/store"
)

var (
	// ErrMCPUnsupported: MCP servers for an agent without the mcp
	// capability; they are refused, never dropped.
	ErrMCPUnsupported = errkind.New(errkind.Invalid, "the agent cannot take MCP servers")
	// ErrMCPRequired: a resume needs the env or header values of the
	// session's MCP servers again; see MCPRequiredError.
	ErrMCPRequired = errkind.New(errkind.Invalid, "the session needs its MCP servers again")
)

// MCPRequiredError is the error (wrapping ErrMCPRequired) of a resume, or
// of a message to a stopped session, whose MCP servers had env or header
// values the daemon no longer has (it never stores them).
type MCPRequiredError struct {
	ID string
	// Names are the values to send, as SERVER.env.NAME or
	// SERVER.headers.NAME, sorted.
	Names []string
}

func (e *MCPRequiredError) Error() string {
	return fmt.Sprintf("session %s was created with MCP servers whose values %s the daemon never stores: "+
		"resume it with its mcp_servers again, values included (POST /v1/sessions/%s/resume), then send messages to it",
		e.ID, strings.Join(e.Names, ", "), e.ID)
}

func (e *MCPRequiredError) Unwrap() error { return ErrMCPRequired }

// checkMCP is the one check of a request's MCP servers for agent a:
// valid (agent.ValidateMCPServers, an ErrInvalid) and an agent that takes
// them (ErrMCPUnsupported naming it).
func checkMCP(name string, a agent.Adapter, info agent.Info, in []agent.MCPServer) ([]agent.MCPServer, error) {
	if len(in) == 0 {
		return nil, nil
	}
	if !info.Capabilities.MCP {
		return nil, fmt.Errorf("%w: agent %s does not take MCP servers (capability mcp in GET /v1/agents)", ErrMCPUnsupported, name)
	}
	out, err := agent.ValidateMCPServers(in)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if c, ok := a.(agent.MCPChecker); ok {
		if err := c.CheckMCP(out); err != nil {
			return nil, fmt.Errorf("%w: agent %s: %w", ErrMCPUnsupported, name, err)
		}
	}
	return out, nil
}

// storedMCP is what the session keeps of its MCP servers.
func storedMCP(servers []agent.MCPServer) (json.RawMessage, error) {
	if len(servers) == 0 {
		return nil, nil
	}
	return json.Marshal(agent.Redacted(servers))
}

// resumeMCP is the MCP servers a resume of s starts the agent with: those
// the request gives (the names must be the ones given at create), else
// those the daemon kept in memory when it stopped the idle agent, else the
// stored ones, when none of them had a secret value.
func resumeMCP(s store.Session, a agent.Adapter, info agent.Info, given, parked []agent.MCPServer) ([]agent.MCPServer, error) {
	var stored []agent.MCPServer
	if len(s.MCPServers) > 0 {
		if err := json.Unmarshal(s.MCPServers, &stored); err != nil {
			return nil, fmt.Errorf("session %s mcp_servers: %w", s.ID, err)
		}
	}
	names := func(l []agent.MCPServer) []string {
		out := make([]string, len(l))
		for i, x := range l {
			out[i] = x.Name
		}
		slices.Sort(out)
		return out
	}
	switch {
	case len(given) > 0:
		out, err := checkMCP(s.Agent, a, info, given)
		if err != nil {
			return nil, err
		}
		if !slices.Equal(names(out), names(stored)) {
			return nil, fmt.Errorf("%w: mcp_servers %v are not the session's (%v)", ErrInvalid, names(out), names(stored))
		}
		return out, nil
	case parked != nil:
		return parked, nil
	}
	if secrets := agent.MCPSecrets(stored); len(secrets) > 0 {
		return nil, &MCPRequiredError{ID: s.ID, Names: secrets}
	}
	return stored, nil
}

// credentialHeaders are headers that carry credentials whatever their
// value looks like.
var credentialHeaders = map[string]bool{"authorization": true, "proxy-authorization": true, "cookie": true}

// checkMCPCredentials is checkEnv for a sandboxed session's MCP servers (policy
// is not empty), on create and on resume: the agent in the sandbox holds
// its MCP servers' configuration, so no credential may be in their env or
// headers either. A credential of an http server belongs in a daemon
// secret bound to the server's host, which the egress proxy adds to the
// requests for it. The error names every refused variable or header and
// the rule it broke, never a value.
func checkMCPCredentials(policy json.RawMessage, servers []agent.MCPServer) error {
	if len(policy) == 0 {
		return nil
	}
	var bad []string
	for i, s := range servers {
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			if why := credential.Check(k, s.Env[k]); why != "" {
				bad = append(bad, fmt.Sprintf("mcp_servers[%d] (%s) env %s (%s)", i, s.Name, k, why))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
			why := string(credential.Check(k, s.Headers[k]))
			if why == "" && credentialHeaders[strings.ToLower(k)] {
				why = "a credential header"
			}
			if why != "" {
				bad = append(bad, fmt.Sprintf("mcp_servers[%d] (%s) header %s (%s)", i, s.Name, k, why))
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s: the session's agent runs in a sandbox, which no credential may enter, and it holds its MCP servers' "+
		"configuration. For an http MCP server, store the credential as a daemon secret bound to the server's host and header "+
		"(PUT /v1/secrets/NAME with value, host and header) and name it in the policy's env.secrets: the egress proxy adds it "+
		"to the requests for that host only", ErrCredentialInEnv, strings.Join(bad, ", "))
}
