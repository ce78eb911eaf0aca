package execution

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/internal/execution/exectest"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox"
)

func TestMain(m *testing.M) {
	reexec.Init()
	// The process runtime's launcher outlives the last sandbox by a few
	// seconds (its runtimes here are not all closed), and with it the
	// goroutines that read it and hold its thread.
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/agentbox/agentbox/internal/sandbox/process.(*launcher).read"),
		goleak.IgnoreAnyFunction("github.com/agentbox/agentbox/internal/sandbox/process.(*launcher).spawnLocked.func1"))
}

type testEnv struct {
	svc *Service
	rt  *exectest.Runtime
	reg *metrics.Registry
}

// newTestService returns a service over a hostRuntime; opts may adjust
// the options first.
func newTestService(t *testing.T, opts func(*Options)) *testEnv {
	t.Helper()
	rt := &exectest.Runtime{}
	reg := sandbox.NewRegistry()
	reg.Register(rt)
	reg.Register(&exectest.Runtime{Key: "broken", CreateErr: errors.Join(sandbox.ErrUnenforceable, errors.New("landlock is not available"))})
	preg := metrics.NewRegistry()
	o := Options{Runtimes: reg, Resolve: fakeResolve, WorkDir: t.TempDir(), Registerer: preg}
	if opts != nil {
		opts(&o)
	}
	svc, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Error(err)
		}
		if n := rt.Open(); n != 0 {
			t.Errorf("%d sandboxes left open after Close", n)
		}
	})
	return &testEnv{svc: svc, rt: rt, reg: preg}
}

func TestExec(t *testing.T) {
	env := newTestService(t, nil)
	tests := []struct {
		name       string
		req        Request
		wantOut    string
		wantErrOut string
		wantCode   int
	}{
		{"python", Request{Language: "python", Code: "import sys; print(sys.stdin.read().upper()); sys.exit(3)", Stdin: []byte("hi")}, "HI\n", "", 3},
		{"node", Request{Language: "node", Code: "console.log(1+1); console.error('e')"}, "2\n", "e\n", 0},
		{"bash", Request{Language: "bash", Code: "echo out; echo err >&2; exit 7"}, "out\n", "err\n", 7},
		{"argv", Request{Argv: []string{"printf", "%s-%s", "a", "b c"}}, "a-b c", "", 0},
		{"files", Request{Argv: []string{"cat", "dir/sub/f.txt", "g"}, Files: map[string][]byte{"dir/sub/f.txt": []byte("one "), "g": []byte("two")}}, "one two", "", 0},
		{"long code goes through a file", Request{Language: "bash", Code: "echo long #" + strings.Repeat("x", maxInlineCode)}, "long\n", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := env.svc.Exec(t.Context(), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) != tt.wantOut || string(res.Stderr) != tt.wantErrOut || res.ExitCode != tt.wantCode {
				t.Fatalf("got stdout %q stderr %q code %d; want %q %q %d", res.Stdout, res.Stderr, res.ExitCode, tt.wantOut, tt.wantErrOut, tt.wantCode)
			}
			if res.Error != nil || res.Truncated || res.Duration <= 0 || res.Sandbox.Runtime != "host" {
				t.Fatalf("result = %+v", res)
			}
		})
	}
	// Each sandbox is torn down after its exec answered.
	waitFor(t, "the sandboxes of the execs to be torn down", func() bool { return env.rt.Open() == 0 })
	if got := value(t, env.svc.metrics.execs.WithLabelValues("python", "ok")); got != 1 {
		t.Fatalf("agentbox_execs_total{python,ok} = %v", got)
	}
}

func TestExecInvalid(t *testing.T) {
	env := newTestService(t, nil)
	tests := []struct {
		name string
		req  Request
		want error
	}{
		{"nothing", Request{}, ErrInvalid},
		{"both", Request{Language: "bash", Code: "true", Argv: []string{"true"}}, ErrInvalid},
		{"language", Request{Language: "cobol", Code: "x"}, ErrInvalid},
		{"dotdot", Request{Argv: []string{"true"}, Files: map[string][]byte{"../x": nil}}, ErrInvalid},
		{"dotdot inside", Request{Argv: []string{"true"}, Files: map[string][]byte{"a/../../x": nil}}, ErrInvalid},
		{"absolute", Request{Argv: []string{"true"}, Files: map[string][]byte{"/etc/x": nil}}, ErrInvalid},
		{"empty path", Request{Argv: []string{"true"}, Files: map[string][]byte{"": nil}}, ErrInvalid},
		{"bad preset", Request{Argv: []string{"true"}, Policy: PolicyRef{Preset: "nope"}}, ErrPolicyInvalid},
		{"bad source", Request{Argv: []string{"true"}, Policy: PolicyRef{Name: "p.yaml", Source: "x"}}, ErrPolicyInvalid},
		{"refused", Request{Argv: []string{"true"}, Policy: PolicyRef{Preset: "refused"}}, ErrPolicyDenied},
		{"unenforceable", Request{Argv: []string{"true"}, Policy: PolicyRef{Preset: "unenforceable"}}, sandbox.ErrUnenforceable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := env.svc.Exec(t.Context(), tt.req)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
	_, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}, Policy: PolicyRef{Name: "p.yaml", Source: "x"}})
	if !strings.Contains(err.Error(), "p.yaml:3:5: resources.memory") {
		t.Fatalf("the policy error lost its position: %v", err)
	}
	if n := env.rt.Open(); n != 0 {
		t.Fatalf("%d sandboxes left open", n)
	}
	entries, _ := os.ReadDir(env.svc.opts.WorkDir)
	if len(entries) != 0 {
		t.Fatalf("workspaces left behind: %v", entries)
	}
}

func TestExecOutputLimit(t *testing.T) {
	env := newTestService(t, nil)
	// 100 MB of output against a 1000 byte limit: cut at the limit, and
	// the writer is killed long before it could finish.
	res, err := env.svc.Exec(t.Context(), Request{
		Language: "python",
		Code:     "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 1000000)\nprint('done', file=sys.stderr)",
		Policy:   PolicyRef{Inline: []byte(`{"output": 1000}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Stdout) != 1000 || res.Error == nil || res.Error.Code != sandbox.ReasonOutput {
		t.Fatalf("truncated %v, %d bytes, error %+v", res.Truncated, len(res.Stdout), res.Error)
	}
	if strings.Contains(string(res.Stderr), "done") || res.Signal == "" {
		t.Fatalf("the process was not killed: signal %q stderr %q", res.Signal, res.Stderr)
	}
	if len(res.Violations) != 1 || res.Violations[0].Kind != sandbox.ViolationResource || res.Violations[0].Rule != "limits.output" {
		t.Fatalf("violations = %+v", res.Violations)
	}
	if got := value(t, env.svc.metrics.violations.WithLabelValues("resource")); got != 1 {
		t.Fatalf("policy_violations_total{resource} = %v", got)
	}
}

func TestExecTimeout(t *testing.T) {
	env := newTestService(t, nil)
	start := time.Now()
	res, err := env.svc.Exec(t.Context(), Request{Argv: []string{"sleep", "60"}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Error == nil || res.Error.Code != sandbox.ReasonTimeout || res.ExitCode != -1 {
		t.Fatalf("result = %+v", res)
	}
	if time.Since(start) > 30*time.Second {
		t.Fatal("the timeout was not applied")
	}
}

func TestExecCancel(t *testing.T) {
	env := newTestService(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := env.svc.Exec(ctx, Request{Argv: []string{"sleep", "60"}})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
}

func TestExecStream(t *testing.T) {
	env := newTestService(t, nil)
	var got []Output
	started := 0
	// The euro sign is written in two parts with a pause between them.
	res, err := env.svc.ExecStream(t.Context(), Request{
		Language: "bash",
		Code:     `printf 'a\xe2\x82'; sleep 0.3; printf '\xac b'; echo e >&2`,
	}, Hooks{Started: func(SandboxInfo) { started++ }, Output: func(o Output) {
		if started != 1 {
			t.Errorf("output before Started")
		}
		got = append(got, o)
	}})
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	for i, o := range got {
		if o.Seq != int64(i+1) {
			t.Fatalf("chunk %d has seq %d", i, o.Seq)
		}
		if !utf8.Valid(o.Data) {
			t.Fatalf("chunk %d splits a UTF-8 sequence: %q", i, o.Data)
		}
		if o.Stream == Stdout {
			out.Write(o.Data)
		} else {
			errOut.Write(o.Data)
		}
	}
	if out.String() != "a€ b" || errOut.String() != "e\n" || string(res.Stdout) != "a€ b" {
		t.Fatalf("streamed %q / %q, result %q", out.String(), errOut.String(), res.Stdout)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	env := newTestService(t, func(o *Options) { o.MaxConcurrent = 1 })
	info, err := env.svc.Start(t.Context(), StartRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("exec beyond the limit: %v", err)
	}
	if _, err := env.svc.Start(t.Context(), StartRequest{Argv: []string{"true"}}); !errors.Is(err, ErrTooMany) {
		t.Fatalf("start beyond the limit: %v", err)
	}
	if err := env.svc.Remove(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}}); err != nil {
		t.Fatalf("exec after the slot was freed: %v", err)
	}
	if got := value(t, env.svc.metrics.rejected); got != 2 {
		t.Fatalf("rejected = %v", got)
	}
}

// collect reads a subscription to its end.
func collect(t *testing.T, ch <-chan Event) []Event {
	t.Helper()
	var evs []Event
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		case <-timeout:
			t.Fatalf("the stream did not end; got %d events", len(evs))
		}
	}
}

func TestProcessStdinAndStream(t *testing.T) {
	env := newTestService(t, nil)
	svc := env.svc
	info, err := svc.Start(t.Context(), StartRequest{Argv: []string{"cat"}, Stdin: true, Tag: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Running || !info.StdinOpen || info.Tag != "echo" || !strings.HasPrefix(info.ID, "prc_") {
		t.Fatalf("info = %+v", info)
	}
	ch, err := svc.Subscribe(t.Context(), "echo", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"one\n", "two\n"} {
		if err := svc.SendStdin(t.Context(), info.ID, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.CloseStdin("echo"); err != nil {
		t.Fatal(err)
	}
	if err := svc.CloseStdin("echo"); !errors.Is(err, ErrConflict) {
		t.Fatalf("second close: %v", err)
	}
	evs := collect(t, ch)
	var out strings.Builder
	for _, ev := range evs[:len(evs)-1] {
		if ev.Type != EventStdout {
			t.Fatalf("event %+v", ev)
		}
		out.Write(ev.Data)
	}
	last := evs[len(evs)-1]
	if out.String() != "one\ntwo\n" || last.Type != EventExit || last.Exit.ExitCode != 0 || last.Exit.Running {
		t.Fatalf("output %q, last %+v", out.String(), last)
	}
	done, err := svc.Wait(t.Context(), "echo")
	if err != nil || done.Running || done.EndedAt.IsZero() || done.LastSeq != last.Seq {
		t.Fatalf("wait = %+v, %v", done, err)
	}
	if err := svc.SendStdin(t.Context(), info.ID, []byte("x")); !errors.Is(err, ErrConflict) {
		t.Fatalf("stdin after the end: %v", err)
	}
	if err := svc.Signal(info.ID, syscall.SIGTERM); !errors.Is(err, ErrConflict) {
		t.Fatalf("signal after the end: %v", err)
	}
	if n := env.rt.Open(); n != 0 {
		t.Fatalf("the process's sandbox is still open")
	}
	// Resume after the first event: the rest, exactly once.
	ch, err = svc.Subscribe(t.Context(), info.ID, evs[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	again := collect(t, ch)
	if len(again) != len(evs)-1 || again[0].Seq != evs[1].Seq {
		t.Fatalf("resumed %d events from seq %d; want %d from %d", len(again), again[0].Seq, len(evs)-1, evs[1].Seq)
	}
	// Past the end: nothing, and the channel closes.
	ch, _ = svc.Subscribe(t.Context(), info.ID, last.Seq)
	if got := collect(t, ch); len(got) != 0 {
		t.Fatalf("after the end: %+v", got)
	}
}

func TestProcessReplayDropsOldOutput(t *testing.T) {
	env := newTestService(t, func(o *Options) { o.OutputBuffer = 64 << 10 })
	svc := env.svc
	// 40 lines of 10 KB: more than the buffer holds.
	info, err := svc.Start(t.Context(), StartRequest{Argv: []string{"python3", "-c",
		"import sys\nfor i in range(40):\n    sys.stdout.write(str(i % 10) * 9999 + '\\n'); sys.stdout.flush()"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Wait(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	ch, err := svc.Subscribe(t.Context(), info.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, ch)
	if evs[0].Type != EventDropped || evs[0].Gap.FromSeq != 1 || evs[0].Gap.ToSeq != evs[0].Seq || evs[1].Seq != evs[0].Seq+1 {
		t.Fatalf("first events %+v %+v", evs[0], evs[1])
	}
	var kept int
	for _, ev := range evs[1 : len(evs)-1] {
		kept += len(ev.Data)
	}
	if kept > 64<<10 || kept == 0 {
		t.Fatalf("kept %d bytes with a 64 KiB buffer", kept)
	}
	// The offsets tell what was lost: everything before the first kept byte.
	if first := evs[1]; first.Offset+int64(kept) != 400000 {
		t.Fatalf("offset %d + kept %d != 400000", first.Offset, kept)
	}
	if ex := evs[len(evs)-1]; ex.Type != EventExit || ex.Exit.ExitCode != 0 {
		t.Fatalf("last = %+v", ex)
	}
}

func TestProcessTagsSignalsAndRemove(t *testing.T) {
	env := newTestService(t, nil)
	svc := env.svc
	a, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sleep", "60"}, Tag: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Start(t.Context(), StartRequest{Argv: []string{"true"}, Tag: "srv"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("duplicate tag: %v", err)
	}
	if got, err := svc.Get("srv"); err != nil || got.ID != a.ID {
		t.Fatalf("get by tag = %+v, %v", got, err)
	}
	if err := svc.Signal("srv", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done, err := svc.Wait(t.Context(), "srv")
	if err != nil || done.Signal != "terminated" || done.ExitCode != -1 {
		t.Fatalf("after SIGTERM: %+v, %v", done, err)
	}
	// The tag is free again; the newest process holding it wins.
	b, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sleep", "60"}, Tag: "srv"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := svc.Get("srv"); got.ID != b.ID {
		t.Fatalf("tag resolves to %s, want the newest %s", got.ID, b.ID)
	}
	if l := svc.List(); len(l) != 2 || l[0].ID != a.ID || l[1].ID != b.ID || !l[1].Running {
		t.Fatalf("list = %+v", l)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := svc.Wait(ctx, b.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with a deadline: %v", err)
	}
	if err := svc.Remove(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Get(b.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after remove: %v", err)
	}
	for _, bad := range []StartRequest{
		{},
		{Argv: []string{"true"}, Tag: "prc_x"},
		{Argv: []string{"true"}, Tag: "a\nb"},
		{Argv: []string{"true"}, Cwd: "../up"},
		{Argv: []string{"true"}, Files: map[string][]byte{"../x": nil}},
	} {
		if _, err := svc.Start(t.Context(), bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Start(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestProcessCwdAndEnv(t *testing.T) {
	env := newTestService(t, nil)
	info, err := env.svc.Start(t.Context(), StartRequest{
		Argv: []string{"sh", "-c", `pwd; echo "$GREETING"; cat f`}, Cwd: "sub",
		Env: map[string]string{"GREETING": "hello"}, Files: map[string][]byte{"sub/f": []byte("file")},
	})
	if err != nil {
		t.Fatal(err)
	}
	ch, _ := env.svc.Subscribe(t.Context(), info.ID, 0)
	var out strings.Builder
	for _, ev := range collect(t, ch) {
		out.Write(ev.Data)
	}
	if lines := strings.Split(out.String(), "\n"); len(lines) != 3 || filepath.Base(lines[0]) != "sub" || lines[1] != "hello" || lines[2] != "file" {
		t.Fatalf("output %q", out.String())
	}
}

func TestCloseKillsProcesses(t *testing.T) {
	rt := &exectest.Runtime{}
	reg := sandbox.NewRegistry()
	reg.Register(rt)
	svc, err := New(Options{Runtimes: reg, Resolve: fakeResolve, WorkDir: t.TempDir(), PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	info, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	execDone := make(chan Result)
	go func() {
		res, _ := svc.Exec(context.Background(), Request{Argv: []string{"sleep", "60"}})
		execDone <- res
	}()
	waitFor(t, "the exec to start", func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return len(svc.execs) == 1
	})
	if err := svc.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res := <-execDone; res.Signal != "killed" {
		t.Fatalf("the running exec was not killed: %+v", res)
	}
	got, _ := svc.Get(info.ID)
	if got.Running || got.Signal != "killed" {
		t.Fatalf("after Close: %+v", got)
	}
	if n := rt.Open(); n != 0 {
		t.Fatalf("%d sandboxes open after Close", n)
	}
	if _, err := svc.Exec(t.Context(), Request{Argv: []string{"true"}}); !errors.Is(err, ErrClosed) {
		t.Fatalf("exec after Close: %v", err)
	}
}

func TestViolationsReported(t *testing.T) {
	var seen []sandbox.Violation
	env := newTestService(t, func(o *Options) {
		o.OnViolation = func(task string, v sandbox.Violation) {
			if strings.HasPrefix(task, "exec:") {
				seen = append(seen, v)
			}
		}
	})
	env.rt.CloseViolations = []sandbox.Violation{{Kind: sandbox.ViolationFilesystem, Detail: "write to .mcp.json dropped", Target: ".mcp.json", Rule: "protected:.mcp.json", Action: "dropped"}}
	res, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 1 || len(seen) != 1 || seen[0].Target != ".mcp.json" {
		t.Fatalf("result %+v, seen %+v", res.Violations, seen)
	}
	var text strings.Builder
	if err := env.reg.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "\n# TYPE agentbox_policy_violations_total counter\n") {
		t.Fatal("agentbox_policy_violations_total is not registered")
	}
	if got := value(t, env.svc.metrics.violations.WithLabelValues("filesystem")); got != 1 {
		t.Fatalf("policy_violations_total{filesystem} = %v", got)
	}
}

// TestViolationsCoalesced checks that thousands of violations of one
// sandbox give a result and audit calls of bounded size whose counts add
// up, and the metric counts them all.
func TestViolationsCoalesced(t *testing.T) {
	const n, bound = 3000, 150
	var calls, audited int
	env := newTestService(t, func(o *Options) {
		o.OnViolation = func(_ string, v sandbox.Violation) { calls++; audited += v.N() }
	})
	for i := range n {
		target := ".mcp.json"
		if i%2 == 0 {
			target = fmt.Sprintf("f%d/.mcp.json", i)
		}
		env.rt.CloseViolations = append(env.rt.CloseViolations, sandbox.Violation{Kind: sandbox.ViolationFilesystem, Target: target, Rule: "protected", Action: "dropped"})
	}
	res, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, v := range res.Violations {
		total += v.N()
	}
	if len(res.Violations) > bound || total != n || calls > bound || audited != n {
		t.Fatalf("%d result entries counting %d, %d audit calls counting %d; want at most %d counting %d", len(res.Violations), total, calls, audited, bound, n)
	}
	if got := value(t, env.svc.metrics.violations.WithLabelValues("filesystem")); got != n {
		t.Fatalf("policy_violations_total{filesystem} = %v, want %d", got, n)
	}
}

func TestWarmPool(t *testing.T) {
	env := newTestService(t, func(o *Options) { o.PoolSize = 2; o.PoolIdle = 200 * time.Millisecond })
	svc := env.svc
	first, err := svc.Exec(t.Context(), Request{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if first.Sandbox.Warm {
		t.Fatal("the first exec of a policy cannot be warm")
	}
	waitFor(t, "the pool to fill", func() bool { return readyIn(svc.pool, "default") == 2 })
	seen := map[string]bool{first.Sandbox.ID: true}
	for range 3 {
		res, err := svc.Exec(t.Context(), Request{Argv: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Sandbox.Warm || seen[res.Sandbox.ID] {
			t.Fatalf("sandbox %s warm=%v; seen before: %v", res.Sandbox.ID, res.Sandbox.Warm, seen[res.Sandbox.ID])
		}
		seen[res.Sandbox.ID] = true
		waitFor(t, "the pool to refill", func() bool { return readyIn(svc.pool, "default") == 2 })
		if got := value(t, svc.metrics.poolReady); got != 2 {
			t.Fatalf("agentbox_sandbox_pool_ready = %v, want 2", got)
		}
	}
	// A task with files needs them before the sandbox exists: cold.
	res, err := svc.Exec(t.Context(), Request{Argv: []string{"cat", "f"}, Files: map[string][]byte{"f": []byte("x")}})
	if err != nil || res.Sandbox.Warm || string(res.Stdout) != "x" {
		t.Fatalf("exec with files: %+v, %v", res, err)
	}
	// No sandbox ever ran more than one task.
	if n := env.rt.MaxStarts(); n != 1 {
		t.Errorf("a sandbox was used %d times", n)
	}
	// Unused for PoolIdle: the ready sandboxes are closed.
	waitFor(t, "idle eviction", func() bool { return env.rt.Open() == 0 })
	if got := value(t, svc.metrics.pool.WithLabelValues("hit")); got != 3 {
		t.Fatalf("pool hits = %v", got)
	}
}

// TestWarmPoolRefillsAfterTheAnswer: the sandbox an exec takes from the
// pool is replaced once the exec has answered, not while it runs (the
// refill would take the CPU the exec runs on); an exec that missed the
// pool starts its filling at its end the same way.
func TestWarmPoolRefillsAfterTheAnswer(t *testing.T) {
	env := newTestService(t, func(o *Options) { o.PoolSize = 1 })
	svc := env.svc
	coming := func() int {
		svc.pool.mu.Lock()
		defer svc.pool.mu.Unlock()
		if k := svc.pool.keys["default"]; k != nil {
			return len(k.ready) + k.filling
		}
		return 0
	}
	for i, wantWarm := range []bool{false, true, true} {
		during := -1
		res, err := svc.ExecStream(t.Context(), Request{Argv: []string{"true"}}, Hooks{Started: func(SandboxInfo) { during = coming() }})
		if err != nil {
			t.Fatal(err)
		}
		if res.Sandbox.Warm != wantWarm || during != 0 {
			t.Fatalf("exec %d: warm %v (want %v), %d sandboxes ready or being made while it ran (want 0)", i, res.Sandbox.Warm, wantWarm, during)
		}
		waitFor(t, "the pool to refill", func() bool { return readyIn(svc.pool, "default") == 1 })
	}
}

func TestWarmPoolStopsOnCreateFailure(t *testing.T) {
	env := newTestService(t, func(o *Options) { o.PoolSize = 2 })
	for range 2 {
		if _, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}, Policy: PolicyRef{Preset: "unenforceable"}}); !errors.Is(err, sandbox.ErrUnenforceable) {
			t.Fatalf("err = %v", err)
		}
	}
	waitFor(t, "the fills to stop", func() bool {
		env.svc.pool.mu.Lock()
		defer env.svc.pool.mu.Unlock()
		k := env.svc.pool.keys["broken"]
		return k != nil && k.failed && k.filling == 0
	})
}

func readyIn(p *pool, key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if k := p.keys[key]; k != nil {
		return len(k.ready)
	}
	return 0
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// value reads a counter or gauge.
func value(t *testing.T, c interface{ Value() float64 }) float64 {
	t.Helper()
	return c.Value()
}

// TestTaskWorkspaces: every sandbox the service creates for an exec (and
// the exec pool) is marked Throwaway, so no runtime ever copies an exec's
// writes to a host directory; a process's sandbox (and the process pool's)
// commits into its own workspace directory, kept for the files API, with
// the hidden paths approved (the API's caller is the reviewer) and nothing
// else.
func TestTaskWorkspaces(t *testing.T) {
	env := newTestService(t, func(o *Options) { o.PoolSize = 1 })
	if _, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.svc.Exec(t.Context(), Request{Argv: []string{"true"}, Files: map[string][]byte{"f": []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	info, err := env.svc.Start(t.Context(), StartRequest{Argv: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.svc.Wait(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	w, err := env.svc.Workspace(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pools to fill", func() bool {
		return readyIn(env.svc.pool, "default") == 1 && readyIn(env.svc.pool, "default\x00keep") == 1
	})
	specs := env.rt.Specs()
	if len(specs) < 5 {
		t.Fatalf("%d sandboxes created, want at least 5 (two execs, a process, a pooled one of each)", len(specs))
	}
	throwaway, kept := 0, 0
	for i, s := range specs {
		switch {
		case s.Throwaway:
			throwaway++
		case s.Review == nil:
			t.Errorf("sandbox %d (workspace %s) commits without a review: its hidden paths would be dropped", i, s.Workspace)
		default:
			kept++
			if ok := s.Review(t.Context(), []sandbox.Change{{Path: ".env"}}); len(ok) != 1 || !ok[0] {
				t.Errorf("sandbox %d's review does not approve a hidden path: %v", i, ok)
			}
			if filepath.Dir(s.Workspace) != env.svc.opts.WorkDir {
				t.Errorf("sandbox %d commits into %s, not a task workspace of its own", i, s.Workspace)
			}
		}
	}
	if throwaway < 3 || kept != 2 {
		t.Errorf("%d throwaway sandboxes (want the two execs' and the exec pool's), %d kept (want the process's and the process pool's)", throwaway, kept)
	}
	for _, s := range specs {
		if s.Workspace == w.Dir && s.Throwaway {
			t.Errorf("the process's sandbox is throwaway")
		}
	}
}

// TestProcessCloseStdinAfterExit: a client sends a process its last line
// and closes its stdin in one request; the process exits on reading the
// line, before the close arrives. The close must succeed (nothing is left
// to close, nothing was lost), once; a second close is still a conflict.
func TestProcessCloseStdinAfterExit(t *testing.T) {
	env := newTestService(t, nil)
	svc := env.svc
	info, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sh", "-c", "read x; echo got $x"}, Stdin: true, Tag: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.SendStdin(t.Context(), info.ID, []byte("value\n")); err != nil {
		t.Fatal(err)
	}
	end, err := svc.Wait(t.Context(), info.ID)
	if err != nil || end.Running || end.ExitCode != 0 {
		t.Fatalf("wait: %+v, %v", end, err)
	}
	if err := svc.CloseStdin(info.ID); err != nil {
		t.Fatalf("close after exit: %v", err)
	}
	if err := svc.CloseStdin(info.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("second close: %v", err)
	}
}
