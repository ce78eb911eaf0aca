package execution_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/execution/exectest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestLentProcesses starts processes in a sandbox the service does not
// own (the host double), as a session's: signals reach the command, a
// kill, the timeout and the owner's closing end the command's group and
// never the sandbox (the next command runs), each said in the exit; and
// a process is found through its scope only.
func TestLentProcesses(t *testing.T) {
	rt := &exectest.Runtime{}
	ws := t.TempDir()
	sb, err := rt.Create(t.Context(), sandbox.Spec{Workspace: ws, WorkspaceDir: ws, Env: map[string]string{"PATH": os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = sb.Close(context.Background()) })
	svc, err := execution.New(execution.Options{Runtimes: sandbox.NewRegistry(), Resolve: execution.PolicyResolver(nil), WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })

	// A process traps TERM and says so: it got the signal, not its wrapper.
	const trapper = `trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done`
	tests := []struct {
		name    string
		argv    []string
		limits  sandbox.Limits
		timeout time.Duration
		act     func(t *testing.T, id string, closing chan struct{})
		code    int
		signal  string
		reason  string
	}{
		{name: "exit", argv: []string{"sh", "-c", "exit 3"}, code: 3},
		{name: "term reaches the command", argv: []string{"sh", "-c", trapper},
			act: func(t *testing.T, id string, _ chan struct{}) {
				ready(t, svc, id)
				if err := svc.Signal(id, mustSignal(t, "TERM")); err != nil {
					t.Fatal(err)
				}
			}, code: 7},
		{name: "kill", argv: []string{"sh", "-c", trapper},
			act: func(t *testing.T, id string, _ chan struct{}) {
				ready(t, svc, id)
				if err := svc.Signal(id, mustSignal(t, "KILL")); err != nil {
					t.Fatal(err)
				}
			}, code: -1, signal: "SIGKILL"},
		{name: "timeout", argv: []string{"sleep", "61.9"}, timeout: 200 * time.Millisecond, code: -1, signal: "SIGKILL", reason: sandbox.ReasonTimeout},
		{name: "policy timeout", argv: []string{"sleep", "61.9"}, limits: sandbox.Limits{Timeout: 200 * time.Millisecond},
			code: -1, signal: "SIGKILL", reason: sandbox.ReasonTimeout},
		{name: "owner closes", argv: []string{"sh", "-c", trapper},
			act: func(t *testing.T, id string, closing chan struct{}) {
				ready(t, svc, id)
				close(closing)
			}, code: -1, signal: "SIGKILL", reason: execution.ReasonSandboxClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closing := make(chan struct{})
			info, err := svc.Start(t.Context(), execution.StartRequest{Argv: tt.argv, Sandbox: sb, Limits: tt.limits,
				Timeout: tt.timeout, Closing: closing, Scope: "ses_a"})
			if err != nil {
				t.Fatal(err)
			}
			if tt.act != nil {
				tt.act(t, info.ID, closing)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			end, err := svc.Wait(ctx, info.ID)
			if err != nil {
				t.Fatal(err)
			}
			reason := ""
			if end.Error != nil {
				reason = end.Error.Code
			}
			if end.ExitCode != tt.code || end.Signal != tt.signal || reason != tt.reason || end.Scope != "ses_a" {
				t.Errorf("exit %+v, want code %d signal %q reason %q", end, tt.code, tt.signal, tt.reason)
			}
			// The sandbox lives on, and nothing of the command is left.
			after, err := execution.RunIn(t.Context(), sb, sandbox.Limits{}, execution.Request{Argv: []string{"sh", "-c", "pgrep -f 'slee[p] 61.9' >/dev/null && echo left || echo none"}})
			if err != nil || string(after.Stdout) != "none\n" {
				t.Errorf("after %s: %q, %v", tt.name, after.Stdout, err)
			}
		})
	}

	t.Run("scope", func(t *testing.T) {
		info, err := svc.Start(t.Context(), execution.StartRequest{Argv: []string{"true"}, Tag: "t1", Sandbox: sb, Scope: "ses_a"})
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range []string{info.ID, "t1"} {
			if id, err := svc.Resolve("ses_a", ref); err != nil || id != info.ID {
				t.Errorf("Resolve(ses_a, %s) = %q, %v", ref, id, err)
			}
			if _, err := svc.Resolve("ses_b", ref); !errors.Is(err, execution.ErrNotFound) {
				t.Errorf("Resolve(ses_b, %s): %v, want ErrNotFound", ref, err)
			}
			if _, err := svc.Resolve("", ref); !errors.Is(err, execution.ErrNotFound) {
				t.Errorf("Resolve(\"\", %s): %v, want ErrNotFound", ref, err)
			}
		}
		if n := len(svc.ListScope("ses_b")); n != 0 {
			t.Errorf("ses_b lists %d processes", n)
		}
		if l := svc.ListScope("ses_a"); len(l) == 0 || l[len(l)-1].ID != info.ID {
			t.Errorf("ses_a lists %+v", l)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		_, err := svc.Start(t.Context(), execution.StartRequest{Argv: []string{"true"}, Sandbox: sb, Policy: execution.PolicyRef{Preset: "strict"}})
		if !errors.Is(err, execution.ErrInvalid) {
			t.Errorf("a policy with a lent sandbox: %v, want ErrInvalid", err)
		}
	})
}

// ready waits for the process's first output line.
func ready(t *testing.T, svc *execution.Service, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ch, err := svc.Subscribe(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range ch {
		if ev.Type == execution.Stdout {
			return
		}
	}
	t.Fatal("the process ended before its first line")
}

func mustSignal(t *testing.T, name string) os.Signal {
	t.Helper()
	sig, err := execution.ParseSignal(name)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}
