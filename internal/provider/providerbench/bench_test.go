// Package providerbench measures sessions on each sandbox provider that
// can run here against a session on this host, in the same run (issue 16:
// "time to first event and to a finished exec per provider vs local"):
// create → the first agent event of the first turn, and a turn running a
// command (provider exec is a turn's command until /v1/exec takes a
// provider), through a host daemon's API with the mock agent. scripts/bench
// prints the figures and the ratios to local.
//
//	go test -run '^$' -bench Providers -benchtime 3x ./internal/provider/providerbench/
//
// Rows: local (a session on this host, its commands in the process
// runtime's sandbox, policy agent-default: the base of the ratios),
// unsandboxed (on this host without a sandbox, as the inner daemons run
// the mock agent in the rows below), localproc (the relay to an
// inner daemon that is a child process here), docker (DOCKER_HOST, the
// private dockerd of scripts/dockerd; skipped without it), e2b and daytona
// (their fake control planes, a real inner daemon in a local box). A row
// that cannot run is skipped with the reason.
package providerbench_test

import (
	"context"
	"encoding/json"
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
)

func TestMain(m *testing.M) { providertest.Main(m) }

// rig is one row: a host daemon and what a session is created with.
type rig struct {
	name   string
	c      *client.Client
	create client.CreateSession
	skip   string // why the row cannot run here
}

// BenchmarkProviders runs the rows as sub-benchmarks; each iteration
// creates a session, runs a turn whose first step is a message and then a
// turn running a command, and deletes the session (its sandbox with it).
// The first run of each row (b.N = 1) also builds what the provider builds
// once (an image).
func BenchmarkProviders(b *testing.B) {
	bin := providertest.Binary(b)
	rigs := []rig{
		hostRig(b, "local", nil, client.CreateSession{Agent: "mock", Policy: json.RawMessage(`"agent-default"`)}),
		hostRig(b, "unsandboxed", nil, client.CreateSession{Agent: "mock"}),
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
	}
	for _, r := range rigs {
		b.Run(r.name, func(b *testing.B) {
			if r.skip != "" {
				b.Skip(r.skip)
			}
			var first, exec, create []float64
			for b.Loop() {
				f, e, c := r.session(b)
				first, exec, create = append(first, f), append(exec, e), append(create, c)
			}
			b.ReportMetric(median(create), "create-ms")
			b.ReportMetric(median(first), "first-event-ms")
			b.ReportMetric(median(exec), "exec-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// session runs one iteration: the milliseconds from the create request to
// the first agent event of the first turn, of a turn running a command,
// and of the create request alone.
func (r rig) session(b *testing.B) (firstMS, execMS, createMS float64) {
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
	firstMS = ms(firstAt.Sub(t0))
	after, err := r.c.LastSeq(ctx, s.ID)
	if err != nil {
		b.Fatal(err)
	}
	t1 := time.Now()
	tr, err = r.c.Send(ctx, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: "echo bench"}))
	if err != nil {
		b.Fatalf("%s: send: %v", r.name, err)
	}
	if tc, err := r.c.WaitTurn(ctx, s.ID, tr.TurnID, after, nil); err != nil || tc.StopReason != event.StopEndTurn {
		b.Fatalf("%s: the command's turn: %+v, %v", r.name, tc, err)
	}
	return firstMS, ms(time.Since(t1)), createMS
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
	return hostRig(b, name, &daemon.Config{Providers: reg, ProviderBinary: bin},
		client.CreateSession{Agent: "mock", Provider: p.Name()})
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
