// Package providerbench measures each sandbox provider that can run here
// against this host, in the same run (issue 16: "time to first event and
// to a finished exec per provider vs local"), through a host daemon's
// API: create → the first agent event of a session's first turn (mock
// agent), a finished POST /v1/exec with the provider, and a process
// started with the provider (POST /v1/processes) until its exit is
// reported. scripts/bench prints the figures and the ratios to local.
//
//	go test -run '^$' -bench Providers -benchtime 3x ./internal/provider/providerbench/
//
// Rows: local (a session on this host, its commands in the process
// runtime's sandbox, policy agent-default; the exec and the process on
// this host under exec-default: the base of the ratios), unsandboxed (a
// session on this host without a sandbox, as the inner daemons run the
// mock agent in the rows below; an exec is always sandboxed, so it has
// none), localproc (the relay to an inner daemon that is a child process
// here), docker (DOCKER_HOST, the private dockerd of scripts/dockerd;
// skipped without it), e2b, daytona and vercel (their fake control
// planes, a real inner daemon in a local box). A row that cannot run is
// skipped with the reason; an exec or process a provider refuses (Docker:
// its inner daemon has no runtime) is logged as a note, without figures.
package providerbench_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/daytona"
	"github.com/agentbox/agentbox/internal/provider/daytona/daytonatest"
	"github.com/agentbox/agentbox/internal/provider/docker"
	"github.com/agentbox/agentbox/internal/provider/e2b"
	"github.com/agentbox/agentbox/internal/provider/e2b/e2btest"
	"github.com/agentbox/agentbox/internal/provider/localproc"
	"github.com/agentbox/agentbox/internal/provider/providertest"
	"github.com/agentbox/agentbox/internal/provider/vercel"
	"github.com/agentbox/agentbox/internal/provider/vercel/verceltest"
)

func TestMain(m *testing.M) { providertest.Main(m) }

// rig is one row: a host daemon, what a session is created with, and the
// provider its execs and processes name ("" for this host).
type rig struct {
	name     string
	c        *client.Client
	create   client.CreateSession
	provider string
	noExec   bool   // the row has no exec of its own (unsandboxed)
	skip     string // why the row cannot run here
}

// BenchmarkProviders runs the rows as sub-benchmarks; each iteration
// creates a session, runs a turn whose first step is a message, deletes
// the session (its sandbox with it), then runs an exec and a process on
// the row's provider. The first run of each row (b.N = 1) also builds
// what the provider builds once (an image).
func BenchmarkProviders(b *testing.B) {
	bin := providertest.Binary(b)
	rigs := []rig{
		hostRig(b, "local", nil, client.CreateSession{Agent: "mock", Policy: json.RawMessage(`"agent-default"`)}),
		hostRig(b, "unsandboxed", nil, client.CreateSession{Agent: "mock"}).withoutExec(),
		providerRig(b, "localproc", bin, func() (provider.Provider, string) { return localproc.New(b.TempDir()), "" }),
		providerRig(b, "docker", bin, func() (provider.Provider, string) {
			host := os.Getenv("DOCKER_HOST")
			if host == "" {
				return nil, "no DOCKER_HOST (export DOCKER_HOST=$(scripts/dockerd))"
			}
			dir, err := os.MkdirTemp("", "abb-") // sockets' paths must stay short
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = os.RemoveAll(dir) })
			p, err := docker.New(docker.Config{Host: host, Dir: dir})
			if err != nil {
				return nil, err.Error()
			}
			b.Cleanup(func() { _ = p.Close() })
			if err := p.Health(b.Context()); err != nil {
				return nil, fmt.Sprintf("DOCKER_HOST=%s: %v", host, err)
			}
			return p, ""
		}),
		providerRig(b, "e2b", bin, func() (provider.Provider, string) {
			f := e2btest.New(b)
			p, err := e2b.New(e2b.Config{APIKey: f.APIKey, APIURL: f.URL(), SandboxURL: f.SandboxURL, RequestTimeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			return p, ""
		}),
		providerRig(b, "daytona", bin, func() (provider.Provider, string) {
			f := daytonatest.New(b)
			p, err := daytona.New(daytona.Config{APIKey: f.APIKey, APIURL: f.URL(), RequestTimeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			return p, ""
		}),
		providerRig(b, "vercel", bin, func() (provider.Provider, string) {
			f := verceltest.New(b)
			p, err := vercel.New(vercel.Config{Token: f.Token, TeamID: f.TeamID, ProjectID: f.ProjectID, APIURL: f.URL(), RequestTimeout: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			return p, ""
		}),
	}
	for _, r := range rigs {
		b.Run(r.name, func(b *testing.B) {
			if r.skip != "" {
				b.Skip(r.skip)
			}
			var first, create, exec, proc []float64
			execNote, procNote := "", ""
			for b.Loop() {
				f, c := r.session(b)
				first, create = append(first, f), append(create, c)
				if r.noExec {
					continue
				}
				if e, note := r.exec(b); note == "" {
					exec = append(exec, e)
				} else {
					execNote = note
				}
				if p, note := r.process(b); note == "" {
					proc = append(proc, p)
				} else {
					procNote = note
				}
			}
			b.ReportMetric(median(create), "create-ms")
			b.ReportMetric(median(first), "first-event-ms")
			if len(exec) > 0 {
				b.ReportMetric(median(exec), "exec-ms")
			}
			if len(proc) > 0 {
				b.ReportMetric(median(proc), "process-ms")
			}
			for _, n := range []string{execNote, procNote} {
				if n != "" {
					b.Logf("providerbench-note %s: %s", r.name, n)
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}

// session runs one iteration's session: the milliseconds from the
// create request to the first agent event of the first turn, and of the
// create request alone.
func (r rig) session(b *testing.B) (firstMS, createMS float64) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	s, err := r.c.CreateSession(ctx, r.create)
	if err != nil {
		b.Fatalf("%s: create: %v", r.name, err)
	}
	createMS = ms(time.Since(t0))
	defer func() {
		if err := r.c.DeleteSession(context.WithoutCancel(ctx), s.ID, true); err != nil {
			b.Errorf("%s: delete: %v", r.name, err)
		}
	}()
	tr, err := r.c.Send(ctx, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindText, Text: "first"}))
	if err != nil {
		b.Fatalf("%s: send: %v", r.name, err)
	}
	var firstAt time.Time
	tc, err := r.c.WaitTurn(ctx, s.ID, tr.TurnID, 0, func(e event.Event) error {
		if firstAt.IsZero() && e.Source == event.SourceAgent {
			firstAt = time.Now()
		}
		return nil
	})
	if err != nil || tc.StopReason != event.StopEndTurn || firstAt.IsZero() {
		b.Fatalf("%s: first turn: %+v, %v (agent event seen: %v)", r.name, tc, err, !firstAt.IsZero())
	}
	return ms(firstAt.Sub(t0)), createMS
}

// benchCommand is what the exec and the process run.
var benchCommand = []string{"sh", "-c", "echo bench"}

// exec runs a finished POST /v1/exec on the row's provider under
// exec-default and returns its milliseconds, or why the provider refused
// it (422 provider-unsupported) instead.
func (r rig) exec(b *testing.B) (float64, string) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	res, err := r.c.Exec(ctx, client.ExecRequest{Argv: benchCommand, Provider: r.provider, Policy: json.RawMessage(`"exec-default"`)})
	if note, ok := refused("exec", err); ok {
		return 0, note
	}
	if err != nil || res.ExitCode != 0 || res.Stdout != "bench\n" || res.Sandbox.Provider != r.provider {
		b.Fatalf("%s: exec: %+v, %v", r.name, res, err)
	}
	return ms(time.Since(t0)), ""
}

// process starts a process on the row's provider under exec-default and
// returns the milliseconds until its exit is reported (its sandbox
// destroyed, its workspace copied back), or why the provider refused it.
func (r rig) process(b *testing.B) (float64, string) {
	ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	p, err := r.c.StartProcess(ctx, client.StartProcess{Argv: benchCommand, Provider: r.provider, Policy: json.RawMessage(`"exec-default"`)})
	if note, ok := refused("process", err); ok {
		return 0, note
	}
	if err != nil {
		b.Fatalf("%s: process: %v", r.name, err)
	}
	w, err := r.c.Wait(ctx, p.ID)
	if err != nil || w.ExitCode == nil || *w.ExitCode != 0 || w.Sandbox.Provider != r.provider {
		b.Fatalf("%s: process: %+v, %v", r.name, w, err)
	}
	took := ms(time.Since(t0))
	if err := r.c.DeleteProcess(ctx, p.ID); err != nil {
		b.Fatalf("%s: delete the process: %v", r.name, err)
	}
	return took, ""
}

// refused says whether err is the provider's refusal, and names it.
func refused(what string, err error) (string, bool) {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.Type == client.ProblemProviderUnsupported {
		return what + " refused: " + ae.Detail, true
	}
	return "", false
}

// withoutExec is r without execs and processes.
func (r rig) withoutExec() rig {
	r.noExec = true
	return r
}

// providerRig is a host daemon with the provider make returns, its
// sessions created on it; make's reason skips the row.
func providerRig(b *testing.B, name, bin string, make func() (provider.Provider, string)) rig {
	p, why := make()
	if why != "" {
		return rig{name: name, skip: why}
	}
	reg := provider.NewRegistry()
	reg.Register(p)
	r := hostRig(b, name, &daemon.Config{Providers: reg, ProviderBinary: bin},
		client.CreateSession{Agent: "mock", Provider: p.Name()})
	r.provider = p.Name()
	return r
}

// hostRig starts a host daemon in this process (cfg's providers, if any)
// on a fresh data directory.
func hostRig(b *testing.B, name string, cfg *daemon.Config, create client.CreateSession) rig {
	c := daemon.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Listen, c.DataDir, c.Log = "127.0.0.1:0", b.TempDir(), slog.New(slog.DiscardHandler)
	c.StartTimeout = 3 * time.Minute
	d, err := daemon.New(b.Context(), c)
	if err != nil {
		b.Fatalf("%s: host daemon: %v", name, err)
	}
	// The daemon serves for the whole benchmark, not one request or
	// sub-benchmark: its own context, ended at cleanup.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	cl, err := client.New(d.URL(), client.WithToken(d.Token()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("%s: host daemon: %v", name, err)
		}
		cl.CloseIdleConnections()
	})
	return rig{name: name, c: cl, create: create}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
