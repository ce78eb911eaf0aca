package agenttest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// A Host serves the HTTP API a Stack's sessions are created through: the
// session engine alone, its agents on the host (EngineHost), or a whole
// daemon whose sessions run in sandboxes (the one internal/daemon/daemontest
// registers with RegisterSandboxHost; this package cannot import the
// daemon, which imports every adapter).
type Host interface {
	// Name names the variant; Run's subtests run under it.
	Name() string
	// Probe returns why this machine cannot run the host's sessions, ""
	// when it can.
	Probe(ctx context.Context) string
	// Serve serves the API with the agents of reg until t ends and
	// returns its client.
	Serve(t testing.TB, reg *agent.Registry) *client.Client
	// Workspace returns a fresh directory for a session, as
	// /proc/PID/cwd shows it (symlinks resolved).
	Workspace(t testing.TB) string
	// Policy is the policy sessions are created with (nil: none).
	Policy() json.RawMessage
	// StateDir returns the directory the host's own agents are given for
	// their state (the daemon's data directory, their homes below
	// agents/NAME); it may be called before Serve.
	StateDir(t testing.TB) string
	// KillAgent kills the agent process of the session running in
	// sessionCwd (SIGKILL), as a crash would.
	KillAgent(t *testing.T, sessionCwd string)
	// Check checks the whole log of a session once it has been deleted:
	// that it ran as the host says (on the host, or in a sandbox with its
	// model requests through the egress proxy when it made any).
	Check(t testing.TB, sessionID string, log []event.Event)
}

// EngineHost is the unsandboxed Host (internal/stacktest): a SQLite store in a temporary
// directory, the session engine and the HTTP API on a real server; agents
// run on the host as children of the test process.
type EngineHost struct{}

// Name implements Host.
func (EngineHost) Name() string { return "host" }

// Probe implements Host: the engine runs anywhere.
func (EngineHost) Probe(context.Context) string { return "" }

// Serve implements Host with internal/stacktest's stack.
func (EngineHost) Serve(t testing.TB, reg *agent.Registry) *client.Client {
	t.Helper()
	return stacktest.New(t, stacktest.Options{Agents: reg}).Client
}

// Workspace implements Host: a t.TempDir, symlinks resolved.
func (EngineHost) Workspace(t testing.TB) string {
	cwd := t.TempDir()
	if r, err := filepath.EvalSymlinks(cwd); err == nil {
		cwd = r
	}
	return cwd
}

// Policy implements Host: none.
func (EngineHost) Policy() json.RawMessage { return nil }

// StateDir implements Host: a t.TempDir.
func (EngineHost) StateDir(t testing.TB) string { return t.TempDir() }

// KillAgent implements Host with KillAgentByCwd.
func (EngineHost) KillAgent(t *testing.T, cwd string) { KillAgentByCwd(t, cwd) }

// Check implements Host: the session ran on the host.
func (EngineHost) Check(t testing.TB, sid string, log []event.Event) {
	t.Helper()
	if st := Started(log); st != nil && st.Sandbox != nil {
		t.Errorf("session %s: session.started says sandbox %+v, want none (an unsandboxed host)", sid, st.Sandbox)
	}
}

// Started returns the first session.started of log, or nil.
func Started(log []event.Event) *event.SessionStarted {
	for _, e := range log {
		if e.Type == event.TypeSessionStarted {
			st := decode[event.SessionStarted](e)
			return &st
		}
	}
	return nil
}

var (
	sandboxMu    sync.Mutex
	sandboxHost  func() Host
	runtimeHosts = map[string]func() Host{}
)

// RegisterSandboxHost sets the Host of Run's sandboxed variant. It is
// called by internal/daemon/daemontest's init: an adapter package enables
// the variant with an external test file importing that package for its
// side effect (see the package doc).
func RegisterSandboxHost(h func() Host) {
	sandboxMu.Lock()
	defer sandboxMu.Unlock()
	sandboxHost = h
}

// RegisterSandboxHostOn sets the Host of Run's variant on isolation
// runtime rt ("gvisor"), which a Target opts into with
// Sandboxed.Runtimes; like RegisterSandboxHost, it is called by
// internal/daemon/daemontest's init.
func RegisterSandboxHostOn(rt string, h func() Host) {
	sandboxMu.Lock()
	defer sandboxMu.Unlock()
	runtimeHosts[rt] = h
}

func registeredSandboxHostOn(rt string) Host {
	sandboxMu.Lock()
	defer sandboxMu.Unlock()
	if h := runtimeHosts[rt]; h != nil {
		return h()
	}
	return nil
}

func registeredSandboxHost() Host {
	sandboxMu.Lock()
	defer sandboxMu.Unlock()
	if sandboxHost == nil {
		return nil
	}
	return sandboxHost()
}

// Sandboxed declares how an agent differs when the suite runs it in a
// sandbox (the agent-default policy, its model reached only through the
// egress proxy), each difference with its reason.
type Sandboxed struct {
	// Unsupported, when set, is why the agent cannot run sandboxed at
	// all: the variant is skipped with it.
	Unsupported string
	// Skip maps subtests (by name: "write", "interrupt", …) to why they
	// are not run sandboxed. A key naming no subtest fails the run.
	Skip map[string]string
	// KillAgent replaces the sandboxed host's KillAgent (which SIGKILLs
	// the process its sandbox's init started for the session).
	KillAgent func(t *testing.T, sessionCwd string)
	// Runtimes names isolation runtimes besides the process runtime
	// (agent-default's) the variant also runs on, each as subtest
	// "sandboxed-NAME" with the same Skip: "gvisor" runs the sessions
	// under agent-default with isolation gvisor (RegisterSandboxHostOn).
	Runtimes []string
	// New, when set, replaces Target.New: stateDir (Host.StateDir) is
	// where the daemon keeps its agents' state, for an adapter whose
	// sandboxed homes must lie there.
	New func(t *testing.T, llm LLM, stateDir string) agent.Adapter
}

// SkipAll returns a Sandboxed.Skip that skips every subtest with reason,
// for an agent that runs sandboxed but fails there for a reason not yet
// mended (unlike Unsupported, which the agent itself declares).
func SkipAll(reason string) map[string]string {
	m := map[string]string{}
	for _, c := range subtests {
		m[c.name] = reason
	}
	return m
}

// FullEnv is the environment variable that, set to "full", runs every
// subtest sandboxed; by default the sandboxed variant runs QuickSubtests
// only, to keep the default test run short.
const FullEnv = "AGENTBOX_CONFORMANCE"

// QuickSubtests are the subtests the sandboxed variant runs by default:
// the agent writes into its (overlay) workspace and reaches the model
// through the proxy; a permission is asked and honoured across the
// sandbox; the agent process dies inside its sandbox and the session ends.
var QuickSubtests = []string{"write", "permission_allow", "crash"}

// QuickOtherRuntimes is the default subset on the further runtimes of
// Target.Sandboxed.Runtimes (gVisor's ptrace platform makes every subtest
// there several times slower): a whole turn with a file written through
// the sandbox and the model reached through the proxy.
var QuickOtherRuntimes = []string{"write"}

func fullSandboxed() bool { return strings.EqualFold(os.Getenv(FullEnv), "full") }
