package process

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Paths the init works with before pivot_root. stage is a tmpfs over /tmp
// of the init's private mount namespace (the host's /tmp is untouched); the
// new root is assembled at stage/root and the overlay layers are attached
// at stage/lower and stage/upper, which vanish with the old root.
const (
	stage   = "/tmp"
	newRoot = stage + "/root"
)

// setup builds the sandbox's filesystem, network and restrictions, in the
// order the kernel requires: mounts while we still have privileges, then
// pivot_root, then hostname and loopback, then caps, Landlock, seccomp.
func setup(cfg *initConfig) (mech, degraded []string, err error) {
	// Signals from inside are dropped: PID 1 must only end when the
	// supervisor closes the control socket or kills it.
	if err := signalIgnore(); err != nil {
		return nil, nil, err
	}
	mech = append(mech, "userns", "mntns", "pidns", "ipcns", "utsns")
	if cfg.NetNone {
		mech = append(mech, "netns")
	}
	overlay, err := buildRoot(cfg)
	if err != nil {
		return nil, nil, err
	}
	mech = append(mech, "pivot_root")
	if overlay {
		mech = append(mech, "overlay")
	} else {
		degraded = append(degraded, "overlay")
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return nil, nil, fmt.Errorf("sethostname: %w", err)
	}
	if cfg.NetNone {
		if err := loopbackUp(); err != nil {
			return nil, nil, fmt.Errorf("bring up lo: %w", err)
		}
	}
	// The bounding and ambient sets were emptied as the init started
	// (runInit); Landlock sets no_new_privs below.
	mech = append(mech, "caps:none", "no_new_privs")

	abi, err := applyLandlock(cfg)
	switch {
	case err != nil && !cfg.AllowDegraded:
		return nil, nil, &initFail{"landlock", err}
	case err != nil:
		degraded = append(degraded, "landlock")
	default:
		mech = append(mech, fmt.Sprintf("landlock:abi%d", abi))
	}
	profile := cfg.Syscalls.Profile
	if profile == "" {
		profile = "default"
	}
	if err := installSeccomp(profile, cfg.Syscalls.Deny); err != nil {
		if !cfg.AllowDegraded {
			return nil, nil, &initFail{"seccomp", err}
		}
		degraded = append(degraded, "seccomp")
	} else {
		mech = append(mech, "seccomp:"+profile)
	}
	return mech, degraded, nil
}

// buildRoot assembles the new root and pivots into it. It reports whether
// the workspace is an overlay (false only when degraded to a plain bind).
func buildRoot(cfg *initConfig) (overlay bool, err error) {
	err = buildRootErr(cfg, &overlay)
	return overlay, err
}

// prepareRoot does, before the init has its config, the part of the root
// that no policy changes: the staging tmpfs, and the minimal root
// (minimalRoot) with its /proc and /dev (without /dev/shm, which the
// limits size). It applies no policy and reads nothing but the init's own
// copy of the host's mount tree, which a spare holds at most spareMaxAge.
// buildRoot finishes it with the config; a spec that reads outside the
// workspace has another root, and buildRoot detaches this one first.
func prepareRoot() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size=64k"); err != nil {
		return fmt.Errorf("mount staging tmpfs: %w", err)
	}
	for _, d := range []string{newRoot, stage + "/lower", stage + "/upper"} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
	}
	if err := os.Chmod(newRoot, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", newRoot, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=4m"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	if err := minimalRoot(); err != nil {
		return err
	}
	if err := mountProc(); err != nil {
		return err
	}
	return mountDev()
}

func buildRootErr(cfg *initConfig, overlay *bool) error {
	// The root: the host's root read-only, or the minimal root
	// prepareRoot made.
	var ops []mountOp
	hostRoot := false
	for i, m := range cfg.Mounts {
		fd := cfg.mountFDs[i]
		switch m.Role {
		case "root":
			// The prepared root and everything in it go, unseen by
			// anything: nothing has run in it.
			if err := unix.Unmount(newRoot, unix.MNT_DETACH); err != nil {
				return fmt.Errorf("detach the minimal root: %w", err)
			}
			if err := moveMount(fd, newRoot); err != nil {
				return fmt.Errorf("attach host root: %w", err)
			}
			if err := mountProc(); err != nil {
				return err
			}
			if err := mountDev(); err != nil {
				return err
			}
			hostRoot = true
		case "lower":
			if err := moveMount(fd, stage+"/lower"); err != nil {
				return fmt.Errorf("attach workspace: %w", err)
			}
		case "upper":
			if err := moveMount(fd, stage+"/upper"); err != nil {
				return fmt.Errorf("attach workspace upper layer: %w", err)
			}
		case "state-lower", "state-upper":
			dir := fmt.Sprintf("%s/%s%d", stage, m.Role, m.Index)
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			if err := moveMount(fd, dir); err != nil {
				return fmt.Errorf("attach state directory layer: %w", err)
			}
		default:
			ops = append(ops, mountOp{target: m.Target, do: func(dst string) error { return moveMount(fd, dst) }})
		}
	}
	if hostRoot {
		for _, d := range append([]string{"/sys", "/root", "/home", "/run", "/var/run"}, cfg.HideDirs...) {
			if st, err := os.Lstat(newRoot + d); err != nil || !st.IsDir() {
				continue // absent, or a symlink into a hidden dir
			}
			ops = append(ops, mountOp{target: d, do: func(dst string) error {
				return unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k")
			}})
		}
	}
	if cfg.Overlay != nil {
		ops = append(ops, mountOp{target: cfg.Overlay.Target, do: func(dst string) error {
			opts := "lowerdir=" + stage + "/lower,upperdir=" + stage + "/upper/u,workdir=" + stage + "/upper/w,userxattr"
			err := unix.Mount("overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
			if err == nil {
				*overlay = true
				return nil
			}
			if !cfg.AllowDegraded {
				return &initFail{"overlay", fmt.Errorf("mount workspace overlay: %w", err)}
			}
			// Degraded: the workspace itself, writable, and protected
			// paths are not enforced.
			return unix.Mount(stage+"/lower", dst, "", unix.MS_BIND, "")
		}})
	}
	for _, so := range cfg.StateOverlays {
		lower := fmt.Sprintf("%s/state-lower%d", stage, so.Index)
		upper := fmt.Sprintf("%s/state-upper%d", stage, so.Index)
		ops = append(ops, mountOp{target: so.Target, do: func(dst string) error {
			opts := "lowerdir=" + lower + ",upperdir=" + upper + "/u,workdir=" + upper + "/w,userxattr"
			err := unix.Mount("overlay", dst, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts)
			if err == nil {
				return nil
			}
			if !cfg.AllowDegraded {
				return &initFail{"overlay", fmt.Errorf("mount state directory overlay: %w", err)}
			}
			// Degraded: the directory itself, writable, outside the
			// limits (as the workspace is then).
			return unix.Mount(lower, dst, "", unix.MS_BIND, "")
		}})
	}
	if !hostRoot {
		var targets []string
		for _, op := range ops {
			targets = append(targets, op.target)
		}
		if err := finishEtc(cfg, targets); err != nil {
			return err
		}
	}
	// Parents before children: /home before /home/sandbox, /tmp before a
	// workspace under /tmp.
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].target < ops[j].target })
	for _, op := range ops {
		dst := newRoot + op.target
		if err := mkdirAll(dst); err != nil {
			return fmt.Errorf("mount point %s: %w", op.target, err)
		}
		if err := op.do(dst); err != nil {
			return fmt.Errorf("mount %s: %w", op.target, err)
		}
	}
	if err := mountShm(cfg); err != nil {
		return err
	}

	if err := os.Chdir(newRoot); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := os.Chdir("/"); err != nil {
		return err
	}
	for _, p := range []string{"/", "/dev"} {
		if err := setReadOnly(p, false); err != nil {
			return fmt.Errorf("make %s read-only: %w", p, err)
		}
	}
	return nil
}

type mountOp struct {
	target string
	do     func(dst string) error
}

func moveMount(fd int, dst string) error {
	return unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// mkdirAll creates a mount point. On the read-only host root it can only
// succeed when the directory already exists.
func mkdirAll(p string) error {
	if st, err := os.Stat(p); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", p)
		}
		return nil
	}
	return os.MkdirAll(p, 0o755)
}

// setReadOnly sets MS_RDONLY (and nosuid, nodev) on the mount at p,
// leaving every other, possibly locked, attribute alone.
func setReadOnly(p string, recursive bool) error {
	flags := uint(0)
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, p, flags, &unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
	})
}

// roBind binds host path src at dst read-only, creating dst to match.
func roBind(src, dst string) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if err := bind(src, st.IsDir(), dst); err != nil {
		return err
	}
	return setReadOnly(dst, true)
}

// bind binds host path src at dst, creating dst (in an existing directory)
// as a directory or an empty file to match. Its attributes are the
// caller's business.
func bind(src string, dir bool, dst string) error {
	if dir {
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	} else {
		fd, err := unix.Open(dst, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		_ = unix.Close(fd) // an empty mount point: nothing was written
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return nil
}

// Host /etc entries bound read-only into the minimal root: what TLS, name
// service, dynamic linking, time zones and language runtimes look for.
var etcBinds = []string{
	"alternatives", "ca-certificates", "ca-certificates.conf", "ssl", "pki",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "gai.conf", "host.conf",
	"localtime", "timezone", "mime.types", "protocols", "services", "networks",
	"os-release", "debian_version", "issue", "profile", "profile.d", "bash.bashrc", "inputrc",
	"environment", "locale.alias", "magic", "magic.mime", "python3", "perl", "java-17-openjdk",
}

// minimalRoot fills the root tmpfs: /usr and its merged-usr links, and
// /etc, a tmpfs with a few host files bound into it; finishEtc writes the
// generated files and makes it read-only.
func minimalRoot() error {
	if err := roBind("/usr", newRoot+"/usr"); err != nil {
		return fmt.Errorf("bind /usr: %w", err)
	}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		st, err := os.Lstat(d)
		switch {
		case err != nil:
			continue
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, newRoot+d); err != nil {
				return err
			}
		case st.IsDir():
			if err := roBind(d, newRoot+d); err != nil {
				return fmt.Errorf("bind %s: %w", d, err)
			}
		}
	}
	// /etc is a tmpfs of its own, so that one recursive mount_setattr
	// makes it and every bind in it read-only, instead of one remount
	// per bind.
	etc := newRoot + "/etc"
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", etc, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount /etc tmpfs: %w", err)
	}
	for _, name := range etcBinds {
		src := "/etc/" + name
		st, err := os.Lstat(src)
		if err != nil {
			continue
		}
		if st.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, etc+"/"+name); err != nil {
				return err
			}
			continue
		}
		if err := bind(src, st.IsDir(), etc+"/"+name); err != nil {
			return err
		}
	}
	return nil
}

// finishEtc writes the minimal root's generated /etc files, from the
// config, and makes /etc read-only. targets are the mount points the
// caller attaches later; those under /etc are made now, before /etc turns
// read-only.
func finishEtc(cfg *initConfig, targets []string) error {
	etc := newRoot + "/etc"
	files := map[string]string{
		"passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\n" +
			"sandbox:x:" + strconv.Itoa(sandboxUID) + ":" + strconv.Itoa(sandboxUID) + ":sandbox:" + cfg.Home + ":/bin/sh\n" +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"group": "root:x:0:\nsandbox:x:" + strconv.Itoa(sandboxUID) + ":\nnogroup:x:65534:\n",
		"hosts": "127.0.0.1\tlocalhost " + cfg.Hostname + "\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		// Without a network there is nobody to ask; with the host's,
		// ask whom the host asks.
		"resolv.conf": "nameserver 127.0.0.1\n",
		"hostname":    cfg.Hostname + "\n",
	}
	if !cfg.NetNone {
		if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
			files["resolv.conf"] = string(b)
		}
	}
	for name, content := range files {
		if err := os.WriteFile(etc+"/"+name, []byte(content), 0o644); err != nil {
			return err
		}
	}
	for _, t := range targets {
		if strings.HasPrefix(t, "/etc/") {
			if err := mkdirAll(newRoot + t); err != nil {
				return fmt.Errorf("mount point %s: %w", t, err)
			}
		}
	}
	if err := setReadOnly(etc, true); err != nil {
		return fmt.Errorf("make /etc read-only: %w", err)
	}
	return nil
}

// mountProc mounts a procfs of the sandbox's pid namespace. hidepid hides
// the init (another uid) from the commands; /proc/sys is read-only.
func mountProc() error {
	dst := newRoot + "/proc"
	if err := mkdirAll(dst); err != nil {
		return err
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	var err error
	for _, opt := range []string{"hidepid=invisible", "hidepid=2", ""} {
		if err = unix.Mount("proc", dst, "proc", flags, opt); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, p := range []string{"/sys", "/sysrq-trigger", "/irq", "/bus", "/fs"} {
		if _, err := os.Stat(dst + p); err != nil {
			continue
		}
		if err := unix.Mount(dst+p, dst+p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /proc%s: %w", p, err)
		}
		if err := setReadOnly(dst+p, true); err != nil {
			return fmt.Errorf("make /proc%s read-only: %w", p, err)
		}
	}
	return nil
}

// mountDev builds a minimal /dev: a tmpfs with binds of the harmless
// character devices (mknod is not allowed in a user namespace) and a
// private devpts; mountShm adds /dev/shm.
func mountDev() error {
	dev := newRoot + "/dev"
	if err := mkdirAll(dev); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := bind("/dev/"+d, false, dev+"/"+d); err != nil {
			return err
		}
	}
	// One recursive change for the tmpfs and every device bind, before
	// devpts and /dev/shm are mounted below it.
	if err := unix.MountSetattr(unix.AT_FDCWD, dev, unix.AT_RECURSIVE, &unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC,
	}); err != nil {
		return fmt.Errorf("restrict /dev: %w", err)
	}
	links := map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
		"stderr": "/proc/self/fd/2", "ptmx": "pts/ptmx",
	}
	for name, target := range links {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dev+"/pts", 0o755); err != nil {
		return err
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	return os.Mkdir(dev+"/shm", 0o1777)
}

// mountShm mounts /dev/shm, sized by the limits.
func mountShm(cfg *initConfig) error {
	opt := "mode=1777,size=" + strconv.FormatInt(cfg.ShmBytes, 10)
	if cfg.ShmFiles > 0 {
		opt += ",nr_inodes=" + strconv.FormatInt(sandbox.TmpfsInodes(cfg.ShmFiles, sandbox.InodesTmpfs), 10)
	}
	if err := unix.Mount("tmpfs", newRoot+"/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opt); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	return nil
}

// loopbackUp sets IFF_UP on lo, the only interface of a new netns.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { _ = unix.Close(fd) }() // an ioctl socket: closing it loses nothing
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// dropBoundingSet empties the capability bounding set and the ambient set,
// so nothing the init starts can ever gain a capability, whatever file
// capabilities a binary carries. Every sandbox gets it, whatever its
// policy, and it limits only what an execve could gain, so the init does
// it as it starts, before its config: it then has the fewest threads
// (each of the 41 drops stops and signals every thread of the process,
// which was 7% of a cold exec's CPU when done after the config), and no
// sandbox waits for it. The init keeps its own capabilities
// (CAP_SETUID/SETGID to switch to the sandbox user, CAP_KILL): commands
// run as another uid, cannot ptrace (seccomp), cannot signal it (uid
// check) and cannot see it (hidepid), and it holds no file a command can
// reach.
func dropBoundingSet() error {
	last := 40
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			last = n
		}
	}
	all := true
	for c := 0; c <= last; c++ {
		_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0)
		if errno == syscall.ENOTSUP {
			all = false // cgo build: this (locked) thread is the one that forks
			break
		}
		if errno != 0 {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, errno)
		}
	}
	if !all {
		for c := 0; c <= last; c++ {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
				return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return nil
}

// landlockABI is the kernel's Landlock ABI version, 0 without Landlock.
func landlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// applyLandlock restricts the init and, by inheritance, every command:
// the whole tree is readable and executable, only the writable dirs and a
// few devices are writable. It returns the ABI applied. Network rules are
// not used: Landlock's TCP rules are bypassed with MPTCP; the netns and
// seccomp do that job.
func applyLandlock(cfg *initConfig) (int, error) {
	abi := landlockABI()
	if abi <= 0 {
		return 0, errors.New("landlock is not available in this kernel")
	}
	conf := landlock.V7
	conf.HandledAccessNet = 0
	rules := []landlock.Rule{
		landlock.RODirs("/"),
		landlock.RWDirs(cfg.WritableDirs...).WithRefer().IgnoreIfMissing(),
		landlock.RWDirs("/dev/pts").WithIoctlDev(),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty").WithIoctlDev().IgnoreIfMissing(),
	}
	if err := conf.BestEffort().Restrict(rules...); err != nil {
		return 0, err
	}
	return min(abi, 7), nil
}

// Real-time signals the Go runtime uses itself (runtime/signal_unix.go):
// sigPerThreadSyscall (SIGRTMIN+1) for AllThreadsSyscall, and sigCancel
// (SIGRTMIN) for cgo's setxid broadcasts.
const (
	sigCancel           = unix.Signal(32)
	sigPerThreadSyscall = unix.Signal(33)
)

// signalIgnore makes PID 1 deaf to the signals a command could send it.
//
// The kernel never delivers a signal to the init of a pid namespace while
// its disposition is SIG_DFL, whoever sends it (SIGKILL and SIGSTOP from an
// ancestor namespace, i.e. the supervisor, excepted). The Go runtime
// catches nearly every signal at start-up and exits on several (SIGTERM,
// SIGHUP, SIGINT, SIGQUIT...), so every signal it caught goes back to
// SIG_DFL here, except those the runtime itself needs: synchronous faults
// (a nil dereference must panic, not vanish), SIGURG (preemption), SIGPROF
// and SIGCHLD (serve waits for it). The runtime drops the last three when
// they come from kill(2), but would exit on a sent SIGSEGV, SIGBUS or SIGFPE:
// signal.Ignore marks those as ignored for senders inside the runtime only
// (real faults still panic, and the kernel disposition stays the runtime's
// handler, which a fork resets to the default).
//
// SIG_DFL rather than SIG_IGN: an ignored disposition would be inherited by
// every command across execve (and a shell cannot trap a signal ignored at
// entry). And raw rt_sigaction rather than signal.Notify of every signal:
// the runtime enables each notified signal with a round trip to a
// dedicated thread, 64 of them cost about 2.5 ms of the sandbox's start.
func signalIgnore() error {
	const sigDfl, sigIgn = 0, 1
	keep := map[unix.Signal]bool{
		unix.SIGKILL: true, unix.SIGSTOP: true, // cannot be changed
		unix.SIGSEGV: true, unix.SIGBUS: true, unix.SIGFPE: true,
		unix.SIGURG: true, unix.SIGPROF: true, unix.SIGCHLD: true,
		// The runtime's per-thread syscall signal: AllThreadsSyscall
		// (the bounding-set drop, Landlock without TSYNC) signals every
		// other thread with it and spins until each has run the call.
		// With it at SIG_DFL, an init that has more than one thread by
		// then (any real binary, unlike a test binary) hangs for ever.
		sigPerThreadSyscall: true, sigCancel: true,
	}
	signal.Ignore(unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE)
	for sig := unix.Signal(1); sig <= 64; sig++ {
		if keep[sig] {
			continue
		}
		var old kernelSigaction
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			continue // not a signal number this kernel knows
		}
		if old.handler == sigDfl || old.handler == sigIgn {
			continue
		}
		def := kernelSigaction{}
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&def)), 0, 8, 0, 0); e != 0 {
			return fmt.Errorf("reset %v to its default: %w", sig, e)
		}
	}
	return nil
}
