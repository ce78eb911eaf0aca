// Package stacktest builds the real daemon stack — SQLite store, engine, HTTP
// API over a real socket — for tests: the agent conformance suite
// (internal/agenttest), the SDK's tests (client) and the CLI's
// (internal/cli) all run against it, so no test talks to a second,
// hand-written implementation of the API. Faults wraps the API's handler to
// inject stream faults (cuts, duplicates, gaps, odd line endings) on its
// SSE streams.
package stacktest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// Options configure New.
type Options struct {
	// Agents are the agents sessions are created with (required). The
	// package registers none itself: the adapters' own tests use it
	// through internal/agenttest, and an import of an adapter here would
	// be a cycle for them; tests of the API's clients register
	// internal/agent/mock.
	Agents *agent.Registry
	// API configures the HTTP API (token, heartbeat, retry, secrets, …).
	API httpapi.Config
	// Store configures the SQLite store (its defaults: every write synced
	// to disk before it is acknowledged). Tests of the API's clients, which
	// cannot see a power failure, may take sqlite.SyncNormal.
	Store sqlite.Options
	// Engine, when set, adjusts the engine's configuration before the
	// engine is built (its Store and Agents are already set).
	Engine func(*engine.Config)
	// Faults, when set, injects stream faults into the API's event
	// streams (its Later is set from the store when nil).
	Faults *Faults
	// Wrap, when set, wraps the API's handler (outside Faults), e.g. to
	// answer some requests itself first.
	Wrap func(http.Handler) http.Handler
	// ClientOptions are given to the Stack's client.
	ClientOptions []client.Option
}

// Stack is a running stack. Everything is shut down when the test ends: the
// engine first (its sessions end and are recorded), then the server, then
// the store.
type Stack struct {
	// URL is the API's base URL.
	URL string
	// Client is a client of the API (with Options.ClientOptions).
	Client *client.Client
	// Engine is the session engine behind the API.
	Engine *engine.Manager
	// Store is the engine's SQLite store.
	Store *sqlite.Store
	// Dir is the stack's data directory (the database, the workspaces of
	// sessions created without a working directory).
	Dir string
}

// New builds the stack in a temporary directory and serves it on a
// loopback port until t ends.
func New(t testing.TB, opts Options) *Stack {
	t.Helper()
	reg := opts.Agents
	if reg == nil {
		t.Fatal("stacktest: Options needs Agents")
	}
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "agentbox.db"), opts.Store)
	if err != nil {
		t.Fatal(err)
	}
	cfg := engine.Config{Store: st, Agents: reg, WorkspaceDir: filepath.Join(dir, "workspaces"), PermissionTimeout: time.Minute}
	if opts.Engine != nil {
		opts.Engine(&cfg)
	}
	mgr := engine.New(cfg)
	if opts.API.Files == nil {
		opts.API.Files = stackFiles{mgr}
	}
	h := httpapi.New(opts.API, mgr, metrics.New(), nil)
	if f := opts.Faults; f != nil {
		if f.Later == nil {
			f.Later = func(sid string, seq int64) bool {
				evs, err := st.Events(context.Background(), sid, seq, 1)
				return err == nil && len(evs) > 0
			}
		}
		h = f.Wrap(h)
	}
	if opts.Wrap != nil {
		h = opts.Wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		// The shutdown is detached from the test's context, which has
		// ended by the time cleanups run.
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := mgr.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
		_ = st.Close()
	})
	c, err := client.New(srv.URL, opts.ClientOptions...)
	if err != nil {
		t.Fatal(err)
	}
	return &Stack{URL: srv.URL, Client: c, Engine: mgr, Store: st, Dir: dir}
}
