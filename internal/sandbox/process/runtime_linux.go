// Package process is the "process" isolation runtime: a pure-Go sandbox
// built from Linux namespaces, an overlay workspace, pivot_root into a
// minimal read-only root, an unprivileged uid, no capabilities,
// no_new_privs, Landlock, seccomp and a cgroup, around a long-lived init
// that starts each command on request (so a pre-created sandbox starts a
// command in about a millisecond).
//
// Any binary that imports this package can host sandboxes: the package's
// init function turns the process into the sandbox init when argv[0] is
// "agentbox-sandbox-init", and never returns.
package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

// argv[0] values that turn this binary into a helper.
const (
	initArg0   = "agentbox-sandbox-init"
	usernsArg0 = "agentbox-sandbox-userns"
)

// Ids inside every sandbox.
const (
	sandboxUID  = 1000
	sandboxHome = "/home/sandbox"
	defaultTmp  = 64 << 20
	readyWait   = 30 * time.Second
)

// Options configures the runtime.
type Options struct {
	// HideDirs are host directories hidden (replaced by an empty
	// directory) when a spec reads outside the workspace, e.g. the
	// daemon's data dir. /proc, /sys, /dev, /root, /home, /run and
	// /var/run are always hidden.
	HideDirs []string
	// UIDBase is the first host uid used for sandboxes (default 100000).
	// Sandbox slot N maps root inside to UIDBase+N and the sandbox user to
	// UIDBase+1000+N, and a slot is held host-wide (package owner), so two
	// live sandboxes on the host never share a host uid, whichever
	// agentbox process made them.
	UIDBase int
	// Spares is how many pre-started sandbox inits the runtime keeps
	// (0: none, at most 4): each is an init started in fresh namespaces
	// with no policy applied, which one Create adopts and turns into its
	// sandbox, so the Create skips the init's start (see spare_linux.go).
	// They are started after the first Create, refilled after each, and
	// ended by Close.
	Spares int
}

// Runtime is the process runtime. It is safe for concurrent use.
type Runtime struct {
	opts Options

	probeOnce sync.Once
	probe     sandbox.Probe

	spares *sparePool // nil without Options.Spares
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns a process runtime.
func New(opts Options) *Runtime {
	if opts.UIDBase <= 0 {
		opts.UIDBase = 100000
	}
	r := &Runtime{opts: opts}
	if n := min(opts.Spares, MaxSpares); n > 0 {
		r.spares = &sparePool{max: n, start: func() (*initProc, error) {
			slot, err := r.allocSlot()
			if err != nil {
				return nil, err
			}
			return r.startInit(slot, true)
		}}
	}
	return r
}

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return "process" }

// slotCount is the number of uid slots: sandboxes live at once on the
// host, per UIDBase.
const slotCount = 1000

// allocSlot takes a uid slot. Slots are host-wide (package owner: a lock
// file per slot under /run/agentbox, held for the sandbox's life), because
// host uids are: two agentbox processes on one host never give two live
// sandboxes the same uids, and a process that dies frees its slots.
func (r *Runtime) allocSlot() (*owner.Slot, error) {
	s, err := owner.Default().Slot("uid-"+strconv.Itoa(r.opts.UIDBase), slotCount)
	if err != nil {
		return nil, fmt.Errorf("process sandbox: uid slot: %w", err)
	}
	return s, nil
}

// Probe implements sandbox.Runtime.
func (r *Runtime) Probe(ctx context.Context) sandbox.Probe {
	r.probeOnce.Do(func() { r.probe = probeHost() })
	return r.probe
}

func probeHost() sandbox.Probe {
	p := sandbox.Probe{Runtime: "process"}
	add := func(name string, ok bool, detail string) {
		p.Mechanisms = append(p.Mechanisms, sandbox.Mechanism{Name: name, OK: ok, Detail: detail})
	}
	b, err := os.ReadFile("/proc/sys/user/max_user_namespaces")
	userns := err == nil && strings.TrimSpace(string(b)) != "0"
	add("userns", userns, strings.TrimSpace(string(b)))
	fsys, _ := os.ReadFile("/proc/filesystems")
	add("overlay", bytes.Contains(fsys, []byte("\toverlay\n")), "overlayfs with userxattr")
	abi := landlockABI()
	add("landlock", abi > 0, fmt.Sprintf("abi %d", abi))
	_, err = os.Stat("/proc/sys/kernel/seccomp/actions_avail")
	add("seccomp", err == nil, "")
	add("cgroup", newCgroup != nil, "")
	why := privilege()
	add("root", why == "", "CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID in the host's user namespace")
	p.Available = userns && why == ""
	switch {
	case why != "":
		p.Reason = why
	case !userns:
		p.Reason = "user namespaces are disabled"
	}
	return p
}

// Create implements sandbox.Runtime. The sandbox's processes outlive ctx
// on purpose: ctx bounds only the building of the sandbox.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (_ sandbox.Sandbox, err error) {
	// Fail closed, by name, on a host where no sandbox can be made (an
	// unprivileged daemon), before any helper fails for a reason of its own.
	if p := r.Probe(ctx); !p.Available {
		return nil, fmt.Errorf("%w: process: %s", sandbox.ErrUnavailable, p.Reason)
	}
	if err := normalize(&spec); err != nil {
		return nil, err
	}
	b := &box{
		spec:   spec,
		procs:  map[uint64]*proc{},
		dead:   make(chan struct{}),
		ready:  make(chan message, 1),
		info:   sandbox.Info{Runtime: "process"},
		slot:   -1,
		initFD: -1,
	}
	var cgroupReady func() (soft, hard error) // joins the cgroup creation started with the init
	defer func() {
		if err != nil {
			if cgroupReady != nil {
				_, _ = cgroupReady() // its group, if any, goes with destroy
			}
			if derr := b.destroy(); derr != nil {
				err = errors.Join(err, derr) // a leaked cgroup: say so
			}
		}
	}()
	// degrade records a missing mechanism, or fails when it may not be.
	degrade := func(mech string, cause error) error {
		if !spec.AllowDegraded {
			return fmt.Errorf("%w: %s: %w", sandbox.ErrUnenforceable, mech, cause)
		}
		b.info.Degraded = append(b.info.Degraded, mech)
		return nil
	}

	// The init: a spare started ahead (spare_linux.go), or one started
	// now, by the same code, before the host-side mounts are made so
	// that its Go start-up overlaps them. Either waits on its config pipe
	// with no policy applied until configure below.
	newNet := spec.Network.Mode != sandbox.NetworkHost
	in := r.spares.take(newNet)
	b.spare = in != nil
	if in == nil {
		var slot *owner.Slot
		if slot, err = r.allocSlot(); err == nil {
			in, err = r.startInit(slot, newNet)
		}
	}
	// The next spare starts now, failed or not (see take), while this
	// init builds its sandbox: the launcher starts it, and its Go
	// start-up runs beside this Create rather than after it.
	r.spares.fill()
	if err != nil {
		return nil, err
	}
	b.adopt(in)
	b.uidBase = r.opts.UIDBase
	rootUID, userUID := b.rootUID(), b.userUID()

	// The cgroup was made as the init started, and the init put in it
	// (initProc.makeCgroup): long before for a spare, beside the
	// host-side mounts below for a cold init. It has no limits yet: the
	// gate below writes the policy's, before the config.
	limited := spec.Limits.MemoryBytes > 0 || spec.Limits.CPUs > 0 || spec.Limits.Pids > 0
	if in.cgDone == nil {
		if limited {
			if err := degrade("cgroup", errors.New("no cgroup support in this build")); err != nil {
				return nil, err
			}
		}
	} else {
		var once sync.Once
		cgroupReady = func() (soft, hard error) {
			once.Do(func() {
				<-in.cgDone
				// The sandbox's from now on: destroy removes them.
				b.cg, b.cgRecord = in.cg, in.cgRecord
			})
			return in.cgErr, in.cgHardErr
		}
	}
	// joinCgroup waits for the cgroup, writes the limits and applies the
	// degradation rules.
	joinCgroup := func() error {
		if cgroupReady == nil {
			return nil
		}
		cerr, hard := cgroupReady()
		if hard != nil {
			return hard
		}
		if cerr == nil {
			cerr = b.cg.SetLimits(cgroup.Limits{MemoryBytes: spec.Limits.MemoryBytes, CPUs: spec.Limits.CPUs, Pids: spec.Limits.Pids})
		}
		if cerr != nil {
			if limited {
				return degrade("cgroup", cerr)
			}
			return nil
		}
		b.info.Mechanisms = append(b.info.Mechanisms, "cgroup")
		return nil
	}

	cfg := initConfig{

		WorkspaceDir:         spec.WorkspaceDir,
		ReadOutsideWorkspace: spec.ReadOutsideWorkspace,
		HideDirs:             r.opts.HideDirs,
		Home:                 sandboxHome,
		Hostname:             spec.Hostname,
		NetNone:              spec.Network.Mode != sandbox.NetworkHost,
		EgressPort:           egressPort(spec.Network),
		ShmBytes:             tmpSize(spec),
		ShmFiles:             spec.Limits.Files,
		Syscalls:             spec.Syscalls,
		AllowDegraded:        spec.AllowDegraded,
	}
	var files []*os.File
	// addMount passes f to the init, to be mounted at target in role
	// (index: which state directory, for the state roles).
	addMount := func(f *os.File, target, role string, index int) {
		files = append(files, f)
		b.closers = append(b.closers, f)
		cfg.Mounts = append(cfg.Mounts, detachedMount{Target: target, Role: role, Index: index})
	}

	// Workspace: overlay of an idmapped lower and a sized tmpfs upper.
	idmapped := true
	lower, err := r.idmappedClone(spec.Workspace, userUID, false)
	if err != nil {
		if err := degrade("idmap", err); err != nil {
			return nil, err
		}
		idmapped = false
		if lower, err = cloneTree(spec.Workspace, false, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, -1); err != nil {
			return nil, err
		}
	}
	if idmapped {
		b.info.Mechanisms = append(b.info.Mechanisms, "idmap")
	}
	addMount(lower, spec.WorkspaceDir, "lower", 0)
	upper, err := newTmpfs(spec.Limits.DiskBytes, sandbox.TmpfsInodes(spec.Limits.Files, sandbox.InodesUpper), 0o755, rootUID, rootUID)
	if err != nil {
		return nil, err
	}
	b.upper = upper
	addMount(upper, spec.WorkspaceDir, "upper", 0)
	if err := prepareUpper(upper, spec.Workspace, rootUID, userUID); err != nil {
		return nil, err
	}
	cfg.Overlay = &overlayConfig{Target: spec.WorkspaceDir}
	// The supervisor reads the upper layer through its own mount fd.
	b.committer = &workspace.Committer{
		Upper:     fmt.Sprintf("/proc/self/fd/%d/u", upper.Fd()),
		Workspace: spec.Workspace,
		Options:   workspace.OptionsFor(spec),
	}

	// Scratch: /tmp and $HOME, each capped at the disk and file limits.
	tmp, err := newTmpfs(tmpSize(spec), sandbox.TmpfsInodes(spec.Limits.Files, sandbox.InodesTmpfs), 0o1777, rootUID, rootUID)
	if err != nil {
		return nil, err
	}
	b.tmp = tmp
	addMount(tmp, "/tmp", "", 0)
	home, err := newTmpfs(tmpSize(spec), sandbox.TmpfsInodes(spec.Limits.Files, sandbox.InodesTmpfs), 0o700, userUID, userUID)
	if err != nil {
		return nil, err
	}
	b.home = home
	addMount(home, sandboxHome, "", 0)

	if spec.ReadOutsideWorkspace {
		root, err := cloneTree("/", true, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, -1)
		if err != nil {
			return nil, err
		}
		addMount(root, "/", "root", 0)
	}
	for _, p := range spec.ReadPaths {
		f, err := cloneTree(p, true, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, -1)
		if err != nil {
			return nil, fmt.Errorf("read path: %w", err)
		}
		addMount(f, p, "", 0)
	}
	for i, p := range spec.StateDirs {
		if err := b.addStateDir(r, i, p, rootUID, userUID, addMount, degrade, &cfg); err != nil {
			return nil, err
		}
	}
	for _, p := range spec.WritePaths {
		f, err := r.idmappedClone(p, userUID, true)
		if err != nil {
			if derr := degrade("idmap", err); derr != nil {
				return nil, fmt.Errorf("write path: %w", derr)
			}
			if f, err = cloneTree(p, true, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, -1); err != nil {
				return nil, fmt.Errorf("write path: %w", err)
			}
		}
		addMount(f, p, "", 0)
		cfg.WritableDirs = append(cfg.WritableDirs, p)
	}
	cfg.WritableDirs = append(cfg.WritableDirs, spec.WorkspaceDir, "/tmp", sandboxHome, "/dev/shm")

	if err := b.configure(cfg, files, joinCgroup); err != nil {
		return nil, err
	}
	ready, err := b.waitReady(ctx)
	if err == nil && cfg.EgressPort > 0 && ready.Error == "" && ready.Missing == "" {
		b.egress = newEgressListener(b.egressSock, cfg.EgressPort, b.initPid, spec.Network.HostConnectionLimit())
		b.egressSock = nil
	}
	if err != nil {
		return nil, err
	}
	if ready.Missing != "" {
		// The init refused: AllowDegraded was false, or the failure is
		// not one that may be degraded.
		return nil, fmt.Errorf("%w: %s: %s", sandbox.ErrUnenforceable, ready.Missing, ready.Error)
	}
	if ready.Error != "" {
		return nil, fmt.Errorf("sandbox init: %s", ready.Error)
	}
	b.info.Mechanisms = append(b.info.Mechanisms, ready.Mechanisms...)
	b.info.Degraded = append(b.info.Degraded, ready.Degraded...)
	return b, nil
}

// addStateDir sets up state directory p (Spec.StateDirs) as the workspace
// is set up: an overlay of the host directory, idmapped, and a tmpfs upper
// layer sized by the limits less what p already holds, so that the host
// directory, which Commit writes back to, stays within them.
func (b *box) addStateDir(r *Runtime, i int, p string, rootUID, userUID int,
	addMount func(f *os.File, target, role string, index int), degrade func(string, error) error, cfg *initConfig,
) error {
	lower, err := r.idmappedClone(p, userUID, false)
	if err != nil {
		if err := degrade("idmap", err); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
		if lower, err = cloneTree(p, false, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, -1); err != nil {
			return fmt.Errorf("state directory: %w", err)
		}
	}
	addMount(lower, "", "state-lower", i)
	room, err := sandbox.StateRoom(p, b.spec.Limits)
	if err != nil {
		return fmt.Errorf("state directory %s: %w", p, err)
	}
	upper, err := newTmpfs(room.DiskBytes, sandbox.TmpfsInodes(room.Files, sandbox.InodesUpper), 0o755, rootUID, rootUID)
	if err != nil {
		return err
	}
	b.stateUppers = append(b.stateUppers, upper)
	addMount(upper, "", "state-upper", i)
	if err := prepareUpper(upper, p, rootUID, userUID); err != nil {
		return err
	}
	cfg.StateOverlays = append(cfg.StateOverlays, overlayConfig{Target: p, Index: i})
	cfg.WritableDirs = append(cfg.WritableDirs, p)
	// Written back within the limits only: the directory is the sandboxed
	// program's own, and nothing on the host runs from it.
	b.stateCommitters = append(b.stateCommitters, &workspace.Committer{
		Upper:     fmt.Sprintf("/proc/self/fd/%d/u", upper.Fd()),
		Workspace: p,
		Options:   workspace.StateOptionsFor(b.spec),
	})
	return nil
}

// idmappedClone clones path with its owner mapped to the sandbox user.
func (r *Runtime) idmappedClone(path string, userUID int, recursive bool) (*os.File, error) {
	uid, gid, err := ownerOf(path)
	if err != nil {
		return nil, err
	}
	ns, err := idmapUserns(idmapKey{uid: uid, gid: gid, toUID: userUID, toGID: userUID})
	if err != nil {
		return nil, err
	}
	return cloneTree(path, recursive, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, ns)
}

// prepareUpper creates the overlay's upper and work dirs in the upper
// tmpfs. The upper root becomes the overlay's root inode, so it takes the
// workspace's mode and the sandbox user as owner.
func prepareUpper(upper *os.File, workspace string, rootUID, userUID int) error {
	st, err := os.Stat(workspace)
	if err != nil {
		return err
	}
	base := fmt.Sprintf("/proc/self/fd/%d", upper.Fd())
	if err := os.Mkdir(base+"/u", st.Mode().Perm()); err != nil {
		return fmt.Errorf("overlay upper dir: %w", err)
	}
	if err := os.Chmod(base+"/u", st.Mode().Perm()); err != nil {
		return err
	}
	if err := os.Chown(base+"/u", userUID, userUID); err != nil {
		return err
	}
	if err := os.Mkdir(base+"/w", 0o700); err != nil {
		return fmt.Errorf("overlay work dir: %w", err)
	}
	return os.Chown(base+"/w", rootUID, rootUID)
}

// egressPort is the port the init listens on for the proxy, 0 without.
func egressPort(n sandbox.Network) int {
	if n.Mode != sandbox.NetworkProxy {
		return 0
	}
	return n.Port()
}

// seqpacketPair returns both ends of a SOCK_SEQPACKET pair: ours as a
// *net.UnixConn, the child's as a file to inherit.
func seqpacketPair(name string) (*net.UnixConn, *os.File, error) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	ours := os.NewFile(uintptr(pair[0]), name)
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		_ = unix.Close(pair[1]) // the FileConn error is the one to report
		return nil, nil, err
	}
	return conn.(*net.UnixConn), os.NewFile(uintptr(pair[1]), name), nil
}

func tmpSize(spec sandbox.Spec) int64 {
	if spec.Limits.DiskBytes > 0 {
		return spec.Limits.DiskBytes
	}
	return defaultTmp
}

// normalize applies defaults and checks what the init relies on.
func normalize(spec *sandbox.Spec) error {
	if spec.Workspace == "" || !filepath.IsAbs(spec.Workspace) {
		return fmt.Errorf("process sandbox: workspace %q must be an absolute path", spec.Workspace)
	}
	spec.Workspace = filepath.Clean(spec.Workspace)
	if st, err := os.Stat(spec.Workspace); err != nil || !st.IsDir() {
		return fmt.Errorf("process sandbox: workspace %q is not a directory", spec.Workspace)
	}
	if spec.WorkspaceDir == "" {
		spec.WorkspaceDir = spec.Workspace
	}
	if !filepath.IsAbs(spec.WorkspaceDir) {
		return fmt.Errorf("process sandbox: workspace dir %q must be absolute", spec.WorkspaceDir)
	}
	spec.WorkspaceDir = filepath.Clean(spec.WorkspaceDir)
	if spec.WorkspaceDir == "/" || reserved(spec.WorkspaceDir) {
		return fmt.Errorf("process sandbox: workspace dir %q is reserved", spec.WorkspaceDir)
	}
	for _, list := range [][]string{spec.ReadPaths, spec.WritePaths} {
		for i, p := range list {
			if !filepath.IsAbs(p) {
				return fmt.Errorf("process sandbox: path %q must be absolute", p)
			}
			list[i] = filepath.Clean(p)
			if list[i] == "/" || reserved(list[i]) {
				return fmt.Errorf("process sandbox: path %q cannot be bound into a sandbox", p)
			}
		}
	}
	if err := sandbox.CheckStateDirs(spec); err != nil {
		return fmt.Errorf("process sandbox: %w", err)
	}
	for _, p := range spec.StateDirs {
		if reserved(p) {
			return fmt.Errorf("process sandbox: state directory %q cannot be bound into a sandbox (reserved)", p)
		}
	}
	if spec.Hostname == "" {
		spec.Hostname = "sandbox"
	}
	if spec.Network.Mode == "" {
		spec.Network.Mode = sandbox.NetworkNone
	}
	switch spec.Network.Mode {
	case sandbox.NetworkNone, sandbox.NetworkHost, sandbox.NetworkProxy:
	default:
		return fmt.Errorf("process sandbox: unknown network mode %q", spec.Network.Mode)
	}
	if p := spec.Network.Port(); p > 65535 {
		return fmt.Errorf("process sandbox: proxy port %d", p)
	}
	return nil
}

// reserved reports whether p is, or is inside, a directory the sandbox
// builds itself.
func reserved(p string) bool {
	for _, r := range []string{"/proc", "/dev", "/tmp", "/etc", "/usr", sandboxHome} {
		if sandbox.Within(p, r) {
			// Paths under /tmp are fine (they are mounted on the
			// sandbox's /tmp), and so are paths under /usr or /etc
			// for ReadPaths; only the directories themselves are not.
			if r == "/tmp" || r == "/usr" || r == "/etc" {
				return p == r
			}
			return true
		}
	}
	return false
}

func (b *box) rootUID() int { return b.uidBase + b.slot }
func (b *box) userUID() int { return b.uidBase + sandboxUID + b.slot }

// adopt makes in the sandbox's init.
func (b *box) adopt(in *initProc) {
	b.id = in.id
	b.initPid, b.ctl, b.cfgW, b.initFD = in.pid, in.ctl, in.cfgW, in.pidfd
	b.uidSlot, b.slot = in.slot, in.slot.N
	b.initStderr, b.waitDone = in.stderr, in.waitDone
}

// configure hands the init its policy: the detached mounts (and the
// egress socket) go over the control socket first, in the order of
// cfg.Mounts, then gate runs (it waits for the cgroup the init was put in
// as it started, and writes its limits), and only then does the init get
// its config. Until its config pipe is closed the init does nothing, and
// reads nothing from the socket: this is the start gate (cgroup v1 has no
// CLONE_INTO_CGROUP).
func (b *box) configure(cfg initConfig, mounts []*os.File, gate func() error) error {
	fds := make([]int, 0, len(mounts)+1)
	for _, f := range mounts {
		fds = append(fds, int(f.Fd()))
	}
	if cfg.EgressPort > 0 {
		parentEnd, childEnd, err := seqpacketPair("egress")
		if err != nil {
			return fmt.Errorf("egress socket: %w", err)
		}
		defer childEnd.Close() // the init has its own once sent
		b.egressSock = parentEnd
		fds = append(fds, int(childEnd.Fd()))
	}
	if err := checkInit(b.initPid, cfg.NetNone, b.rootUID(), b.userUID()); err != nil {
		return err
	}
	// The mounts go first: they wait in the socket, unread, until the
	// init has its config, which it then finds with them, without
	// waiting again for a packet sent after it.
	for len(fds) > 0 {
		n := min(len(fds), fdBatch)
		if err := b.send(message{Op: opFDs}, fds[:n]); err != nil {
			return fmt.Errorf("send sandbox mounts: %w", err)
		}
		fds = fds[n:]
	}
	if err := gate(); err != nil {
		return err
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	_, err = b.cfgW.Write(data)
	if cerr := b.cfgW.Close(); err == nil {
		err = cerr
	}
	b.cfgW = nil
	if err != nil {
		return fmt.Errorf("send sandbox config: %w", err)
	}
	b.dispatching = true
	go b.dispatch()
	return nil
}

// waitReady waits for the init's first message.
func (b *box) waitReady(ctx context.Context) (message, error) {
	t := time.NewTimer(readyWait)
	defer t.Stop()
	select {
	case m := <-b.ready:
		return m, nil
	case <-b.dead:
		return message{}, fmt.Errorf("sandbox init exited during setup: %s", b.stderrTail())
	case <-ctx.Done():
		return message{}, ctx.Err()
	case <-t.C:
		return message{}, fmt.Errorf("sandbox init not ready after %s", readyWait)
	}
}
