package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/execution/exectest"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// execServer serves the real API handler with an execution service over
// the host runtime double; wrap, when set, wraps the handler.
func execServer(t *testing.T, wrap func(http.Handler) http.Handler) *client.Client {
	t.Helper()
	reg := sandbox.NewRegistry()
	reg.Register(&exectest.Runtime{})
	resolve := func(ref execution.PolicyRef) (execution.Policy, error) {
		if ref.Preset != "exec-default" {
			return nil, fmt.Errorf("%w: unknown preset %q", execution.ErrPolicyInvalid, ref.Preset)
		}
		return &exectest.Policy{Runtime: "host", Key: "default", Limits: sandbox.Limits{Timeout: time.Minute}}, nil
	}
	svc, err := execution.New(execution.Options{Runtimes: reg, Resolve: resolve, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(httpapi.Config{Exec: svc}, nil, nil, nil)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	c, err := client.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Close(ctx)
		c.CloseIdleConnections()
		srv.Close()
	})
	return c
}

func TestExec(t *testing.T) {
	c := execServer(t, nil)
	res, err := c.Exec(t.Context(), client.ExecRequest{Language: client.LangBash, Code: "echo out; echo err >&2; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 || res.Error != nil || res.Sandbox.ID == "" {
		t.Fatalf("result = %+v", res)
	}
	_, err = c.Exec(t.Context(), client.ExecRequest{Argv: []string{"true"}, Policy: []byte(`"nope"`)})
	if !client.HasProblemType(err, client.ProblemPolicy) || !strings.Contains(err.Error(), `unknown preset "nope"`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := c.Exec(t.Context(), client.ExecRequest{}); !client.IsValidation(err) {
		t.Fatalf("empty request: %v", err)
	}
}

func TestExecStream(t *testing.T) {
	c := execServer(t, nil)
	var out strings.Builder
	var last int64
	res, err := c.ExecStream(t.Context(), client.ExecRequest{Language: client.LangBash, Code: "for i in 1 2 3; do echo $i; sleep 0.05; done"},
		func(ch client.OutputChunk) {
			if ch.Seq != last+1 {
				t.Errorf("seq %d after %d", ch.Seq, last)
			}
			last = ch.Seq
			out.WriteString(ch.Data)
		})
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != "1\n2\n3\n" || res.Stdout != out.String() || res.ExitCode != 0 {
		t.Fatalf("streamed %q, result %+v", out.String(), res)
	}
	if _, err := c.ExecStream(t.Context(), client.ExecRequest{Argv: []string{"true"}, Policy: []byte(`"nope"`)}, nil); !client.HasProblemType(err, client.ProblemPolicy) {
		t.Fatalf("policy problem on the stream route: %v", err)
	}
}

func TestProcessLifecycle(t *testing.T) {
	c := execServer(t, nil)
	ctx := t.Context()
	p, err := c.StartProcess(ctx, client.StartProcess{Argv: []string{"cat"}, Stdin: true, Tag: "cat"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendStdin(ctx, "cat", "hello\n", false); err != nil {
		t.Fatal(err)
	}
	if err := c.SendStdin(ctx, p.ID, "bye\n", true); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var exit *client.Process
	for ev, err := range c.ProcessStream(ctx, "cat", 0) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case "stdout":
			out.WriteString(ev.Output.Data)
		case "exit":
			exit = ev.Exit
		default:
			t.Fatalf("event %+v", ev)
		}
	}
	if out.String() != "hello\nbye\n" || exit == nil || *exit.ExitCode != 0 {
		t.Fatalf("output %q, exit %+v", out.String(), exit)
	}
	w, err := c.Wait(ctx, p.ID)
	if err != nil || w.Status != client.ProcessExited {
		t.Fatalf("wait = %+v, %v", w, err)
	}
	if err := c.Signal(ctx, p.ID, "SIGTERM"); !client.IsConflict(err) {
		t.Fatalf("signal after the end: %v", err)
	}
	list, err := c.Processes(ctx)
	if err != nil || len(list.Processes) != 1 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	if err := c.DeleteProcess(ctx, "cat"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetProcess(ctx, p.ID); !client.IsNotFound(err) {
		t.Fatalf("get after delete: %v", err)
	}
	for _, err := range c.ProcessStream(ctx, p.ID, 0) {
		if !client.IsNotFound(err) {
			t.Fatalf("stream of a deleted process: %v", err)
		}
	}

	// Wait returns once a running process is signalled.
	p, err = c.StartProcess(ctx, client.StartProcess{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Signal(context.Background(), p.ID, "KILL") }()
	if w, err := c.Wait(ctx, p.ID); err != nil || w.Status != client.ProcessExited || w.Signal != "killed" {
		t.Fatalf("wait = %+v, %v", w, err)
	}
}

// cutOnce aborts the first process stream connection right after its
// first output event.
type cutOnce struct {
	http.ResponseWriter
	cut *atomic.Bool
	hit bool
}

func (w *cutOnce) Write(b []byte) (int, error) {
	if w.hit {
		panic(http.ErrAbortHandler)
	}
	if strings.Contains(string(b), "event: stdout") && w.cut.CompareAndSwap(false, true) {
		w.hit = true
	}
	return w.ResponseWriter.Write(b)
}

func (w *cutOnce) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func TestProcessStreamResumes(t *testing.T) {
	var cut atomic.Bool
	var streams atomic.Int32
	c := execServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasSuffix(r.URL.Path, "/stream") && r.Method == http.MethodGet {
				streams.Add(1)
				w = &cutOnce{ResponseWriter: w, cut: &cut}
			}
			h.ServeHTTP(w, r)
		})
	})
	ctx := t.Context()
	p, err := c.StartProcess(ctx, client.StartProcess{Argv: []string{"sh", "-c", "for i in 1 2 3 4 5; do echo $i; sleep 0.02; done"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	var seqs []int64
	for ev, err := range c.ProcessStream(ctx, p.ID, 0) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
		if ev.Output != nil {
			out.WriteString(ev.Output.Data)
		}
	}
	if streams.Load() < 2 {
		t.Fatalf("the stream was not cut (%d connections)", streams.Load())
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("seqs %v are not 1..n", seqs)
		}
	}
	if out.String() != "1\n2\n3\n4\n5\n" {
		t.Fatalf("output %q", out.String())
	}
}

func TestProcessStreamContextEnds(t *testing.T) {
	c := execServer(t, nil)
	p, err := c.StartProcess(t.Context(), client.StartProcess{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	for _, err := range c.ProcessStream(ctx, p.ID, 0) {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
	}
}

func TestProcessTerminal(t *testing.T) {
	c := execServer(t, nil)
	ctx := t.Context()
	p, err := c.StartProcess(ctx, client.StartProcess{Argv: []string{"sh", "-c", "read x; stty size"}, TTY: true, Rows: 20, Cols: 70})
	if err != nil || !p.TTY || p.Rows != 20 || p.Cols != 70 {
		t.Fatalf("started %+v, %v", p, err)
	}
	if err := c.Resize(ctx, p.ID, 33, 101); err != nil {
		t.Fatal(err)
	}
	if err := c.SendStdin(ctx, p.ID, "\n", false); err != nil {
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
	if !strings.HasSuffix(out.String(), "33 101\r\n") {
		t.Fatalf("output %q", out.String())
	}
	if err := c.Resize(ctx, p.ID, 10, 10); !client.HasProblemType(err, client.ProblemConflict) {
		t.Fatalf("resize after the end: %v", err)
	}
	if err := c.Resize(ctx, "", 10, 10); err == nil {
		t.Fatal("resize of no process")
	}
}
