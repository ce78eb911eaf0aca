package execution

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// These tests run the service on the real process runtime and the real
// policy presets.

// realService returns a service over the process runtime, skipping the
// test when the host cannot run it (the probe says why).
func realService(t *testing.T, poolSize int) *Service {
	t.Helper()
	rt := process.New(process.Options{})
	if p := rt.Probe(t.Context()); !p.Available {
		t.Skipf("the process runtime is unavailable here: %s", p.Reason)
	}
	reg := sandbox.NewRegistry()
	reg.Register(rt)
	eg, err := egress.New(egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Options{Runtimes: reg, Resolve: PolicyResolver(nil), WorkDir: t.TempDir(), PoolSize: poolSize, Network: egress.Tasks{Server: eg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return svc
}

func TestRealExecLanguages(t *testing.T) {
	svc := realService(t, 0)
	tests := []struct {
		name string
		req  Request
		out  string
		code int
	}{
		{"python", Request{Language: LangPython, Code: "import sys; print(sys.stdin.read() + '!'); sys.exit(2)", Stdin: []byte("hi")}, "hi!\n", 2},
		{"node", Request{Language: LangNode, Code: "console.log([1,2,3].map(x => x * 2).join(','))"}, "2,4,6\n", 0},
		{"bash", Request{Language: LangBash, Code: "cat data/in.txt; echo; id -u"}, "from a file\n1000\n", 0},
	}
	tests[2].req.Files = map[string][]byte{"data/in.txt": []byte("from a file")}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := svc.Exec(t.Context(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) != tt.out || res.ExitCode != tt.code || res.Error != nil {
				t.Fatalf("stdout %q stderr %q code %d error %+v", res.Stdout, res.Stderr, res.ExitCode, res.Error)
			}
			if res.Sandbox.Runtime != "process" || len(res.Sandbox.Mechanisms) == 0 {
				t.Fatalf("sandbox = %+v", res.Sandbox)
			}
		})
	}
}

func TestRealExecHostEnvDoesNotLeak(t *testing.T) {
	t.Setenv("AGENTBOX_EXEC_TEST_SECRET", "marker-7f3a9c")
	svc := realService(t, 0)
	res, err := svc.Exec(t.Context(), Request{Argv: []string{"sh", "-c", "env; cat /proc/1/environ 2>/dev/null"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout)+string(res.Stderr), "marker-7f3a9c") {
		t.Fatalf("the daemon's environment reached the sandbox:\n%s", res.Stdout)
	}
}

func TestRealExecLimits(t *testing.T) {
	svc := realService(t, 0)
	t.Run("output", func(t *testing.T) {
		res, err := svc.Exec(t.Context(), Request{
			Language: LangPython,
			Code:     "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1000000)",
			Policy:   PolicyRef{Inline: []byte(`{"version": 1, "resources": {"output": "64Ki"}}`)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Truncated || len(res.Stdout) != 64<<10 || res.Error == nil || res.Error.Code != sandbox.ReasonOutput {
			t.Fatalf("truncated %v, %d bytes, error %+v", res.Truncated, len(res.Stdout), res.Error)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		res, err := svc.Exec(t.Context(), Request{Argv: []string{"sleep", "60"}, Timeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if res.Error == nil || res.Error.Code != sandbox.ReasonTimeout {
			t.Fatalf("result = %+v", res)
		}
	})
}

func TestRealExecPolicyErrors(t *testing.T) {
	svc := realService(t, 0)
	_, err := svc.Exec(t.Context(), Request{Argv: []string{"true"},
		Policy: PolicyRef{Name: "mine.yaml", Source: "version: 1\nresources:\n  memory: lots\n"}})
	if !errors.Is(err, ErrPolicyInvalid) || !strings.Contains(err.Error(), "mine.yaml:3") {
		t.Fatalf("err = %v", err)
	}
	if _, err := svc.Exec(t.Context(), Request{Argv: []string{"true"}, Policy: PolicyRef{Preset: "nope"}}); !errors.Is(err, ErrPolicyInvalid) {
		t.Fatalf("unknown preset: %v", err)
	}
}

func TestRealWarmPool(t *testing.T) {
	svc := realService(t, 1)
	first, err := svc.Exec(t.Context(), Request{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Sandbox.Warm {
		t.Fatal("the first exec cannot be warm")
	}
	var hash string
	svc.pool.mu.Lock()
	for k := range svc.pool.keys {
		hash = k
	}
	svc.pool.mu.Unlock()
	waitFor(t, "the pool to fill", func() bool { return readyIn(svc.pool, hash) == 1 })
	res, err := svc.Exec(t.Context(), Request{Argv: []string{"python3", "-c", "print(1)"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Sandbox.Warm || res.Sandbox.ID == first.Sandbox.ID || string(res.Stdout) != "1\n" {
		t.Fatalf("second exec: %+v", res)
	}
}

func TestRealProcess(t *testing.T) {
	svc := realService(t, 0)
	info, err := svc.Start(t.Context(), StartRequest{Argv: []string{"python3", "-u", "-c",
		"import sys\nfor line in sys.stdin: print(line.strip().upper(), flush=True)"}, Stdin: true, Tag: "upper"})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := svc.Subscribe(t.Context(), "upper", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.SendStdin(t.Context(), "upper", []byte("abc\ndef\n")); err != nil {
		t.Fatal(err)
	}
	if err := svc.CloseStdin("upper"); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var exit *ProcessInfo
	for _, ev := range collect(t, ch) {
		switch ev.Type {
		case EventStdout, EventStderr:
			out.Write(ev.Data)
		case EventExit:
			exit = ev.Exit
		}
	}
	if out.String() != "ABC\nDEF\n" || exit == nil || exit.ExitCode != 0 {
		t.Fatalf("output %q, exit %+v", out.String(), exit)
	}
	if got, _ := svc.Get(info.ID); got.Running || got.Sandbox.Runtime != "process" {
		t.Fatalf("after the end: %+v", got)
	}

	// A signal ends a running process; its sandbox goes with it.
	info, err = svc.Start(t.Context(), StartRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Signal(info.ID, os.Kill); err != nil {
		t.Fatal(err)
	}
	done, err := svc.Wait(t.Context(), info.ID)
	if err != nil || done.Running || done.ExitCode != -1 {
		t.Fatalf("after SIGKILL: %+v, %v", done, err)
	}
}

// TestRealExecWorkspaceIsThrowaway: what an exec writes, protected paths
// included, is never committed anywhere, so the result reports no
// workspace violation (before, each protected write came back as a
// dropped change of a commit nobody needed).
func TestRealExecWorkspaceIsThrowaway(t *testing.T) {
	svc := realService(t, 0)
	res, err := svc.Exec(t.Context(), Request{Argv: []string{"sh", "-c",
		`printf '{}' > .mcp.json && mkdir -p .git/hooks && printf '#!/bin/sh\n' > .git/hooks/pre-commit && echo x > out.txt && ln -s /etc/shadow s && cat out.txt`}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 || string(res.Stdout) != "x\n" {
		t.Fatalf("exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if len(res.Violations) != 0 {
		t.Fatalf("an exec's throwaway workspace reported violations: %+v", res.Violations)
	}
}

// TestRealProcessWorkspaceKept: while a process runs, its workspace is
// its sandbox's (the host directory holds only what it started with);
// once it has ended, the sandbox's commit has put what it wrote into
// that directory, kept until the process is removed or pushed out by
// MaxKept later ones. A process in a session's sandbox has none.
func TestRealProcessWorkspaceKept(t *testing.T) {
	rt := process.New(process.Options{})
	if p := rt.Probe(t.Context()); !p.Available {
		t.Skipf("the process runtime is unavailable here: %s", p.Reason)
	}
	reg := sandbox.NewRegistry()
	reg.Register(rt)
	eg, err := egress.New(egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Options{Runtimes: reg, Resolve: PolicyResolver(nil), WorkDir: t.TempDir(), MaxKept: 2, Network: egress.Tasks{Server: eg}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close(context.Background()) })

	info, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sh", "-c", "printf hi > out.txt && mkdir d && printf y > d/y && echo ready && read x"},
		Stdin: true, Files: map[string][]byte{"in.txt": []byte("in")}})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := svc.Subscribe(t.Context(), info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for ev := range ch {
		if ev.Type == EventStdout && strings.Contains(string(ev.Data), "ready") {
			break
		}
	}
	w, err := svc.Workspace(info.ID)
	if err != nil || w.Live == nil {
		t.Fatalf("a running process's workspace: %+v %v", w, err)
	}
	if _, err := os.Stat(filepath.Join(w.Dir, "out.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the host directory has what the running sandbox wrote: %v", err)
	}
	if err := svc.CloseStdin(info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Wait(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	w, err = svc.Workspace(info.ID)
	if err != nil || w.Live != nil {
		t.Fatalf("an ended process's workspace: %+v %v", w, err)
	}
	for p, want := range map[string]string{"in.txt": "in", "out.txt": "hi", "d/y": "y"} {
		if b, err := os.ReadFile(filepath.Join(w.Dir, p)); err != nil || string(b) != want {
			t.Errorf("kept %s: %q %v, want %q", p, b, err, want)
		}
	}
	first := w.Dir

	// Two more ended processes: the first one's workspace is pushed out.
	for range 2 {
		i, err := svc.Start(t.Context(), StartRequest{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Wait(t.Context(), i.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Workspace(i.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.Workspace(info.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("past MaxKept, the oldest workspace: %v", err)
	}
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("past MaxKept, the oldest workspace is still on disk: %v", err)
	}
	if _, err := svc.Get(info.ID); err != nil {
		t.Fatalf("the process itself is still listed: %v", err)
	}

	// Removing a process removes its workspace.
	last := svc.List()[2]
	lw, err := svc.Workspace(last.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Remove(t.Context(), last.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lw.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a removed process's workspace is still on disk: %v", err)
	}
	if _, err := svc.Workspace("prc_nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown process: %v", err)
	}
}
