package execution_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// benchExecClient serves a real execution service (the process runtime,
// the exec-default preset, pool warm sandboxes kept ready) through the real
// HTTP handler and returns a client of it.
func benchExecClient(b *testing.B, pool int) *client.Client {
	b.Helper()
	c, _ := benchExecService(b, pool, nil)
	return c
}

// benchExecService is benchExecClient with the service's metrics in reg
// (when not nil).
func benchExecService(b *testing.B, pool int, mreg metrics.Registerer) (*client.Client, *execution.Service) {
	b.Helper()
	rt := process.New(process.Options{Spares: 1}) // as the daemon runs it
	b.Cleanup(func() { _ = rt.Close() })          // its spare inits; runs after the service's Close below
	if p := rt.Probe(b.Context()); !p.Available {
		b.Skipf("the process runtime is unavailable here: %s", p.Reason)
	}
	reg := sandbox.NewRegistry()
	reg.Register(rt)
	svc, err := execution.New(execution.Options{Runtimes: reg, Resolve: execution.PolicyResolver(nil), WorkDir: b.TempDir(), PoolSize: pool,
		Network: egress.Tasks{Server: mustEgress(b)}, Registerer: mreg})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Exec: svc}, nil, nil, nil))
	c, err := client.New(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = svc.Close(ctx)
		c.CloseIdleConnections()
		srv.Close()
	})
	return c, svc
}

// metricValue reads one sample of reg's exposition ("name" or
// `name{label="value"}`); 0 when absent.
func metricValue(b *testing.B, reg *metrics.Registry, sample string) float64 {
	b.Helper()
	var text strings.Builder
	if err := reg.WriteText(&text); err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(text.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), sample+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

// reportMedian adds the median of d in milliseconds: the goals are medians,
// and ns/op is a mean.
func reportMedian(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	if len(d) > 0 {
		b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
	}
}

// BenchmarkExecTrue measures a cold POST /v1/exec of `true` (no pool: the
// sandbox is created for the request) end to end, beside
// `bwrap --unshare-all true` run from the same process in the same run (the
// goal is a ratio of the two: cold ≤ 1.0× bwrap). paced sends the same
// requests 100 ms apart (the pause untimed): the teardown of the last
// sandbox and the start of the next spare init are done by then, so it
// times a request's own path, which back to back shares two cores with
// both. bwrap gets what a
// comparable sandbox needs: /usr read-only, /proc, /dev, a tmpfs /tmp, a
// writable workspace, no capabilities.
//
//	go test ./internal/execution -run '^$' -bench ExecTrue -benchtime 30x -count 3
func BenchmarkExecTrue(b *testing.B) {
	b.Run("bwrap", func(b *testing.B) {
		bwrap, err := exec.LookPath("bwrap")
		if err != nil {
			b.Skip("bwrap is not installed (Debian package bubblewrap)")
		}
		args := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
			"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
			"--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
			"--bind", b.TempDir(), "/workspace", "--chdir", "/workspace", "/usr/bin/true"}
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if out, err := exec.Command(bwrap, args...).CombinedOutput(); err != nil {
				b.Fatalf("bwrap: %v: %s", err, out)
			}
			d = append(d, time.Since(t0))
		}
		reportMedian(b, d)
	})
	b.Run("cold", func(b *testing.B) {
		c := benchExecClient(b, 0)
		req := client.ExecRequest{Argv: []string{"true"}}
		run := func() client.ExecResult {
			res, err := c.Exec(b.Context(), req)
			if err != nil {
				b.Fatal(err)
			}
			if res.ExitCode != 0 {
				b.Fatalf("result = %+v", res)
			}
			return res
		}
		run() // first use: connections
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			if run().Sandbox.Warm {
				b.Fatal("a warm sandbox without a pool")
			}
			d = append(d, time.Since(t0))
		}
		reportMedian(b, d)
	})
	b.Run("paced", func(b *testing.B) {
		c := benchExecClient(b, 0)
		req := client.ExecRequest{Argv: []string{"true"}}
		var d []time.Duration
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			time.Sleep(100 * time.Millisecond) // the last teardown and the next spare are done
			b.StartTimer()
			t0 := time.Now()
			res, err := c.Exec(b.Context(), req)
			if err != nil {
				b.Fatal(err)
			}
			if res.ExitCode != 0 || res.Sandbox.Warm {
				b.Fatalf("result = %+v", res)
			}
			if i > 0 { // the first: connections
				d = append(d, time.Since(t0))
			}
		}
		reportMedian(b, d)
	})
}

// BenchmarkExecPython measures POST /v1/exec of `python3 -c "print(1)"`
// end to end: the client, the real HTTP handler, the exec-default preset
// and the process runtime, with the warm pool off (cold) and on: warm
// times requests that find the pool full (each waits, untimed, for the
// pool to refill after the previous one: the figure of a warm-pool
// request), burst sends them back to back (the pool then cannot always
// keep up: warm/op says how many found a warm sandbox). In the same run,
// the same python3 run directly, unsandboxed (direct): what the figure
// would cost if Python started for the request. zygote/op is the share of
// requests a pre-started interpreter ran (see docs/sandbox.md).
//
//	go test ./internal/execution -run '^$' -bench ExecPython -benchtime 20x
func BenchmarkExecPython(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		// The python3 the sandbox runs: the first in its default PATH (the
		// host's may be a slower wrapper, such as a pyenv shim).
		py := ""
		for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
			if st, err := os.Stat(dir + "/python3"); err == nil && st.Mode()&0o111 != 0 {
				py = dir + "/python3"
				break
			}
		}
		if py == "" {
			b.Skip("python3 is not installed")
		}
		var d []time.Duration
		for b.Loop() {
			t0 := time.Now()
			cmd := exec.Command(py, "-c", "print(1)")
			cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
			out, err := cmd.Output()
			if err != nil || string(out) != "1\n" {
				b.Fatalf("python3: %v %q", err, out)
			}
			d = append(d, time.Since(t0))
		}
		reportMedian(b, d)
	})
	const pool = 2
	for _, bc := range []struct {
		name  string
		pool  int
		paced bool
	}{{"cold", 0, false}, {"warm", pool, true}, {"burst", pool, false}} {
		b.Run(bc.name, func(b *testing.B) {
			reg := metrics.NewRegistry()
			c, _ := benchExecService(b, bc.pool, reg)
			req := client.ExecRequest{Language: client.LangPython, Code: "print(1)"}
			run := func() client.ExecResult {
				res, err := c.Exec(b.Context(), req)
				if err != nil {
					b.Fatal(err)
				}
				if res.Stdout != "1\n" || res.ExitCode != 0 {
					b.Fatalf("result = %+v", res)
				}
				return res
			}
			zygotes := func(result string) float64 {
				return metricValue(b, reg, `agentbox_exec_zygote_total{result="`+result+`"}`)
			}
			// full waits for the pool of Python zygotes to be full (the
			// plain sandboxes a burst falls back to are in a pool of their
			// own, counted in agentbox_sandbox_pool_ready too).
			full := func() {
				deadline := time.Now().Add(time.Minute)
				for zygotes("started")-zygotes("used")-zygotes("discarded") < float64(bc.pool) {
					if time.Now().After(deadline) {
						b.Fatal("the warm pool did not fill in a minute")
					}
					time.Sleep(2 * time.Millisecond)
				}
			}
			run() // first use: connections, and the pool starts filling
			if bc.pool > 0 {
				full()
			}
			used := zygotes("used")
			warm := 0
			var d []time.Duration
			var busy time.Duration
			b.ResetTimer()
			for range b.N {
				if bc.paced {
					b.StopTimer()
					full()
					b.StartTimer()
				}
				t0 := time.Now()
				if run().Sandbox.Warm {
					warm++
				}
				d = append(d, time.Since(t0))
				busy += d[len(d)-1]
			}
			b.StopTimer()
			b.ReportMetric(float64(busy.Microseconds())/1000/float64(b.N), "ms/op")
			b.ReportMetric(float64(warm)/float64(b.N), "warm/op")
			b.ReportMetric((zygotes("used")-used)/float64(b.N), "zygote/op")
			if n := zygotes("discarded") + zygotes("failed"); n > 0 {
				b.Logf("zygotes discarded or failed to start: %v", n)
			}
			reportMedian(b, d)
		})
	}
}

// TestRealHTTP runs an exec and a process through the real HTTP handler,
// the real policy presets and the process runtime.
func TestRealHTTP(t *testing.T) {
	rt := process.New(process.Options{})
	if p := rt.Probe(t.Context()); !p.Available {
		t.Skipf("the process runtime is unavailable here: %s", p.Reason)
	}
	reg := sandbox.NewRegistry()
	reg.Register(rt)
	svc, err := execution.New(execution.Options{Runtimes: reg, Resolve: execution.PolicyResolver(nil), WorkDir: t.TempDir(),
		Network: egress.Tasks{Server: mustEgress(t)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Exec: svc}, nil, nil, nil))
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = svc.Close(ctx)
		c.CloseIdleConnections()
		srv.Close()
	})
	ctx := t.Context()

	var chunks []string
	res, err := c.ExecStream(ctx, client.ExecRequest{Language: client.LangPython, Code: "import os; print(os.getuid()); print(open('in.txt').read())",
		Files: map[string]string{"in.txt": "placed"}, Policy: []byte(`"strict"`)},
		func(ch client.OutputChunk) { chunks = append(chunks, ch.Data) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "1000\nplaced\n" || res.ExitCode != 0 || res.Sandbox.Runtime != "process" || len(chunks) == 0 {
		t.Fatalf("result = %+v, chunks %q", res, chunks)
	}
	_, err = c.Exec(ctx, client.ExecRequest{Argv: []string{"true"}, PolicySource: &client.PolicySource{Name: "p.yaml", Text: "version: 1\nisolation: nope\n"}})
	if !client.HasProblemType(err, client.ProblemPolicy) || !strings.Contains(err.Error(), "p.yaml:2") {
		t.Fatalf("invalid policy: %v", err)
	}

	p, err := c.StartProcess(ctx, client.StartProcess{Argv: []string{"sh", "-c", "echo started; read x; echo got $x"}, Stdin: true, Tag: "reader"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendStdin(ctx, "reader", "value\n", true); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for ev, err := range c.ProcessStream(ctx, p.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Output != nil {
			out.WriteString(ev.Output.Data)
		}
	}
	if out.String() != "started\ngot value\n" {
		t.Fatalf("output %q", out.String())
	}
}

func mustEgress(tb testing.TB) *egress.Server {
	tb.Helper()
	eg, err := egress.New(egress.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return eg
}
