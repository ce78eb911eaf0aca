package acp

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/procrt"
)

// Defaults of Options.
const (
	DefaultStartTimeout     = procrt.DefaultStartTimeout
	DefaultInterruptTimeout = 4 * time.Second
	DefaultCloseGrace       = procrt.DefaultCloseGrace
	drainWait               = 2 * time.Second // for a terminal's output
)

// Agent describes one ACP agent: how its process is started and what the
// adapter claims for it. The generic adapter (New) does the rest.
type Agent struct {
	// Name is the registry name; Title is shown to people.
	Name, Title string
	// Binary finds the agent's executable: its path and version, or an
	// error saying how to install it.
	Binary func() (path, version string, err error)
	// Command builds the process for a session: arguments and the
	// complete environment (nothing is inherited), given the executable
	// and the adapter's private home directory (made on first use).
	Command func(cfg agent.Config, bin, home string) (args []string, env map[string]string, err error)
	// Dir holds the agent's homes: Dir/home, the adapter's own, shared
	// by its sessions on the host, and Dir/sessions/ID, a sandboxed
	// session's own (so that it sees no other session's files). "" is a
	// directory the adapter makes for itself on first use (os.MkdirTemp
	// under TempDir, the system's temp dir when ""): never a path fixed in
	// advance, which another local user could make first and swap for a
	// symbolic link.
	Dir, TempDir string
	// Setup, when set, writes the agent's config files into a home (its
	// argument) each time a session starts in it. A session's home holds
	// what its sandbox wrote: Setup writes through os.Root (writeIn).
	Setup func(home string) error
	// Caps is what the adapter claims for this agent; every true flag
	// must be backed by a test.
	Caps agent.Capabilities
	// PermissionModes maps agentbox permission modes ("", default,
	// accept_edits, bypass, plan) onto the agent's session mode ids. A
	// mode the agent does not offer is enforced by the adapter where it
	// can (accept_edits and bypass answer the agent's requests).
	PermissionModes map[string]string
	// SessionMeta, when set, is the _meta of session/new and
	// session/load: the agent's own extension options (e.g.
	// claude-code-acp's claudeCode.options).
	SessionMeta map[string]any
	// ServeFS advertises and serves fs/read_text_file and
	// fs/write_text_file, confined to the session's directory (never for
	// a sandboxed session: the sandbox's view of the files is not the
	// host's).
	ServeFS bool
	// ServeTerminal advertises and serves terminal/*: the agent's
	// commands run through agentbox (in the session's sandbox when it
	// has one). Off for the built-in agents, which run their commands
	// themselves and report their output in tool calls.
	ServeTerminal bool
	// ExitsOnEOF is true when the agent exits once its stdin is closed;
	// Close otherwise signals it at once.
	ExitsOnEOF bool
	// Providers, when set, reports the model APIs a session calls as its
	// environment configures them (agent.ProviderUser), so a sandboxed
	// session reaches them through the egress proxy's routes and its
	// credentials stay outside. Command must then configure the agent
	// from Providers(cfg) of the same cfg (Upstream, Key: in a sandbox,
	// the route and the placeholder), also when a config file names the
	// provider, and Setup must write no upstream or key into a home.
	Providers func(cfg agent.Config) []agent.Provider
}

// Options are the timing and debugging knobs of the generic adapter.
type Options struct {
	// Raw keeps the agent's original message in each event.
	Raw bool
	// StartTimeout bounds initialize, session/new (or load) and the mode
	// and model calls (DefaultStartTimeout).
	StartTimeout time.Duration
	// InterruptTimeout is how long an interrupt waits for the prompt to
	// end after session/cancel before the process is killed
	// (DefaultInterruptTimeout).
	InterruptTimeout time.Duration
	// CloseGrace is how long Close waits after closing stdin, and again
	// after SIGTERM, before it escalates (DefaultCloseGrace).
	CloseGrace time.Duration
}

// New returns the adapter of one ACP agent.
func New(spec Agent, opts Options) agent.Adapter {
	procrt.OrDefault(&opts.StartTimeout, DefaultStartTimeout)
	procrt.OrDefault(&opts.InterruptTimeout, DefaultInterruptTimeout)
	procrt.OrDefault(&opts.CloseGrace, DefaultCloseGrace)
	return &adapter{spec: spec, opts: opts, homes: procrt.Homes{
		Dir:    &agent.Dir{Path: spec.Dir, TempBase: spec.TempDir, Prefix: "agentbox-" + spec.Name + "-"},
		Shared: "home", Sessions: "sessions", Setup: spec.Setup,
	}}
}

type adapter struct {
	spec Agent
	opts Options

	// homes are the agent's homes below Agent.Dir (made on first use):
	// home, shared by its sessions on the host, and sessions/ID, a
	// sandboxed session's own.
	homes procrt.Homes
}

var _ agent.Adapter = (*adapter)(nil)

// Info implements agent.Adapter.
func (a *adapter) Info(context.Context) agent.Info {
	path, version, err := a.spec.Binary()
	return agent.Info{Name: a.spec.Name, Title: a.spec.Title, Capabilities: a.spec.Caps}.Located(path, version, err,
		fmt.Sprintf("%s is not installed", a.spec.Name))
}

// Start implements agent.Adapter: it starts the agent in the session's
// directory, initializes it and opens (or loads) its session.
func (a *adapter) Start(ctx context.Context, cfg agent.Config, host agent.Host) (agent.Session, error) {
	name := a.spec.Name
	bin, err := procrt.Locate(name, cfg.Cwd, a.spec.Binary, "the agent is not installed")
	if err != nil {
		return nil, err
	}
	if _, ok := knownPermissionModes[cfg.PermissionMode]; !ok {
		return nil, fmt.Errorf("%s: unknown permission mode %q", name, cfg.PermissionMode)
	}
	home, err := a.homes.For(cfg.SessionID, cfg.Sandbox != nil)
	if err != nil {
		return nil, fmt.Errorf("%s: home directory: %w", name, err)
	}
	args, env, err := a.spec.Command(cfg, bin, home)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	proc := &agent.Proc{Path: bin, Args: args, Env: procrt.EnvList(env), Dir: cfg.Cwd, Sandbox: cfg.Sandbox}
	return startSession(ctx, a, proc, cfg, host)
}

// Providers implements agent.ProviderUser.
func (a *adapter) Providers(cfg agent.Config) []agent.Provider {
	if a.spec.Providers == nil {
		return nil
	}
	return a.spec.Providers(cfg)
}

// RemoveState implements agent.SandboxNeeder: the home of a sandboxed
// session; nothing is made or written.
func (a *adapter) RemoveState(sessionID string) error { return a.homes.RemoveState(sessionID) }

// SandboxPaths implements agent.SandboxNeeder: the installed agent (read)
// and the session's own home (write).
func (a *adapter) SandboxPaths(cfg agent.Config) (read, write []string) {
	return a.homes.SandboxPaths(cfg.SessionID, a.spec.Binary)
}

var knownPermissionModes = map[string]struct{}{"": {}, "default": {}, "accept_edits": {}, "bypass": {}, "plan": {}}

// basePath is the PATH of agent processes (procrt.BasePath).
var basePath = procrt.BasePath
