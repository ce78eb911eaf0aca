package execution

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// gatedService is a service whose sandboxes' Close waits until open is
// called: every teardown stays pending until then.
func gatedService(t *testing.T, opts func(*Options)) (env *testEnv, open func()) {
	t.Helper()
	gate := make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(gate) }) }
	env = newTestService(t, func(o *Options) {
		if opts != nil {
			opts(o)
		}
	})
	env.rt.CloseGate = gate
	t.Cleanup(open) // before newTestService's cleanup closes the service
	return env, open
}

// execWithin runs an exec and fails the test if it does not answer in a
// minute: the teardown it must not wait for never ends by itself.
func execWithin(t *testing.T, svc *Service, req Request) (Result, error) {
	t.Helper()
	type answer struct {
		res Result
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := svc.Exec(t.Context(), req)
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-time.After(time.Minute):
		t.Fatal("the exec did not answer while its sandbox's teardown was pending: the answer waits for the teardown")
		return Result{}, nil
	}
}

// TestExecAnswersBeforeTeardown: an exec's result is sent while its
// sandbox is still being torn down, and still lists what the sandbox
// refused during the run.
func TestExecAnswersBeforeTeardown(t *testing.T) {
	env, open := gatedService(t, nil)
	env.rt.CloseViolations = []sandbox.Violation{{Kind: sandbox.ViolationFilesystem, Detail: "write to .mcp.json dropped", Target: ".mcp.json", Rule: "protected:.mcp.json", Action: "dropped"}}
	res, err := execWithin(t, env.svc, Request{Language: "bash", Code: "echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "hi\n" || res.ExitCode != 0 {
		t.Fatalf("result = %+v", res)
	}
	if len(res.Violations) != 1 || res.Violations[0].Target != ".mcp.json" {
		t.Fatalf("the result lost the run's violation: %+v", res.Violations)
	}
	if n := env.rt.Open(); n != 1 {
		t.Fatalf("%d sandboxes open while the teardown is held; want 1", n)
	}
	if entries, _ := os.ReadDir(env.svc.opts.WorkDir); len(entries) != 1 {
		t.Fatalf("workspaces %v while the teardown is held; want the exec's, kept until its sandbox is gone", entries)
	}
	open()
	waitFor(t, "the teardown", func() bool { return env.rt.Open() == 0 })
	waitFor(t, "the workspace's removal", func() bool {
		entries, _ := os.ReadDir(env.svc.opts.WorkDir)
		return len(entries) == 0
	})
}

// TestConcurrencyCapHoldsDuringTeardown: a task's concurrency slot is
// held until its sandbox is torn down, after the answer: with N
// teardowns pending, the next exec (or process) is refused with
// ErrTooMany (429), and admitted once they end.
func TestConcurrencyCapHoldsDuringTeardown(t *testing.T) {
	const n = 2
	env, open := gatedService(t, func(o *Options) { o.MaxConcurrent = n })
	for range n {
		if _, err := execWithin(t, env.svc, Request{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("exec %d with %d teardowns pending: %v, want ErrTooMany", n+1, n, err)
	}
	if _, err := env.svc.Start(t.Context(), StartRequest{Argv: []string{"true"}}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("process with %d teardowns pending: %v, want ErrTooMany", n, err)
	}
	if got := env.rt.Open(); got != n {
		t.Fatalf("%d sandboxes open, want %d", got, n)
	}
	open()
	waitFor(t, "the teardowns", func() bool { return env.rt.Open() == 0 })
	// The slots are free once the sandboxes are gone.
	if _, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}}); err != nil {
		t.Fatalf("exec after the teardowns: %v", err)
	}
}

// TestCloseWaitsForTeardown: shutting the service down while a teardown
// is pending waits for it, so no sandbox or workspace is left behind.
func TestCloseWaitsForTeardown(t *testing.T) {
	env, open := gatedService(t, nil)
	if _, err := execWithin(t, env.svc, Request{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- env.svc.Close(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("Close returned (%v) while a sandbox was still being torn down", err)
	case <-time.After(200 * time.Millisecond):
		// Not a measure: Close must not return at all before open.
	}
	open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := env.rt.Open(); n != 0 {
		t.Fatalf("%d sandboxes open after Close", n)
	}
	if entries, _ := os.ReadDir(env.svc.opts.WorkDir); len(entries) != 0 {
		t.Fatalf("workspaces left after Close: %v", entries)
	}
}

// TestLateViolationsAudited: what a sandbox reports while it is torn down,
// after the result was sent, cannot join the result; it reaches the audit
// log and the metrics under the exec's task instead, never dropped.
func TestLateViolationsAudited(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
	)
	env := newTestService(t, func(o *Options) {
		o.OnViolation = func(task string, v sandbox.Violation) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, task+" "+v.Target)
		}
	})
	env.rt.CloseViolations = []sandbox.Violation{{Kind: sandbox.ViolationNetwork, Target: "during:443", Action: "blocked"}}
	env.rt.LateViolations = []sandbox.Violation{{Kind: sandbox.ViolationNetwork, Target: "late:443", Action: "blocked"}}
	res, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 1 || res.Violations[0].Target != "during:443" {
		t.Fatalf("result violations %+v, want the one seen during the run", res.Violations)
	}
	task := "exec:" + res.Sandbox.ID
	waitFor(t, "the late violation's audit", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2
	})
	mu.Lock()
	got := strings.Join(seen, ", ")
	mu.Unlock()
	if got != task+" during:443, "+task+" late:443" {
		t.Fatalf("audited %q", got)
	}
	if got := value(t, env.svc.metrics.violations.WithLabelValues("network")); got != 2 {
		t.Fatalf("policy_violations_total{network} = %v, want 2", got)
	}
}

// TestRealExecViolationInResult: with the real runtime and a warm
// sandbox, a connection the egress proxy refuses is in the exec's result
// although the sandbox is torn down after the answer.
func TestRealExecViolationInResult(t *testing.T) {
	svc := realService(t, 1)
	req := Request{Language: LangPython, Code: `import urllib.request
try:
    urllib.request.urlopen("http://blocked.invalid/", timeout=20)
except Exception as e:
    print(type(e).__name__)`}
	if _, err := svc.Exec(t.Context(), Request{Argv: []string{"true"}}); err != nil { // starts warming
		t.Fatal(err)
	}
	waitFor(t, "the pool to fill", func() bool { return svc.metrics.poolReady.Value() == 1 })
	res, err := svc.Exec(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Sandbox.Warm || res.ExitCode != 0 {
		t.Fatalf("result = %+v, stderr %s", res, res.Stderr)
	}
	found := false
	for _, v := range res.Violations {
		found = found || (v.Kind == sandbox.ViolationNetwork && v.Host == "blocked.invalid")
	}
	if !found {
		t.Fatalf("the refused connection is not in the result: %+v (stdout %q)", res.Violations, res.Stdout)
	}
}

// TestRealCloseWaitsForTeardown: closing the service right after an
// exec answered (its sandbox's teardown still running) leaves neither
// the sandbox's cgroup nor its workspace behind.
func TestRealCloseWaitsForTeardown(t *testing.T) {
	svc := realService(t, 0)
	res, err := svc.Exec(t.Context(), Request{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*/agentbox/agentbox-" + res.Sandbox.ID); len(left) != 0 {
		t.Fatalf("cgroups left after Close: %v", left)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/agentbox/agentbox-" + res.Sandbox.ID); len(left) != 0 {
		t.Fatalf("cgroup left after Close: %v", left)
	}
	if entries, _ := os.ReadDir(svc.opts.WorkDir); len(entries) != 0 {
		t.Fatalf("workspaces left after Close: %v", entries)
	}
}
