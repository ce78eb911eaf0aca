package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateMCPServers(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", MaxMCPValueSize+1)
	many := make([]MCPServer, MaxMCPServers+1)
	for i := range many {
		many[i] = MCPServer{Name: "s" + strings.Repeat("a", i), Command: "/bin/sh"}
	}
	for _, c := range []struct {
		name string
		in   []MCPServer
		bad  string // a fragment of the error; empty: valid
	}{
		{"stdio", []MCPServer{{Name: "docs", Command: "/bin/sh", Args: []string{"-c", "true"}, Env: map[string]string{"TOKEN": "x"}}}, ""},
		{"bare name resolved", []MCPServer{{Name: "docs", Command: "sh"}}, ""},
		{"http", []MCPServer{{Name: "r", URL: "https://mcp.example/v1", Headers: map[string]string{"Authorization": "Bearer x"}}}, ""},
		{"sse", []MCPServer{{Name: "r", Type: MCPSSE, URL: "http://127.0.0.1:1/sse"}}, ""},
		{"too many", many, "at most 16"},
		{"name charset", []MCPServer{{Name: "a.b", Command: "/bin/sh"}}, "name"},
		{"name with slash", []MCPServer{{Name: "../x", Command: "/bin/sh"}}, "name"},
		{"empty name", []MCPServer{{Command: "/bin/sh"}}, "name"},
		{"duplicate", []MCPServer{{Name: "a", Command: "/bin/sh"}, {Name: "A", Command: "/bin/sh"}}, "twice"},
		{"relative command", []MCPServer{{Name: "a", Command: "./x"}}, "neither absolute"},
		{"missing command", []MCPServer{{Name: "a", Command: "/nonexistent/mcp"}}, "does not exist"},
		{"unresolvable", []MCPServer{{Name: "a", Command: "no-such-mcp-server-xyz"}}, "PATH"},
		{"not executable", []MCPServer{{Name: "a", Command: plain}}, "not an executable"},
		{"directory", []MCPServer{{Name: "a", Command: "/bin"}}, "not an executable"},
		{"no command", []MCPServer{{Name: "a"}}, "missing"},
		{"env name", []MCPServer{{Name: "a", Command: "/bin/sh", Env: map[string]string{"A=B": "x"}}}, "env name"},
		{"env NUL", []MCPServer{{Name: "a", Command: "/bin/sh", Env: map[string]string{"A": "x\x00"}}}, "NUL"},
		{"arg too long", []MCPServer{{Name: "a", Command: "/bin/sh", Args: []string{long}}}, "at most"},
		{"url scheme", []MCPServer{{Name: "a", URL: "file:///etc/passwd"}}, "scheme"},
		{"url user", []MCPServer{{Name: "a", URL: "https://u:p@h/"}}, "user info"},
		{"header CRLF", []MCPServer{{Name: "a", URL: "https://h/", Headers: map[string]string{"X": "a\r\nB: c"}}}, "header X"},
		{"header name", []MCPServer{{Name: "a", URL: "https://h/", Headers: map[string]string{"X Y": "a"}}}, "header name"},
		{"mixed", []MCPServer{{Name: "a", Command: "/bin/sh", URL: "https://h/"}}, "not command"},
		{"stdio with type http", []MCPServer{{Name: "a", Type: MCPHTTP, Command: "/bin/sh"}}, "not command"},
		{"unknown type", []MCPServer{{Name: "a", Type: "ws", URL: "https://h/"}}, "type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := ValidateMCPServers(c.in)
			if c.bad == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				for _, s := range out {
					if s.Type == MCPStdio && !strings.HasPrefix(s.Command, "/") {
						t.Errorf("command %q not absolute", s.Command)
					}
				}
				return
			}
			if !errors.Is(err, ErrInvalidMCP) || !strings.Contains(err.Error(), c.bad) {
				t.Fatalf("error %v, want one with %q", err, c.bad)
			}
		})
	}
}

func TestRedactedKeepsNoValue(t *testing.T) {
	in := []MCPServer{{Name: "a", Type: MCPStdio, Command: "/bin/sh", Env: map[string]string{"T": "secret"}},
		{Name: "b", Type: MCPHTTP, URL: "https://h/", Headers: map[string]string{"Authorization": "secret"}}}
	r := Redacted(in)
	if r[0].Env["T"] != "" || r[1].Headers["Authorization"] != "" || in[0].Env["T"] != "secret" {
		t.Errorf("redacted %+v (in %+v)", r, in)
	}
	if got := strings.Join(MCPSecrets(r), ","); got != "a.env.T,b.headers.Authorization" {
		t.Errorf("secrets %q", got)
	}
}
