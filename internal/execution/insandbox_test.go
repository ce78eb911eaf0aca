package execution_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/execution/exectest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestRunIn runs commands in a sandbox RunIn does not own (the host
// double): results as Exec gives them, and a timeout, the output limit and
// a caller gone end the command's process group, never the sandbox, which
// runs the next command.
func TestRunIn(t *testing.T) {
	rt := &exectest.Runtime{}
	ws := t.TempDir()
	sb, err := rt.Create(t.Context(), sandbox.Spec{Workspace: ws, WorkspaceDir: ws, Env: map[string]string{"PATH": os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = sb.Close(context.Background()) })
	gone, cancel := context.WithCancel(t.Context())
	time.AfterFunc(300*time.Millisecond, cancel)
	tests := []struct {
		name    string
		ctx     context.Context
		limits  sandbox.Limits
		req     execution.Request
		invalid bool
		failed  bool // an error, not a result
		code    int
		signal  string
		reason  string
		stdout  string
	}{
		{name: "result", req: execution.Request{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 3"}, Stdin: []byte("in\n")}, code: 3, stdout: "in\n"},
		{name: "timeout", req: execution.Request{Argv: []string{"sh", "-c", "sleep 61.7 & sleep 61.7"}, Timeout: 200 * time.Millisecond},
			code: -1, signal: "SIGKILL", reason: sandbox.ReasonTimeout},
		{name: "policy timeout", limits: sandbox.Limits{Timeout: 200 * time.Millisecond}, req: execution.Request{Argv: []string{"sleep", "61.7"}},
			code: -1, signal: "SIGKILL", reason: sandbox.ReasonTimeout},
		{name: "output limit", limits: sandbox.Limits{OutputBytes: 100}, req: execution.Request{Argv: []string{"yes"}},
			code: -1, signal: "SIGKILL", reason: sandbox.ReasonOutput, stdout: strings.Repeat("y\n", 50)},
		{name: "caller gone", ctx: gone, req: execution.Request{Argv: []string{"sleep", "61.7"}}, failed: true},
		{name: "language", req: execution.Request{Language: execution.LangBash, Code: "true"}, invalid: true},
		{name: "files", req: execution.Request{Argv: []string{"true"}, Files: map[string][]byte{"a": nil}}, invalid: true},
		{name: "policy", req: execution.Request{Argv: []string{"true"}, Policy: execution.PolicyRef{Preset: "strict"}}, invalid: true},
		{name: "empty", req: execution.Request{Argv: []string{""}}, invalid: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			res, err := execution.RunIn(ctx, sb, tt.limits, tt.req)
			switch {
			case tt.invalid:
				if !errors.Is(err, execution.ErrInvalid) {
					t.Fatalf("err %v, want ErrInvalid", err)
				}
				return
			case tt.failed:
				if err == nil {
					t.Fatalf("result %+v, want an error", res)
				}
			case err != nil:
				t.Fatal(err)
			default:
				reason := ""
				if res.Error != nil {
					reason = res.Error.Code
				}
				if res.ExitCode != tt.code || res.Signal != tt.signal || reason != tt.reason || string(res.Stdout) != tt.stdout {
					t.Errorf("result %+v (stdout %q), want code %d signal %q reason %q stdout %q", res, res.Stdout, tt.code, tt.signal, tt.reason, tt.stdout)
				}
			}
			// The sandbox lives on, and nothing of the command is left.
			after, err := execution.RunIn(t.Context(), sb, sandbox.Limits{}, execution.Request{Argv: []string{"sh", "-c", "pgrep -f 'slee[p] 61.7' >/dev/null && echo left || echo none"}})
			if err != nil || string(after.Stdout) != "none\n" {
				t.Errorf("after %s: %q, %v", tt.name, after.Stdout, err)
			}
		})
	}
}
