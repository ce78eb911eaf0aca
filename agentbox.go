// Package agentbox runs the whole agentbox daemon inside a Go program
// (embedded mode) and hands back the same client a remote program would use.
//
//	srv, err := agentbox.Start(ctx, agentbox.Options{DataDir: dir})
//	if err != nil { ... }
//	defer srv.Close()
//	sess, err := srv.Client().CreateSession(ctx, client.CreateSession{Agent: "mock"})
//
// The daemon re-executes the running binary for its helper processes (each
// agent's process-tree supervisor, a sandbox's init, the deathwatch, the
// probe helpers), so the embedding program's main must call Init first,
// before anything else, and a test binary's TestMain likewise:
//
//	func main() {
//		agentbox.Init()
//		...
//	}
//
// Start refuses to run when Init has not been called.
package agentbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/reexec"
)

// Init turns this process into the helper its arguments name (the daemon
// starts them by re-executing the binary) and exits; otherwise it
// returns. Call it first in main (see the package doc).
func Init() { reexec.Init() }

// ErrNoInit is returned by Start when the program has not called Init.
var ErrNoInit = errors.New("agentbox: Init was not called first in main (see the package doc)")

// Options configures an embedded daemon. The zero value is valid: a loopback
// listener on a free port, data under the user's data directory.
type Options struct {
	// Listen defaults to 127.0.0.1:0 (a free loopback port). A
	// "unix:/path" listener is also accepted.
	Listen string
	// DataDir holds the database and workspaces.
	DataDir string
	// Token is required from clients; the returned Client sends it. When
	// empty, Start makes a random one, kept in memory (see Server.Token),
	// unless InsecureNoAuth is set.
	Token          string
	InsecureNoAuth bool
	// AllowedHosts and CORSOrigins are the names clients may reach the
	// daemon by and the browser origins allowed to call it (see
	// daemon.Config).
	AllowedHosts, CORSOrigins []string
	// PermissionTimeout denies unanswered permission requests (default 5m).
	PermissionTimeout time.Duration
	// ShutdownTimeout bounds Close (default 10s).
	ShutdownTimeout time.Duration
	// Logger receives the daemon's logs (default: discarded).
	Logger *slog.Logger
	// GlobalPolicy is the operator's sandbox policy file and SessionPolicy
	// the preset of sessions created without a policy (see
	// daemon.Config).
	GlobalPolicy, SessionPolicy string
	// SecretsFile, NetworkAskTimeout and EgressCAFile configure the egress
	// proxy (see daemon.Config).
	SecretsFile       string
	NetworkAskTimeout time.Duration
	EgressCAFile      string
	// AgentsFile adds ACP agents by configuration (see daemon.Config).
	AgentsFile string
	// MaxLiveSessions bounds the sessions with a live agent process
	// (default 64; negative: no cap) and IdleTimeout stops an agent idle
	// that long, its session resumed by its next message (default 5m;
	// negative: never); see daemon.Config.
	MaxLiveSessions int
	IdleTimeout     time.Duration
}

// Server is an embedded daemon.
type Server struct {
	d      *daemon.Daemon
	c      *client.Client
	cancel context.CancelFunc
	done   chan error
}

// Start opens the store, starts serving and returns once the daemon answers
// requests. The daemon runs until Close; ctx bounds only the start-up.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if !reexec.Initialized() {
		// The helpers would run the embedding program's main instead.
		return nil, ErrNoInit
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Token == "" && !opts.InsecureNoAuth {
		// Handed to the client in-process: no file needed.
		opts.Token = rand.Text()
	}
	d, err := daemon.New(ctx, daemon.Config{
		Listen: opts.Listen, DataDir: opts.DataDir, Token: opts.Token, InsecureNoAuth: opts.InsecureNoAuth,
		AllowedHosts: opts.AllowedHosts, CORSOrigins: opts.CORSOrigins,
		GlobalPolicy: opts.GlobalPolicy, SessionPolicy: opts.SessionPolicy,
		PermissionTimeout: opts.PermissionTimeout, ShutdownTimeout: opts.ShutdownTimeout, Log: opts.Logger,
		SecretsFile: opts.SecretsFile, NetworkAskTimeout: opts.NetworkAskTimeout, EgressCAFile: opts.EgressCAFile,
		AgentsFile: opts.AgentsFile, MaxLiveSessions: opts.MaxLiveSessions, IdleTimeout: opts.IdleTimeout,
	})
	if err != nil {
		return nil, err
	}
	c, err := client.New(d.URL(), client.WithToken(opts.Token))
	if err != nil {
		_ = d.Shutdown(ctx)
		return nil, fmt.Errorf("client for %s: %w", d.URL(), err)
	}
	// The daemon's lifetime is the Server's, not the start-up ctx's.
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Server{d: d, c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- d.Serve(runCtx) }()
	if _, err := c.Health(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("embedded daemon did not answer: %w", err)
	}
	return s, nil
}

// Client returns a client connected to the embedded daemon.
func (s *Server) Client() *client.Client { return s.c }

// URL is the daemon's base URL.
func (s *Server) URL() string { return s.d.URL() }

// Token is the bearer token the daemon requires ("" with InsecureNoAuth),
// for other clients of it.
func (s *Server) Token() string { return s.d.Token() }

// Close shuts the daemon down gracefully: live sessions are marked
// interrupted and their agents stopped.
func (s *Server) Close() error {
	s.cancel()
	return <-s.done
}
