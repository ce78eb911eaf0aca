package agent

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzValidateMCPServers: whatever a client sends as mcp_servers, what
// ValidateMCPServers accepts keeps its invariants: allowlisted unique
// names, a known transport, an absolute clean command for stdio, an
// http(s) URL otherwise, bounded counts, no NUL in any value and no line
// break in a header.
func FuzzValidateMCPServers(f *testing.F) {
	f.Add(`[{"name":"docs","command":"/bin/sh","args":["-c","true"],"env":{"T":"x"}}]`)
	f.Add(`[{"name":"r","url":"https://h/v1","headers":{"Authorization":"Bearer x"}}]`)
	f.Add(`[{"name":"e","type":"sse","url":"http://127.0.0.1:1/sse"}]`)
	f.Add(`[{"name":"a","command":"sh"},{"name":"A","command":"sh"}]`)
	f.Add(`[{"name":"../x","command":"/bin/sh"}]`)
	f.Fuzz(func(t *testing.T, in string) {
		var servers []MCPServer
		if json.Unmarshal([]byte(in), &servers) != nil {
			return
		}
		out, err := ValidateMCPServers(servers)
		if err != nil {
			return
		}
		if len(out) > MaxMCPServers || len(out) != len(servers) {
			t.Fatalf("%d servers accepted of %d", len(out), len(servers))
		}
		seen := map[string]bool{}
		for _, s := range out {
			if !mcpName().MatchString(s.Name) || seen[strings.ToLower(s.Name)] {
				t.Fatalf("name %q accepted", s.Name)
			}
			seen[strings.ToLower(s.Name)] = true
			switch s.Type {
			case MCPStdio:
				if !filepath.IsAbs(s.Command) || filepath.Clean(s.Command) != s.Command || s.URL != "" || len(s.Headers) > 0 {
					t.Fatalf("stdio server %+v accepted", s)
				}
			case MCPHTTP, MCPSSE:
				if u := strings.ToLower(s.URL); !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") || s.Command != "" || len(s.Env) > 0 {
					t.Fatalf("%s server %+v accepted", s.Type, s)
				}
			default:
				t.Fatalf("type %q accepted", s.Type)
			}
			for _, v := range append(append([]string{s.Command}, s.Args...), values(s.Env)...) {
				if strings.ContainsRune(v, 0) {
					t.Fatalf("NUL accepted in %+v", s)
				}
			}
			for _, v := range values(s.Headers) {
				if strings.ContainsAny(v, "\x00\r\n") {
					t.Fatalf("header value %q accepted", v)
				}
			}
		}
	})
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
