// Package gvisor is the "gvisor" isolation runtime: each sandbox is a gVisor
// container driven through the runsc CLI (Debian's runsc, ptrace platform),
// so the workload's system calls reach gVisor's user-space kernel instead of
// the host's.
//
// A sandbox is a warm container: Create writes an OCI bundle carrying the
// policy and starts it with a long-lived pause process; Start is then a
// `runsc exec` (~25 ms). The workspace is a host-side overlay whose upper
// layer is applied back by workspace.Commit, which drops protected paths.
// Every runsc call runs under a timeout: on hosts like ours some platforms
// (kvm) hang instead of failing.
//
// Network mode "none" is gVisor's netstack with only loopback
// (--network=none); "host" is the host's network. Mode "proxy" is exactly
// "none" to runsc, plus agentbox's egress path (egress.go): a forwarder of
// ours, started in the container at Create as root without capabilities,
// listens on 127.0.0.1:<proxy port>. Its stdin is one end of a host
// SOCK_SEQPACKET socketpair, the control socket: for each connection it
// accepts it sends a one-packet header naming the client process, and the
// host answers with one end of a fresh host socketpair (SCM_RIGHTS) whose
// other end the box's Egress listener yields as a sandbox.PeerConn; the
// forwarder copies bytes between the client and that end, half-closes
// included. The box is then a sandbox.EgressSandbox. Create returns once
// the forwarder listens and a check connection has crossed that path.
//
// There is no socket file in the container and runsc gets no --host-uds:
// --host-uds=open is the gofer's, for every mount, and would let the
// workload connect to any host unix socket in a bound path (policy read and
// write paths, the whole host root with read_outside_workspace); without it
// gVisor refuses those (EPERM), in mode proxy as in mode none. Of host
// sockets, the sandbox holds only what the host handed the forwarder:
// the control socket and one socketpair end per open connection, none of
// which the sandbox user can open through /proc/<pid>/fd (ENXIO). Where a
// host socket cannot be passed into gVisor, a proxy sandbox fails with
// ErrUnenforceable naming that mechanism.
package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/seccomp"
)

// Name is the runtime's isolation name.
const Name = "gvisor"

// Options configures the runtime.
type Options struct {
	// Runsc is the runsc binary (default: runsc on PATH).
	Runsc string
	// StateDir holds one directory per sandbox: its bundle, runsc state
	// root and workspace overlay (default: a directory under os.TempDir()).
	StateDir string
	// Platform is gVisor's platform (default "ptrace", the one that works
	// on nested-virtualization hosts).
	Platform string
	// HideDirs are host directories a sandbox reading outside its
	// workspace does not see (replaced by an empty directory; mount
	// points of the workspace or state directories below them are made
	// there), as process.Options.HideDirs; StateDir is always hidden.
	HideDirs []string
}

// Runtime is the gvisor runtime. It is safe for concurrent use.
type Runtime struct {
	opts Options

	mu     sync.Mutex
	probed bool
	probe  sandbox.Probe
	runsc  RunscInfo
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns the runtime; it runs nothing until Probe or Create.
func New(opts Options) *Runtime {
	if opts.Platform == "" {
		opts.Platform = "ptrace"
	}
	if opts.StateDir == "" {
		opts.StateDir = filepath.Join(os.TempDir(), "agentbox-gvisor")
	}
	return &Runtime{opts: opts}
}

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return Name }

// Timeouts of runsc calls.
const (
	smokeTimeout   = 30 * time.Second
	startTimeout   = 30 * time.Second
	controlTimeout = 10 * time.Second
)

// RunscInfo is what the runsc probe found.
type RunscInfo struct {
	Path    string `json:"path,omitempty"`
	Version string `json:"version,omitempty"`
	// OK: a `runsc do true` smoke run succeeded within its timeout.
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// ProbeRunsc finds runsc, reads its version, and runs `true` in a
// throw-away sandbox (--network=none, --ignore-cgroups so nothing is left
// in the cgroup tree, a private TMPDIR removed afterwards), all bounded by
// a timeout.
func ProbeRunsc(ctx context.Context, runsc, platform string) RunscInfo {
	if runsc == "" {
		runsc = "runsc"
	}
	if platform == "" {
		platform = "ptrace"
	}
	path, err := exec.LookPath(runsc)
	if err != nil {
		return RunscInfo{Detail: fmt.Sprintf("runsc not installed (Debian package runsc): %v", err)}
	}
	info := RunscInfo{Path: path}
	ctx, cancel := context.WithTimeout(ctx, smokeTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		info.Detail = fmt.Sprintf("runsc --version: %v", err)
		return info
	}
	info.Version = strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "runsc version "))
	tmp, err := os.MkdirTemp("", "agentbox-runsc-probe-")
	if err != nil {
		info.Detail = err.Error()
		return info
	}
	defer func() { _ = os.RemoveAll(tmp) }() // best effort: a temp dir
	cmd := exec.CommandContext(ctx, path, "--root", filepath.Join(tmp, "state"), "--platform", platform,
		"--network=none", "--ignore-cgroups", "do", "true")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + tmp}
	cmd.Dir = tmp
	cmd.WaitDelay = time.Second
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		if ctx.Err() != nil {
			info.Detail = fmt.Sprintf("runsc do true did not finish within %v (platform %s)", smokeTimeout, platform)
		} else {
			info.Detail = fmt.Sprintf("runsc do true: %v: %s", err, lastLine(out))
		}
		return info
	}
	info.OK = true
	info.Detail = fmt.Sprintf("%s, platform %s, `runsc do true` in %v", info.Version, platform, time.Since(start).Round(time.Millisecond))
	return info
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// Probe implements sandbox.Runtime; the first call runs the smoke test.
func (r *Runtime) Probe(ctx context.Context) sandbox.Probe {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.probed {
		return r.probe
	}
	r.runsc = ProbeRunsc(ctx, r.opts.Runsc, r.opts.Platform)
	p := sandbox.Probe{Runtime: Name, Available: r.runsc.OK,
		Mechanisms: []sandbox.Mechanism{{Name: "runsc", OK: r.runsc.OK, Detail: r.runsc.Detail}}}
	if geteuid() != 0 {
		// runsc needs root for its sandbox and gofer setup, and the
		// runtime for the workspace overlay and cgroups.
		p.Available = false
		p.Reason = "the gvisor runtime needs root"
	} else if !r.runsc.OK {
		p.Reason = r.runsc.Detail
	}
	r.probe, r.probed = p, true
	return p
}

var geteuid = os.Geteuid

// runscCmd builds a runsc command with the runtime's global flags. Each
// sandbox has its own runsc state root inside its bundle directory, so
// removing the directory after killing the cgroup is a complete cleanup
// (`runsc delete` would add more than a second per sandbox).
func (r *Runtime) runscCmd(ctx context.Context, root, network string, args ...string) *exec.Cmd {
	if network == sandbox.NetworkProxy {
		// Exactly "none" to runsc: the egress path is the forwarder's
		// inherited control socket (egress.go), not anything of runsc's.
		network = sandbox.NetworkNone
	}
	global := []string{"--root", root, "--platform", r.opts.Platform, "--network=" + network, "--oci-seccomp"}
	cmd := exec.CommandContext(ctx, r.runsc.Path, append(global, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.WaitDelay = time.Second
	// A runsc process does not outlive the daemon: what it drives (a
	// command, the egress forwarder) is gone with the container, which
	// is not a child of this one: the daemon's deathwatch removes it (see
	// Reap), or else the next agentbox to start.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// control runs a short runsc command (kill, delete) under controlTimeout.
// Its lifetime is detached from any request on purpose: cleanup must
// finish even when the request that triggered it is gone.
func (r *Runtime) control(root, network string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := r.runscCmd(ctx, root, network, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("runsc %s: %w: %s", args[0], err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Create implements sandbox.Runtime. The container outlives ctx on
// purpose: ctx bounds only its creation.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if p := r.Probe(ctx); !p.Available {
		return nil, fmt.Errorf("%w: gvisor: %s", sandbox.ErrUnavailable, p.Reason)
	}
	if err := checkSpec(&spec); err != nil {
		return nil, err
	}
	return create(ctx, r, spec)
}

// checkSpec normalizes spec and refuses what this runtime cannot enforce.
func checkSpec(spec *sandbox.Spec) error {
	if spec.Workspace == "" || !filepath.IsAbs(spec.Workspace) {
		return fmt.Errorf("gvisor: workspace %q must be an absolute path", spec.Workspace)
	}
	if spec.WorkspaceDir == "" {
		spec.WorkspaceDir = spec.Workspace
	}
	if spec.Hostname == "" {
		spec.Hostname = "sandbox"
	}
	switch spec.Network.Mode {
	case "", sandbox.NetworkNone:
		spec.Network.Mode = sandbox.NetworkNone
	case sandbox.NetworkHost:
	case sandbox.NetworkProxy:
		if p := spec.Network.Port(); p > 65535 {
			return fmt.Errorf("gvisor: proxy port %d out of range", p)
		}
	default:
		return fmt.Errorf("%w: gvisor: network mode %q", sandbox.ErrUnenforceable, spec.Network.Mode)
	}
	if err := seccomp.Check(spec.Syscalls.Profile, spec.Syscalls.Deny); err != nil {
		return fmt.Errorf("%w: gvisor: %w", sandbox.ErrUnenforceable, err)
	}
	if st, err := os.Stat(spec.Workspace); err != nil {
		return fmt.Errorf("gvisor: workspace %s is not a directory (%w)", spec.Workspace, err)
	} else if !st.IsDir() {
		return fmt.Errorf("gvisor: workspace %s is not a directory", spec.Workspace)
	}
	for _, p := range append(append([]string{spec.WorkspaceDir}, spec.ReadPaths...), spec.WritePaths...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("gvisor: path %q must be absolute", p)
		}
	}
	if err := sandbox.CheckStateDirs(spec); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	return nil
}

var errDead = errors.New("gvisor: the sandbox's container is no longer running")
