package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestBinarySandbox runs code in sandboxes made by the real, statically
// built binary, whose sandbox init starts with more threads than a test
// binary's: an init that hangs there (it once did, in AllThreadsSyscall)
// fails this test in seconds instead of every user's first exec. The
// second run goes through the egress proxy, which refuses with a reason.
func TestBinarySandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sandboxes need root here")
	}
	dataDir := t.TempDir()
	d := startDaemon(t, dataDir)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"strict", []string{"exec", "--policy", "strict", "--", "echo", "hi from the sandbox"}, []string{"hi from the sandbox"}},
		{"proxy", []string{"exec", "--", "sh", "-c", "curl -s -x $HTTP_PROXY http://example.com/; echo; id -u"},
			[]string{"the sandbox's network policy refused example.com:80", "1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, tc.args...)
			cmd.Env = []string{"AGENTBOX_URL=" + d.url, "AGENTBOX_DATA_DIR=" + dataDir, "PATH=/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("agentbox %s: %v\n%s", strings.Join(tc.args, " "), err, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
