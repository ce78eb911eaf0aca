//go:build !dev

package main

import (
	"strings"
	"testing"
)

// TestDevOff: without -tags dev, `agentbox dev …` says how to get the
// developer tools instead of failing as an unknown command.
func TestDevOff(t *testing.T) {
	cmd := devCommand()
	if !cmd.Hidden {
		t.Error("dev is listed in the help")
	}
	err := cmd.RunE(cmd, []string{"fake-llm", "--listen", "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "-tags dev") {
		t.Errorf("dev fake-llm = %v, want the -tags dev hint", err)
	}
}
