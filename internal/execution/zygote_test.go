package execution

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// zygoteKey is the pool key of req's zygotes in svc.
func zygoteKey(t *testing.T, svc *Service, req Request) string {
	t.Helper()
	pol, err := svc.resolve(req.Policy)
	if err != nil {
		t.Fatal(err)
	}
	return pol.Hash() + "\x00zygote:" + req.Language
}

// warmExec runs req in a sandbox of svc's warm pool: it primes the pool of
// req's policy and language with a first exec, waits for a sandbox to be
// ready, and runs req in it. It says whether a zygote ran req.
func warmExec(t *testing.T, svc *Service, req Request) (Result, bool) {
	t.Helper()
	key := zygoteKey(t, svc, req)
	if readyIn(svc.pool, key) == 0 {
		if _, err := svc.Exec(t.Context(), Request{Language: req.Language, Code: "pass", Policy: req.Policy}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a zygote in the pool", func() bool { return readyIn(svc.pool, key) > 0 })
	}
	used := svc.metrics.zygote.WithLabelValues("used").Value()
	res, err := svc.Exec(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Sandbox.Warm {
		t.Fatalf("the exec did not run warm: %+v", res)
	}
	return res, svc.metrics.zygote.WithLabelValues("used").Value() == used+1
}

// zygoteCases are tasks whose results must not depend on whether a
// zygote ran them. A function, not a package variable: every process this
// test binary starts runs its package initialisation, sandbox inits
// included, and building 1.2 MB of stdin there made each sandbox start of
// the package's benchmarks cost what the daemon's never does.
func zygoteCases() []struct {
	name string
	req  Request
} {
	return []struct {
		name string
		req  Request
	}{
		{"print", Request{Code: "print(1)"}},
		{"unicode", Request{Code: "print('é ✓ 日本')"}},
		{"stdin", Request{Code: "import sys; sys.stdout.write(sys.stdin.read().upper())", Stdin: []byte("hello\nworld")}},
		{"stdin line", Request{Code: "x = input(); print(x * 2)", Stdin: []byte("ab\n")}},
		{"no stdin", Request{Code: "import sys; print(repr(sys.stdin.read()))"}},
		{"big stdin", Request{Code: "import sys; d = sys.stdin.buffer.read(); print(len(d), d[:3], d[-3:])", Stdin: bytes.Repeat([]byte("abc"), 400_000)}},
		{"stderr", Request{Code: "import sys; print('out'); print('err', file=sys.stderr)"}},
		{"exit status", Request{Code: "import sys; sys.exit(3)"}},
		{"exit message", Request{Code: "import sys; sys.exit('bye')"}},
		{"os._exit", Request{Code: "import os; print('lost?', flush=True); os._exit(5)"}},
		{"exception", Request{Code: "def f():\n    raise ValueError('x')\nprint('before')\nf()"}},
		{"syntax error", Request{Code: "def"}},
		{"indentation error", Request{Code: "  x = 1"}},
		{"nested syntax error", Request{Code: "exec('1 +')"}},
		{"keyboard interrupt", Request{Code: "raise KeyboardInterrupt"}},
		{"atexit", Request{Code: "import atexit; atexit.register(lambda: print('bye'))\nraise ValueError"}},
		{"namespace", Request{Code: "print(sorted(globals()), __name__, __spec__, __package__)"}},
		{"argv and path", Request{Code: "import sys, os; print(sys.argv, sys.path[0], os.path.basename(os.getcwd())[:5], sys.flags)"}},
		{"modules", Request{Code: "import sys; print(sorted(sys.modules))"}},
		{"long code", Request{Code: "# " + strings.Repeat("x", 80<<10) + "\nprint('long')"}},
		{"signal", Request{Code: "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"}},
		{"timeout", Request{Code: "import time; print('started', flush=True); time.sleep(60)", Timeout: 500 * time.Millisecond}},
		{"output over the cap", Request{Code: "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 100000)",
			Policy: PolicyRef{Inline: []byte(`{"version": 1, "resources": {"output": "64Ki"}}`)}}},
		{"stderr over the cap", Request{Code: "import sys\nfor _ in range(100):\n    sys.stderr.write('y' * 100000)",
			Policy: PolicyRef{Inline: []byte(`{"version": 1, "resources": {"output": "64Ki"}}`)}}},
	}
}

// TestRealZygoteMatchesCold runs the same tasks the normal way and in a
// warm-pool zygote, on the real runtime and presets, and compares
// everything of the results but the sandbox's id and the measurements.
func TestRealZygoteMatchesCold(t *testing.T) {
	cold, warm := realService(t, 0), realService(t, 1)
	for _, tc := range zygoteCases() {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Language = LangPython
			a, err := cold.Exec(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			b, zygote := warmExec(t, warm, req)
			if !zygote {
				t.Fatal("the task did not run in a zygote")
			}
			if a.Sandbox.Warm {
				t.Fatal("the cold exec ran warm")
			}
			if diff := compareResults(a, b); diff != "" {
				t.Fatalf("cold and zygote results differ:\n%s", diff)
			}
			if a.Usage.CPUMillis < 0 || b.Usage.MaxRSSBytes <= 0 || b.Duration <= 0 {
				t.Fatalf("usage: cold %+v, zygote %+v in %v", a.Usage, b.Usage, b.Duration)
			}
		})
	}
}

// compareResults says how two results of the same task differ, but for
// what changes between any two runs (ids, times, usage).
func compareResults(a, b Result) string {
	var d []string
	field := func(name string, x, y any) {
		if fmt.Sprint(x) != fmt.Sprint(y) {
			d = append(d, fmt.Sprintf("%s: cold %q, zygote %q", name, fmt.Sprint(x), fmt.Sprint(y)))
		}
	}
	field("exit code", a.ExitCode, b.ExitCode)
	field("signal", a.Signal, b.Signal)
	field("stdout", string(a.Stdout), string(b.Stdout))
	field("stderr", string(a.Stderr), string(b.Stderr))
	field("truncated", a.Truncated, b.Truncated)
	field("error", fmt.Sprintf("%+v", a.Error), fmt.Sprintf("%+v", b.Error))
	field("adjusted", a.Adjusted, b.Adjusted)
	field("runtime", a.Sandbox.Runtime, b.Sandbox.Runtime)
	field("mechanisms", a.Sandbox.Mechanisms, b.Sandbox.Mechanisms)
	field("degraded", a.Sandbox.Degraded, b.Sandbox.Degraded)
	strip := func(vs []any) []string {
		var out []string
		for _, v := range vs {
			out = append(out, fmt.Sprintf("%+v", v))
		}
		slices.Sort(out)
		return out
	}
	var va, vb []any
	for _, v := range a.Violations {
		va = append(va, struct{ Kind, Detail, Rule, Action string }{v.Kind, v.Detail, v.Rule, v.Action})
	}
	for _, v := range b.Violations {
		vb = append(vb, struct{ Kind, Detail, Rule, Action string }{v.Kind, v.Detail, v.Rule, v.Action})
	}
	field("violations", strip(va), strip(vb))
	return strings.Join(d, "\n")
}

// TestRealZygoteSandboxPerTask: a zygote runs one task, in a sandbox no
// other task sees; what a task leaves behind is gone for the next.
func TestRealZygoteSandboxPerTask(t *testing.T) {
	svc := realService(t, 2)
	seen := map[string]bool{}
	for i := range 4 {
		res, zygote := warmExec(t, svc, Request{Language: LangPython,
			Code: fmt.Sprintf("import os\nprint(sorted(os.listdir('.')), sorted(os.listdir('/tmp')), len(os.listdir('/proc')))\nopen('left-%d', 'w').write('x')\nopen('/tmp/left-%d', 'w').write('x')", i, i)})
		if res.ExitCode != 0 || !zygote || seen[res.Sandbox.ID] {
			t.Fatalf("exec %d: %+v (zygote %v, sandbox seen before: %v)", i, res, zygote, seen[res.Sandbox.ID])
		}
		seen[res.Sandbox.ID] = true
		if strings.Contains(string(res.Stdout), "left-") {
			t.Fatalf("exec %d sees what an earlier task left: %s", i, res.Stdout)
		}
	}
}

// TestRealZygoteFallback: when the zygote cannot start, or writes
// anything before its task, the pool says so in the metrics and serves
// plain sandboxes: the tasks still run, the normal way.
func TestRealZygoteFallback(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
	}{
		{"exits", "import sys; sys.exit(1)"},
		{"no interpreter", ""},
		{"writes to stdout", "print('not the ready line', flush=True); import sys; sys.stdin.read()"},
		{"writes to stderr", "import os, sys, time; os.write(2, b'noise'); time.sleep(0.2); os.write(1, b'\\x00agentbox-zygote-ready\\n'); sys.stdin.read()"},
		{"writes after the ready line", "import os, sys; os.write(1, b'\\x00agentbox-zygote-ready\\nmore'); sys.stdin.read()"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			saved := zygoteScripts[LangPython]
			zygoteScripts[LangPython] = []string{"python3", "-c", tc.script}
			if tc.script == "" {
				zygoteScripts[LangPython] = []string{"/no/such/python3"}
			}
			t.Cleanup(func() { zygoteScripts[LangPython] = saved })
			svc := realService(t, 1)
			req := Request{Language: LangPython, Code: "import sys; print(sys.stdin.read() * 2); sys.exit(4)", Stdin: []byte("ab")}
			res, zygote := warmExec(t, svc, req)
			if string(res.Stdout) != "abab\n" || res.ExitCode != 4 || res.Error != nil || zygote {
				t.Fatalf("result = %+v (zygote %v)", res, zygote)
			}
			if n := svc.metrics.zygote.WithLabelValues("failed").Value(); n < 1 {
				t.Fatalf("failed zygotes = %v", n)
			}
			if n := svc.metrics.zygote.WithLabelValues("used").Value(); n != 0 {
				t.Fatalf("used zygotes = %v", n)
			}
		})
	}
}

// TestRealZygoteDiscarded: a zygote that died in the pool is found out
// when taken; the task runs in a new sandbox and the metrics say so.
func TestRealZygoteDiscarded(t *testing.T) {
	svc := realService(t, 1)
	req := Request{Language: LangPython, Code: "print(6 * 7)"}
	key := zygoteKey(t, svc, req)
	if _, err := svc.Exec(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a zygote in the pool", func() bool { return readyIn(svc.pool, key) > 0 })
	svc.pool.mu.Lock()
	z, id := svc.pool.keys[key].ready[0].zyg, svc.pool.keys[key].ready[0].sb.ID()
	svc.pool.mu.Unlock()
	if err := z.p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-z.done
	res, err := svc.Exec(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	// A plain warm sandbox (the first exec filled that pool too) or a new one.
	if res.Sandbox.ID == id || string(res.Stdout) != "42\n" || res.ExitCode != 0 {
		t.Fatalf("result = %+v", res)
	}
	if n := svc.metrics.zygote.WithLabelValues("discarded").Value(); n != 1 {
		t.Fatalf("discarded zygotes = %v", n)
	}
}

func TestZygoteLang(t *testing.T) {
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"python", Request{Language: LangPython, Code: "print(1)"}, LangPython},
		{"node has none", Request{Language: LangNode, Code: "1"}, ""},
		{"argv", Request{Argv: []string{"python3", "-c", "print(1)"}}, ""},
		{"files", Request{Language: LangPython, Code: "print(1)", Files: map[string][]byte{"f": nil}}, ""},
		{"code in a file", Request{Language: LangPython, Code: strings.Repeat("#", maxInlineCode+1)}, ""},
		{"NUL", Request{Language: LangPython, Code: "print(1)\x00"}, ""},
		{"not UTF-8", Request{Language: LangPython, Code: "print('\xff')"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			argv, _, err := tt.req.argv()
			if err != nil {
				t.Fatal(err)
			}
			if got := zygoteLang(tt.req, argv); got != tt.want {
				t.Fatalf("zygoteLang = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReadyWriter(t *testing.T) {
	tests := []struct {
		name   string
		want   string
		writes []string
		ready  bool
		fine   bool
	}{
		{"whole line", "ok\n", []string{"ok\n"}, true, true},
		{"in pieces", "ok\n", []string{"o", "", "k", "\n"}, true, true},
		{"not yet", "ok\n", []string{"ok"}, false, true},
		{"other bytes", "ok\n", []string{"no\n"}, false, false},
		{"more after", "ok\n", []string{"ok\nmore"}, true, false},
		{"more later", "ok\n", []string{"ok\n", "x"}, true, false},
		{"nothing wanted", "", nil, true, true},
		{"nothing wanted, something came", "", []string{"x"}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newReadyWriter(tt.want)
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := isClosed(w.ready); got != tt.ready {
				t.Fatalf("ready = %v, want %v", got, tt.ready)
			}
			if w.fine() != tt.fine || isClosed(w.unfit) == tt.fine {
				t.Fatalf("fine = %v, unfit closed = %v, want fine %v", w.fine(), isClosed(w.unfit), tt.fine)
			}
			var task bytes.Buffer
			if got := w.attach(&task); got != (tt.ready && tt.fine) {
				t.Fatalf("attach = %v", got)
			}
			_, _ = w.Write([]byte("task output"))
			if want := map[bool]string{true: "task output", false: ""}[tt.ready && tt.fine]; task.String() != want {
				t.Fatalf("the task got %q, want %q", task.String(), want)
			}
		})
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// FuzzReadyWriter feeds the ready line's parser what a hostile sandbox
// could write, in any cutting: it is ready only when exactly the line
// came, fit only when nothing else did, and passes nothing on before a
// task is attached.
func FuzzReadyWriter(f *testing.F) {
	f.Add([]byte(zygoteReady), uint8(3))
	f.Add([]byte(zygoteReady+"x"), uint8(1))
	f.Add([]byte("\x00agentbox"), uint8(0))
	f.Add([]byte{}, uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		w := newReadyWriter(zygoteReady)
		var leaked bytes.Buffer
		step := int(cut%16) + 1
		for rest := data; len(rest) > 0; {
			n := min(step, len(rest))
			if m, err := w.Write(rest[:n]); m != n || err != nil {
				t.Fatalf("Write = %d, %v", m, err)
			}
			rest = rest[n:]
		}
		isReady, isFine := isClosed(w.ready), w.fine()
		if want := bytes.HasPrefix(data, []byte(zygoteReady)); isReady != want {
			t.Fatalf("ready = %v for %q", isReady, data)
		}
		if want := strings.HasPrefix(zygoteReady, string(data)); isFine != want {
			t.Fatalf("fine = %v for %q", isFine, data)
		}
		if w.attach(io.MultiWriter(&leaked)) != (isReady && isFine) {
			t.Fatal("attach disagrees with ready and fine")
		}
		if leaked.Len() != 0 {
			t.Fatalf("passed on before the attach: %q", leaked.Bytes())
		}
	})
}
