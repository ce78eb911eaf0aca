// Package sandbox defines how agentbox runs a process tree under a policy:
// the resolved Spec a policy compiles into, the Runtime interface every
// isolation backend (process, gvisor, microvm) implements, the verdicts and
// violations a sandbox reports, and the registry runtimes are found in.
//
// Backends live in subpackages; the policy language lives in
// sandbox/policy and compiles into a Spec. Nothing here knows about agents,
// sessions or HTTP.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/errkind"
)

// Errors returned (wrapped) by runtimes. The HTTP layer maps them once.
var (
	// ErrUnenforceable: the host lacks a mechanism the spec needs, and
	// degraded isolation was not allowed. The message names the mechanism.
	ErrUnenforceable = errkind.New(errkind.Policy, "policy cannot be enforced on this host")
	// ErrUnavailable: the runtime cannot run here at all (e.g. microvm on
	// a host whose KVM cannot boot a guest).
	ErrUnavailable = errkind.New(errkind.Policy, "isolation runtime unavailable")
	// ErrUnknownRuntime: no runtime has the requested name.
	ErrUnknownRuntime = errkind.New(errkind.Policy, "unknown isolation runtime")
	// ErrNoTerminal: the runtime cannot give a command a controlling
	// terminal (Cmd.TTY).
	ErrNoTerminal = errkind.New(errkind.Invalid, "this isolation runtime gives processes no terminal")
	// ErrNoCommand: the command's program is not in the sandbox (not in
	// its PATH, or no such file): the caller's to fix, like a shell's 127.
	ErrNoCommand = errkind.New(errkind.Invalid, "no such program in the sandbox")
	// ErrClosed: the sandbox was already closed.
	ErrClosed = errors.New("sandbox closed")
)

// Spec is one sandbox, fully resolved: every path absolute, every limit a
// number, every default applied. policy.Compile produces it; runtimes only
// read it. A zero limit means "no limit of this kind".
type Spec struct {
	// Workspace is the host directory the sandboxed process works in.
	// It is mounted read-write at WorkspaceDir (through an overlay whose
	// changes are applied back by Commit, so protected files cannot be
	// created or changed).
	Workspace string
	// WorkspaceDir is where the workspace appears inside; defaults to
	// Workspace itself so paths an agent reports mean the same on the host.
	WorkspaceDir string
	// ReadPaths and WritePaths are extra host paths bound at the same path
	// inside, read-only and read-write.
	ReadPaths  []string
	WritePaths []string
	// StateDirs are host directories of the sandboxed program's own state
	// (an agent's home), each read-write at the same path inside through
	// an overlay like the workspace's: writes land in a writable layer
	// bounded by Limits.DiskBytes and Limits.Files less what the host
	// directory already holds, so the directory never grows past the
	// limits, and Commit and Close write them back with the checked
	// commit, without protected patterns (nothing on the host runs from
	// them). Unlike WritePaths, they count in the sandbox's limits.
	StateDirs []string
	// ReadOutsideWorkspace binds the host's root read-only (minus /proc,
	// /sys, /dev, home directories and the daemon's data dir) instead of
	// the minimal root of /usr and an /etc subset.
	ReadOutsideWorkspace bool
	// Protected lists gitignore-style patterns, relative to the workspace,
	// that must never be created, changed or removed from inside.
	Protected []string

	// Env is the complete environment inside. Nothing else is inherited.
	Env map[string]string

	Limits   Limits
	Syscalls Syscalls
	Network  Network

	// Hostname inside the UTS namespace; defaults to "sandbox".
	Hostname string
	// AllowDegraded lets a runtime start although a mechanism is missing;
	// each degradation is reported in Info.Degraded (and becomes an event).
	AllowDegraded bool

	// Review decides the workspace changes the commit holds back (hidden
	// paths the policy does not exempt: see package workspace). Nil means
	// nobody can answer: each such change is dropped and reported as a
	// Violation.
	Review ReviewFunc
	// ReviewExempt lists patterns (workspace.Match syntax) of hidden
	// paths the commit applies without review, e.g. "**/.gitignore".
	ReviewExempt []string
	// Throwaway marks a workspace nobody keeps (code execution): nothing
	// is ever copied back to the host; Commit and Close apply nothing.
	Throwaway bool
}

// Change is one workspace change the commit held back for review.
type Change struct {
	// Path is relative to the workspace, slash-separated.
	Path string `json:"path"`
	// Op is "create", "modify" or "delete".
	Op string `json:"op"`
	// Type is what the sandbox left there: "file", "dir", "symlink", or
	// "" for a deletion.
	Type string `json:"type,omitempty"`
	// Rule says why it is held, e.g. "hidden:.husky".
	Rule string `json:"rule"`
	// Diff is a unified diff of a text file's change (bounded), or a
	// one-line summary of anything else.
	Diff string `json:"diff,omitempty"`
	// Size is the new content's size in bytes (files).
	Size int64 `json:"size,omitempty"`
}

// ReviewFunc decides held-back changes: it returns one answer per change,
// true to apply it. It is called at most once per commit, with every
// change held in it, and must return by ctx's deadline; a change it does
// not approve is dropped and reported as a Violation.
type ReviewFunc func(ctx context.Context, changes []Change) []bool

// Limits are the resource limits of one sandbox.
type Limits struct {
	MemoryBytes int64         // memory (+swap) of the whole tree
	CPUs        float64       // CPU quota in cores, e.g. 0.5
	Pids        int64         // tasks in the tree
	Timeout     time.Duration // wall clock of one process, from its start
	DiskBytes   int64         // /tmp and the workspace's written data each
	OutputBytes int64         // stdout and stderr each, per process
	// Files bounds the entries (files, directories, links) in each
	// writable layer (/tmp, the workspace's upper layer) and what one
	// commit writes to the host.
	Files int64
}

// Syscalls selects the seccomp profile.
type Syscalls struct {
	// Profile is "default" (deny the escape-relevant syscalls) or
	// "strict" (also deny ptrace-like inspection of siblings, personality,
	// and a few more rarely needed calls).
	Profile string
	// Deny adds syscall names to the deny list (EPERM).
	Deny []string
}

// Network is the network view of a sandbox.
type Network struct {
	// Mode is "proxy" (own network namespace with only loopback, and
	// agentbox's egress proxy at 127.0.0.1:ProxyPort inside as the only
	// way out), "none" (own network namespace with only loopback, no
	// proxy), or "host" (the host's network, no egress control; only when
	// the operator's global policy permits it). Empty means "none".
	Mode string
	// ProxyPort is the port the proxy answers on inside (Mode proxy);
	// 0 means DefaultProxyPort.
	ProxyPort int
	// Default says what the proxy does with a destination no rule
	// settles: "deny" (the default) or "ask" (a per-connection approval).
	Default string
	// Allow and Deny are the proxy's rules (host[:port], *.domain[:port],
	// CIDR[:port]); deny wins. The runtime carries them for whoever serves
	// its Egress listener; it does not read them.
	Allow, Deny []string
	// Secrets maps environment variable names to the daemon secrets whose
	// placeholders they hold: the proxy injects each secret's value for
	// its host, and the sandbox only ever sees the placeholder.
	Secrets map[string]string
	// MaxConnections bounds the connections the sandbox holds open to its
	// proxy at once, and MaxConnectionRate the new ones per second (a
	// burst of one second's worth); past either, a connection is closed
	// before anything else is done with it and reported as a Violation.
	// 0 means the egress package's default. Runtimes bound the
	// connections their forwarders hand over by MaxConnections too.
	MaxConnections    int
	MaxConnectionRate int
}

// Network modes.
const (
	NetworkNone  = "none"
	NetworkProxy = "proxy"
	NetworkHost  = "host"
)

// DefaultProxyPort is where the egress proxy answers inside a sandbox.
const DefaultProxyPort = 3128

// Port returns the proxy port inside, DefaultProxyPort when unset.
func (n Network) Port() int {
	if n.ProxyPort > 0 {
		return n.ProxyPort
	}
	return DefaultProxyPort
}

// Defaults of Network.MaxConnections and Network.MaxConnectionRate: room
// for a package manager's parallel downloads and an agent's model calls,
// far below what would strain the daemon's descriptors.
const (
	DefaultMaxConnections    = 256
	DefaultMaxConnectionRate = 100
)

// ConnectionLimit returns MaxConnections, DefaultMaxConnections when unset.
func (n Network) ConnectionLimit() int {
	if n.MaxConnections > 0 {
		return n.MaxConnections
	}
	return DefaultMaxConnections
}

// HostConnectionLimit is how many of the sandbox's proxy connections a
// runtime's forwarder holds open on the host at most: the connection bound
// plus a little slack, as the proxy refuses (and reports) connections past
// the bound itself and closing them takes a moment.
func (n Network) HostConnectionLimit() int { return n.ConnectionLimit() + 16 }

// ConnectionRate returns MaxConnectionRate, DefaultMaxConnectionRate when
// unset.
func (n Network) ConnectionRate() int {
	if n.MaxConnectionRate > 0 {
		return n.MaxConnectionRate
	}
	return DefaultMaxConnectionRate
}

// EgressSandbox is implemented by runtimes whose sandboxes can have the
// egress proxy: for a sandbox created with Network.Mode "proxy", every
// connection a process inside opens to 127.0.0.1:ProxyPort arrives on the
// host side through Egress (nil for other modes). Whoever created the
// sandbox serves it (package egress) for the sandbox's whole life; Close
// closes it. Until it is served, connections wait.
type EgressSandbox interface {
	Sandbox
	Egress() net.Listener
}

// Peer is the process inside a sandbox at the other end of a connection,
// as the sandbox reports it: its name and command line are read from the
// sandbox's /proc, which the process itself controls (it can rename
// itself and rewrite its argv), so they are a claim, never a trusted
// fact. Build it with NewPeer, which sanitises and cuts both.
type Peer struct {
	// Pid is the process id inside the sandbox (0 when unknown).
	Pid int `json:"pid,omitempty"`
	// Name is the name the process gives itself (its comm), e.g. "curl",
	// sanitised, at most MaxPeerName bytes.
	Name string `json:"name,omitempty"`
	// CommandLine is its argv joined by spaces, sanitised, at most
	// MaxPeerCommandLine bytes.
	CommandLine string `json:"command_line,omitempty"`
}

// IsZero reports whether nothing is known about the peer.
func (p Peer) IsZero() bool { return p.Pid == 0 && p.Name == "" && p.CommandLine == "" }

// PeerConn is implemented by connections from an Egress listener whose
// runtime can tell which process opened them. Peer looks the process up
// when called (it costs a walk of /proc) and reports false when it is
// gone or cannot be found.
type PeerConn interface {
	net.Conn
	Peer() (Peer, bool)
}

// NetworkRequest is a destination the egress proxy asks about: one
// connection (or one plain-HTTP request) that no rule settles.
type NetworkRequest struct {
	Host string
	Port int
	// Via is how it was asked for: "http", "connect" or "socks5".
	Via  string
	Peer Peer
	// Timeout is how long to wait for an answer; past it the request is
	// denied by timeout.
	Timeout time.Duration
}

// NetworkAnswer is the decision for one NetworkRequest.
type NetworkAnswer struct {
	Allow bool
	// By is who decided: "user", "timeout" or "daemon".
	By string
	// Message says why, for the audit record and the denial.
	Message string
}

// Asker decides a NetworkRequest, for one connection only: nothing it
// answers may be remembered for another.
type Asker func(ctx context.Context, req NetworkRequest) (NetworkAnswer, error)

// Runtime creates sandboxes of one isolation kind.
type Runtime interface {
	// Name is the policy's isolation value: "process", "gvisor", "microvm".
	Name() string
	// Probe reports whether this runtime works here and which mechanisms
	// it has. It is cheap after the first call.
	Probe(ctx context.Context) Probe
	// Create builds a sandbox for spec. It fails with ErrUnenforceable
	// (naming the mechanism) when the host cannot enforce spec and
	// spec.AllowDegraded is false.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
}

// Sandbox is one isolated environment, used by one task or session and
// never reused across them. A runtime may create it ahead of use (the warm
// pool); Start must then cost about a millisecond.
type Sandbox interface {
	ID() string
	Info() Info
	// Start runs cmd inside the sandbox. The process's lifetime is bound
	// to the sandbox, not to ctx: ctx only bounds the start itself.
	Start(ctx context.Context, cmd Cmd) (Process, error)
	// Commit applies the workspace changes made so far to the host
	// workspace, except changes to protected paths, which are dropped and
	// returned as violations.
	Commit(ctx context.Context) ([]Violation, error)
	// Close kills everything still running (the whole tree), commits,
	// releases every resource (mounts, cgroups, temp dirs) and returns the
	// violations seen since the last Commit. It is safe to call twice.
	Close(ctx context.Context) ([]Violation, error)
}

// WorkspaceViewer is an optional ability of a Sandbox: the host opens
// the workspace as the sandbox's processes see it now (the overlay's
// merged view, changes not yet committed included), to read it. The root
// is the caller's to close; it shows the sandbox's view only while the
// sandbox is open (after Close it may show an empty or stale tree). It is
// for reading: changes made through it would land under the overlay,
// where the sandbox may never see them, so a caller changes the workspace
// by starting a command inside (Start) instead.
type WorkspaceViewer interface {
	Sandbox
	// ViewWorkspace opens the sandbox's current view of its workspace.
	// It fails with ErrClosed when the sandbox is closed or its processes
	// are gone.
	ViewWorkspace() (*os.Root, error)
}

// DirectWorkspace is an optional ability of a Sandbox whose processes
// work in the workspace directory itself, with nothing over it, beside
// the daemon that serves it: the daemon and the processes share one
// boundary that neither crosses (the boundary runtime, inside a
// provider's sandbox). Such a workspace is read and changed as a plain
// directory, under the same checks, since no view can differ from it.
type DirectWorkspace interface {
	Sandbox
	// DirectWorkspace is the workspace's directory.
	DirectWorkspace() string
}

// Cmd is one process to run inside a sandbox.
type Cmd struct {
	// Args[0] is looked up in the sandbox's PATH unless it holds a slash.
	Args []string
	// Env is added to Spec.Env (and wins over it).
	Env map[string]string
	// Dir defaults to the workspace.
	Dir string
	// Stdin, Stdout and Stderr work as in os/exec: an *os.File is passed
	// straight through, anything else is copied through a pipe; nil means
	// /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Timeout overrides Spec.Limits.Timeout for this process when > 0.
	Timeout time.Duration
	// TTY: Stdin, Stdout and Stderr are the same *os.File, the slave of a
	// pseudo-terminal whose master the caller keeps, and the command
	// gets it as its controlling terminal (it starts a new session). A
	// runtime that cannot do that refuses the command with an error
	// wrapping ErrNoTerminal, rather than run it without one.
	TTY bool
}

// Process is a process started in a sandbox.
type Process interface {
	// Pid is the host pid of the process (0 when the runtime has none).
	Pid() int
	// Signal sends sig to the process (SIGKILL kills its whole tree).
	Signal(sig os.Signal) error
	// Wait waits for the process to end and for its output to be copied.
	Wait() (Exit, error)
}

// TimeoutResetter is an optional ability of a Process: its timeout starts
// over. A process started ahead of its task (the warm pool's zygote) gets
// its task's timeout, counted from when the task is handed to it.
type TimeoutResetter interface {
	// ResetTimeout replaces the process's timeout with d counted from now
	// (d <= 0: none). A timeout that has already fired stays fired, and a
	// process that has ended is not affected.
	ResetTimeout(d time.Duration)
}

// Exit is how a sandboxed process ended.
type Exit struct {
	// Code is the exit status, or -1 when a signal ended the process.
	Code   int    `json:"exit_code"`
	Signal string `json:"signal,omitempty"`
	Verdict
}

// Usage is what a finished process tree used.
type Usage struct {
	MaxRSSBytes int64 `json:"max_rss"`
	CPUMillis   int64 `json:"cpu_ms"`
}

// Reason codes of a Verdict; they are the /v1/exec error codes.
const (
	ReasonTimeout       = "timeout"
	ReasonMemory        = "memory_limit_exceeded"
	ReasonPids          = "pids_limit_exceeded"
	ReasonDisk          = "disk_limit_exceeded"
	ReasonFiles         = "files_limit_exceeded"
	ReasonOutput        = "output_limit_exceeded"
	ReasonPolicyDenied  = "policy_denied"
	ReasonSandboxFailed = "sandbox_failed"
)

// Verdict is how a sandboxed process ended, beyond its exit status.
type Verdict struct {
	// Reason is empty when the process ended on its own within limits.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Usage   Usage  `json:"resources"`
}

// Violation kinds (the sandbox.violation event's kind).
const (
	ViolationFilesystem = "filesystem"
	ViolationSyscall    = "syscall"
	ViolationResource   = "resource"
	ViolationNetwork    = "network"
)

// Violation is one thing the sandbox refused.
type Violation struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
	// Path or target, when there is one.
	Target string `json:"target,omitempty"`
	// Host and Port are a network violation's destination.
	Host string `json:"host,omitempty"`
	Port int    `json:"port,omitempty"`
	// Process is the process that opened a refused connection, when known.
	Process *Peer `json:"process,omitempty"`
	// Rule is the policy rule that decided, e.g. "protected:.mcp.json".
	Rule   string `json:"rule,omitempty"`
	Action string `json:"action"` // blocked | asked | dropped
	// Count, First and Last are set on a summary of coalesced violations
	// (see Coalescer): how many it stands for (0 means one) and when the
	// first and last of them happened.
	Count int       `json:"count,omitempty"`
	First time.Time `json:"first_at,omitzero"`
	Last  time.Time `json:"last_at,omitzero"`
}

// N is how many violations v stands for: Count, or 1.
func (v Violation) N() int { return max(v.Count, 1) }

// Info describes a created sandbox: what was applied.
type Info struct {
	Runtime string `json:"runtime"`
	// Mechanisms lists what is in force, e.g. "userns", "landlock:abi7",
	// "seccomp", "cgroup:v1".
	Mechanisms []string `json:"mechanisms"`
	// Degraded lists what the spec asked for but the host could not do
	// (only when AllowDegraded).
	Degraded []string `json:"degraded,omitempty"`
}

// Mechanism is one row of the host probe (agentbox doctor).
type Mechanism struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Probe is what a runtime found on this host.
type Probe struct {
	Runtime    string      `json:"runtime"`
	Available  bool        `json:"available"`
	Reason     string      `json:"reason,omitempty"`
	Mechanisms []Mechanism `json:"mechanisms"`
}

// Registry maps isolation names to runtimes.
type Registry struct {
	mu       sync.RWMutex
	runtimes map[string]Runtime
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{runtimes: map[string]Runtime{}} }

// Register adds a runtime; it panics on an empty or duplicate name.
func (r *Registry) Register(rt Runtime) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := rt.Name()
	if name == "" {
		panic("sandbox: Register with empty name")
	}
	if _, dup := r.runtimes[name]; dup {
		panic(fmt.Sprintf("sandbox: Register called twice for %q", name))
	}
	r.runtimes[name] = rt
}

// Get returns the runtime called name or an error wrapping
// ErrUnknownRuntime.
func (r *Registry) Get(name string) (Runtime, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rt, ok := r.runtimes[name]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownRuntime, name)
	}
	return rt, nil
}

// All returns the runtimes sorted by name.
func (r *Registry) All() []Runtime {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Runtime, 0, len(r.runtimes))
	for _, rt := range r.runtimes {
		out = append(out, rt)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// LimitedWriter passes at most N bytes to W and counts the rest, so a
// process's output can be capped without blocking it.
type LimitedWriter struct {
	W       io.Writer
	N       int64
	written int64
	dropped int64
	mu      sync.Mutex
}

func (l *LimitedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	room := l.N - l.written
	if l.N <= 0 {
		room = int64(len(p))
	}
	keep := min(int64(len(p)), max(room, 0))
	if keep > 0 {
		if _, err := l.W.Write(p[:keep]); err != nil {
			return 0, err
		}
		l.written += keep
	}
	l.dropped += int64(len(p)) - keep
	return len(p), nil
}

// Truncated reports whether anything was dropped.
func (l *LimitedWriter) Truncated() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped > 0
}

// selfExe is the binary re-executed as a sandbox's init.
var selfExe = func() string {
	p, err := os.Executable()
	if err != nil {
		return "/proc/self/exe"
	}
	return p
}

// SelfExe returns the path of the running binary, which runtimes re-exec
// as the sandbox's init.
func SelfExe() string { return selfExe() }
