package execution_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

// BenchmarkExecPython measures POST /v1/exec of `python3 -c "print(1)"`
// end to end: the client, the real HTTP handler, the exec-default preset
// and the process runtime, with the warm pool off (cold) and on (warm).
//
//	go test ./internal/execution -run '^$' -bench ExecPython -benchtime 20x
func BenchmarkExecPython(b *testing.B) {
	for _, bc := range []struct {
		name string
		pool int
	}{{"cold", 0}, {"warm", 2}} {
		b.Run(bc.name, func(b *testing.B) {
			rt := process.New(process.Options{})
			if p := rt.Probe(b.Context()); !p.Available {
				b.Skipf("the process runtime is unavailable here: %s", p.Reason)
			}
			reg := sandbox.NewRegistry()
			reg.Register(rt)
			svc, err := execution.New(execution.Options{Runtimes: reg, Resolve: execution.PolicyResolver(nil), WorkDir: b.TempDir(), PoolSize: bc.pool,
				Network: egress.Tasks{Server: mustEgress(b)}})
			if err != nil {
				b.Fatal(err)
			}
			srv := httptest.NewServer(httpapi.New(httpapi.Config{Exec: svc}, nil, nil, nil))
			b.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = svc.Close(ctx)
				srv.Close()
			})
			c, err := client.New(srv.URL)
			if err != nil {
				b.Fatal(err)
			}
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
			run() // first use: connections, and the pool starts filling
			if bc.pool > 0 {
				time.Sleep(500 * time.Millisecond)
			}
			warm := 0
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if run().Sandbox.Warm {
					warm++
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/op")
			b.ReportMetric(float64(warm)/float64(b.N), "warm/op")
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
