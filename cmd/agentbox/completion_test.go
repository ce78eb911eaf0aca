package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/cli"
)

// runRoot runs the whole command tree, as main builds it, with args.
func runRoot(t *testing.T, args ...string) (string, int) {
	t.Helper()
	root := cli.NewRoot("test")
	root.AddCommand(serveCommand())
	root.AddCommand(devCommand())
	root.SetArgs(args)
	var out, errOut strings.Builder
	root.SetOut(&out)
	root.SetErr(&errOut)
	code := cli.Execute(t.Context(), root)
	if code != 0 {
		t.Logf("stderr: %s", errOut.String())
	}
	return out.String(), code
}

// TestCompletion: `agentbox completion SHELL` prints a script for bash,
// zsh, fish and powershell (bash's is valid bash), and the completions it
// asks the binary for know serve's flags and their values.
func TestCompletion(t *testing.T) {
	for shell, mark := range map[string]string{
		"bash":       "__start_agentbox",
		"zsh":        "#compdef agentbox",
		"fish":       "complete -c agentbox",
		"powershell": "Register-ArgumentCompleter",
	} {
		out, code := runRoot(t, "completion", shell)
		if code != 0 || !strings.Contains(out, mark) {
			t.Errorf("completion %s: exit %d, no %q in %d bytes", shell, code, mark, len(out))
		}
		if shell == "bash" {
			if bash, err := exec.LookPath("bash"); err == nil {
				p := filepath.Join(t.TempDir(), "agentbox.bash")
				if err := os.WriteFile(p, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				if b, err := exec.Command(bash, "-n", p).CombinedOutput(); err != nil {
					t.Errorf("bash -n on the bash completion: %v\n%s", err, b)
				}
			}
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"__complete", ""}, []string{"serve", "run", "sessions", "completion"}},
		{[]string{"__complete", "serve", "--log-"}, []string{"--log-format", "--log-level"}},
		{[]string{"__complete", "serve", "--log-format", ""}, []string{"text", "json"}},
	} {
		out, code := runRoot(t, tc.args...)
		for _, w := range tc.want {
			if code != 0 || !strings.Contains(out, w+"\n") && !strings.Contains(out, w+"\t") {
				t.Errorf("%q: exit %d, no %s in:\n%s", tc.args, code, w, out)
			}
		}
	}
}
