// Package mcptest builds a real MCP server for tests: mcpecho, a stdio
// server (newline-delimited JSON-RPC: initialize, tools/list, tools/call)
// with one tool, echo, whose result says what the server process sees.
package mcptest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Tool is the name of mcpecho's tool.
const Tool = "echo"

// TokenEnv is the variable whose value mcpecho puts into its result (to
// prove that env values reach the server).
const TokenEnv = "MCPTEST_TOKEN"

// Build compiles mcpecho into a fresh directory and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	return BuildIn(t, t.TempDir())
}

// BuildVisible compiles mcpecho into a fresh directory under /var/tmp,
// removed when t ends: a path a sandbox whose policy reads the host's root
// can see (its /tmp is its own).
func BuildVisible(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "mcpecho-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return BuildIn(t, dir)
}

// BuildIn compiles mcpecho into dir and returns its path.
func BuildIn(t testing.TB, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "mcpecho")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", out, "github.com/agentbox/agentbox/internal/agenttest/mcptest/mcpecho")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build mcpecho: %v\n%s", err, b)
	}
	return out
}

// Marked builds mcpecho behind a script that first leaves a mark: a test
// names the script as the MCP server of an agent's configuration, and
// started says whether the agent ran it (e.g. a server that a workspace's
// own configuration names, which must not start).
func Marked(t testing.TB) (script string, started func() bool) {
	t.Helper()
	srv := Build(t)
	marker := filepath.Join(t.TempDir(), "started")
	script = filepath.Join(t.TempDir(), "marked.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+"\nexec "+srv+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, func() bool {
		_, err := os.Stat(marker)
		return err == nil
	}
}
