package agent

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/errkind"
)

// MCP server transports.
const (
	MCPStdio = "stdio"
	MCPHTTP  = "http"
	MCPSSE   = "sse"
)

// MCPServer is one MCP server a session's agent is given at create time.
// A stdio server is a command the agent starts (inside the session's
// sandbox, as every process of the agent); an http or sse server is a URL
// the agent connects to (through the session's egress policy). Env values
// and header values are secrets, like Config.Env: they reach the agent and
// are never stored (Redacted is what is kept).
type MCPServer struct {
	Name    string            `json:"name"`
	Type    string            `json:"type"`
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Bounds of an MCP server list.
const (
	MaxMCPServers   = 16
	MaxMCPArgs      = 64
	MaxMCPEnv       = 64
	MaxMCPHeaders   = 32
	MaxMCPValueSize = 8 << 10
	MaxMCPURLSize   = 2048
)

// ErrInvalidMCP is returned (wrapped) by ValidateMCPServers.
var ErrInvalidMCP = errkind.New(errkind.Invalid, "invalid mcp server")

var (
	// mcpName is the allowlist of server names: every agent puts the
	// name into tool names (claude's mcp__NAME__TOOL), config keys
	// (codex's [mcp_servers.NAME]) or both.
	mcpName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$`) })
	envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`) })
	// headerName is RFC 9110's token.
	headerName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$") })
)

// ValidateMCPServers checks a create request's MCP servers and returns
// them normalised: the transport made explicit, a stdio command resolved
// to an absolute, cleaned path of an existing executable (a bare name is
// looked up in the daemon's PATH). Every error wraps ErrInvalidMCP and
// names the server's index and field.
func ValidateMCPServers(in []MCPServer) ([]MCPServer, error) {
	if len(in) > MaxMCPServers {
		return nil, fmt.Errorf("%w: %d servers, at most %d", ErrInvalidMCP, len(in), MaxMCPServers)
	}
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]MCPServer, len(in))
	seen := map[string]bool{}
	for i, s := range in {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: mcp_servers[%d]: %s", ErrInvalidMCP, i, fmt.Sprintf(format, args...))
		}
		if !mcpName().MatchString(s.Name) {
			return nil, bad("name %q: 1 to 64 of a-z A-Z 0-9 _ -, starting with a letter or digit", s.Name)
		}
		if seen[strings.ToLower(s.Name)] {
			return nil, bad("name %q is given twice", s.Name)
		}
		seen[strings.ToLower(s.Name)] = true
		if s.Type == "" {
			s.Type = MCPStdio
			if s.URL != "" {
				s.Type = MCPHTTP
			}
		}
		switch s.Type {
		case MCPStdio:
			if s.URL != "" || len(s.Headers) > 0 {
				return nil, bad("a stdio server has a command, not url or headers")
			}
			cmd, err := resolveCommand(s.Command)
			if err != nil {
				return nil, bad("command: %v", err)
			}
			s.Command = cmd
			if len(s.Args) > MaxMCPArgs {
				return nil, bad("%d args, at most %d", len(s.Args), MaxMCPArgs)
			}
			for j, a := range s.Args {
				if err := checkValue(a); err != nil {
					return nil, bad("args[%d]: %v", j, err)
				}
			}
			if len(s.Env) > MaxMCPEnv {
				return nil, bad("%d env variables, at most %d", len(s.Env), MaxMCPEnv)
			}
			for _, k := range slices.Sorted(maps.Keys(s.Env)) {
				if !envName().MatchString(k) {
					return nil, bad("env name %q is not [A-Za-z_][A-Za-z0-9_]*", k)
				}
				if err := checkValue(s.Env[k]); err != nil {
					return nil, bad("env %s: %v", k, err)
				}
			}
			s.Args = slices.Clone(s.Args)
			s.Env = maps.Clone(s.Env)
		case MCPHTTP, MCPSSE:
			if s.Command != "" || len(s.Args) > 0 || len(s.Env) > 0 {
				return nil, bad("an %s server has a url and headers, not command, args or env", s.Type)
			}
			if err := checkURL(s.URL); err != nil {
				return nil, bad("url: %v", err)
			}
			if len(s.Headers) > MaxMCPHeaders {
				return nil, bad("%d headers, at most %d", len(s.Headers), MaxMCPHeaders)
			}
			for _, k := range slices.Sorted(maps.Keys(s.Headers)) {
				if !headerName().MatchString(k) {
					return nil, bad("header name %q is not an HTTP token", k)
				}
				v := s.Headers[k]
				if err := checkValue(v); err != nil || strings.ContainsAny(v, "\r\n") {
					return nil, bad("header %s: not a valid header value", k)
				}
			}
			s.Headers = maps.Clone(s.Headers)
		default:
			return nil, bad("type %q is not one of stdio, http, sse", s.Type)
		}
		out[i] = s
	}
	return out, nil
}

// checkValue bounds one argument, env or header value.
func checkValue(v string) error {
	if len(v) > MaxMCPValueSize {
		return fmt.Errorf("%d bytes, at most %d", len(v), MaxMCPValueSize)
	}
	if strings.ContainsRune(v, 0) {
		return errors.New("contains a NUL byte")
	}
	return nil
}

// resolveCommand makes a stdio server's command an absolute path of an
// executable regular file.
func resolveCommand(cmd string) (string, error) {
	if cmd == "" {
		return "", errors.New("missing")
	}
	if err := checkValue(cmd); err != nil || len(cmd) > 4096 {
		return "", fmt.Errorf("%q is not a valid path", cmd)
	}
	if !filepath.IsAbs(cmd) {
		if strings.ContainsRune(cmd, '/') {
			return "", fmt.Errorf("%q is neither absolute nor a bare name", cmd)
		}
		p, err := exec.LookPath(cmd)
		if err != nil {
			return "", fmt.Errorf("%q is not found in the daemon's PATH", cmd)
		}
		if cmd, err = filepath.Abs(p); err != nil {
			return "", err
		}
	}
	cmd = filepath.Clean(cmd)
	fi, err := os.Stat(cmd)
	if err != nil {
		return "", fmt.Errorf("%q does not exist", cmd)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%q is not an executable file", cmd)
	}
	return cmd, nil
}

// checkURL accepts an absolute http(s) URL with a host and no user info.
func checkURL(raw string) error {
	if raw == "" {
		return errors.New("missing")
	}
	if len(raw) > MaxMCPURLSize {
		return fmt.Errorf("%d bytes, at most %d", len(raw), MaxMCPURLSize)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("no host")
	}
	if u.User != nil {
		return errors.New("user info in the URL (give credentials as headers)")
	}
	return nil
}

// Redacted is what is kept of servers: their definitions with every env
// and header value emptied (the names stay, so that a resume can say
// which to send again).
func Redacted(servers []MCPServer) []MCPServer {
	out := make([]MCPServer, len(servers))
	for i, s := range servers {
		s.Args = slices.Clone(s.Args)
		s.Env = blank(s.Env)
		s.Headers = blank(s.Headers)
		out[i] = s
	}
	return out
}

func blank(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k := range m {
		out[k] = ""
	}
	return out
}

// MCPSecrets names the secret values of servers, as "SERVER.env.NAME" and
// "SERVER.headers.NAME", sorted.
func MCPSecrets(servers []MCPServer) []string {
	var out []string
	for _, s := range servers {
		for k := range s.Env {
			out = append(out, s.Name+".env."+k)
		}
		for k := range s.Headers {
			out = append(out, s.Name+".headers."+k)
		}
	}
	slices.Sort(out)
	return out
}
