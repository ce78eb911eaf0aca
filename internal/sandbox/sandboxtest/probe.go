package sandboxtest

import (
	"bufio"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Probes run inside the sandbox as Python snippets: Python's ctypes makes
// raw syscalls and reports the errno by name, which is exactly what the
// suite asserts. Every probe prints one line "R <name> <result>", where the
// result is "ok", an errno name, or a probe-specific word.

// nr are the syscall numbers the probes need, taken from x/sys/unix so the
// suite is right on every architecture it builds for.
var nr = map[string]int{
	"bpf":               unix.SYS_BPF,
	"keyctl":            unix.SYS_KEYCTL,
	"add_key":           unix.SYS_ADD_KEY,
	"io_uring_setup":    unix.SYS_IO_URING_SETUP,
	"perf_event_open":   unix.SYS_PERF_EVENT_OPEN,
	"userfaultfd":       unix.SYS_USERFAULTFD,
	"open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
	"init_module":       unix.SYS_INIT_MODULE,
	"finit_module":      unix.SYS_FINIT_MODULE,
	"delete_module":     unix.SYS_DELETE_MODULE,
	"kexec_load":        unix.SYS_KEXEC_LOAD,
	"kexec_file_load":   unix.SYS_KEXEC_FILE_LOAD,
	"mount":             unix.SYS_MOUNT,
	"umount2":           unix.SYS_UMOUNT2,
	"pivot_root":        unix.SYS_PIVOT_ROOT,
	"chroot":            unix.SYS_CHROOT,
	"fsopen":            unix.SYS_FSOPEN,
	"open_tree":         unix.SYS_OPEN_TREE,
	"unshare":           unix.SYS_UNSHARE,
	"setns":             unix.SYS_SETNS,
	"clone":             unix.SYS_CLONE,
	"clone3":            unix.SYS_CLONE3,
	"ptrace":            unix.SYS_PTRACE,
	"process_vm_readv":  unix.SYS_PROCESS_VM_READV,
	"process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
	"sethostname":       unix.SYS_SETHOSTNAME,
	"setdomainname":     unix.SYS_SETDOMAINNAME,
	"ioctl":             unix.SYS_IOCTL,
	"pidfd_open":        unix.SYS_PIDFD_OPEN,
	"prctl":             unix.SYS_PRCTL,
}

// consts are the flag values the probes need.
var consts = map[string]int{
	"CLONE_NEWUSER":       unix.CLONE_NEWUSER,
	"CLONE_NEWNET":        unix.CLONE_NEWNET,
	"CLONE_NEWNS":         unix.CLONE_NEWNS,
	"CLONE_NEWPID":        unix.CLONE_NEWPID,
	"CLONE_NEWUTS":        unix.CLONE_NEWUTS,
	"CLONE_NEWIPC":        unix.CLONE_NEWIPC,
	"CLONE_NEWCGROUP":     unix.CLONE_NEWCGROUP,
	"SIGCHLD":             int(unix.SIGCHLD),
	"PTRACE_TRACEME":      unix.PTRACE_TRACEME,
	"PTRACE_ATTACH":       unix.PTRACE_ATTACH,
	"PTRACE_SEIZE":        unix.PTRACE_SEIZE,
	"TIOCSTI":             unix.TIOCSTI,
	"MNT_DETACH":          unix.MNT_DETACH,
	"IPPROTO_MPTCP":       262, // not in every x/sys version; fixed by the kernel ABI
	"AF_PACKET":           unix.AF_PACKET,
	"ETH_P_ALL":           unix.ETH_P_ALL,
	"UFFD_USER_MODE":      1, // UFFD_USER_MODE_ONLY: allowed unprivileged, so only seccomp stops it
	"KEYCTL_GET_ID":       unix.KEYCTL_GET_KEYRING_ID,
	"KEY_SPEC_SESSION":    -3,
	"BPF_MAP_CREATE":      0,
	"OPEN_TREE_CLONE":     unix.OPEN_TREE_CLONE,
	"AT_FDCWD":            unix.AT_FDCWD,
	"PR_GET_NO_NEW_PRIVS": unix.PR_GET_NO_NEW_PRIVS,
}

// prelude is prepended to every Python probe.
func prelude() string {
	var b strings.Builder
	b.WriteString(`import ctypes, errno, os, socket, sys, time
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
NR = {`)
	for _, k := range sortedKeys(nr) {
		fmt.Fprintf(&b, "%q: %d, ", k, nr[k])
	}
	b.WriteString("}\n")
	for _, k := range sortedKeys(consts) {
		fmt.Fprintf(&b, "%s = %d\n", k, consts[k])
	}
	b.WriteString(`
def R(name, val):
    sys.stdout.write("R %s %s\n" % (name, val))
    sys.stdout.flush()

def E(e):
    return errno.errorcode.get(e, "E%d" % e)

def _arg(a):
    if isinstance(a, int):
        return ctypes.c_long(a)
    return a

def raw(nrname, *args):
    """Raw syscall; returns (result, errno name or None)."""
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(NR[nrname]), *[_arg(a) for a in args])
    if r == -1:
        return r, E(ctypes.get_errno())
    return r, None

def sc(name, nrname, *args):
    """Raw syscall reported as a probe; returns the result."""
    r, err = raw(nrname, *args)
    R(name, err or "ok")
    return r

def op(name, fn, *args, **kw):
    """Calls fn and reports ok or the errno of the OSError it raised."""
    try:
        v = fn(*args, **kw)
    except socket.gaierror:
        R(name, "gaierror")
        return None
    except socket.timeout:
        R(name, "timeout")
        return None
    except OSError as e:
        R(name, E(e.errno) if e.errno else type(e).__name__)
        return None
    R(name, "ok")
    return v

def write(path, data="pwned\n", mode="w"):
    with open(path, mode) as f:
        f.write(data)

def read(path):
    with open(path, "rb") as f:
        return f.read()

def mount_of(path):
    """The mount point holding path and its per-mount options."""
    best, opts = "", ""
    for line in read("/proc/self/mountinfo").decode().splitlines():
        f = line.split()
        mp = f[4]
        if (path.rstrip("/") + "/").startswith(mp.rstrip("/") + "/") and len(mp) >= len(best):
            best, opts = mp, f[5]
    return best, opts.split(",")

def mount_has(path, opt):
    mp, opts = mount_of(path)
    return "yes" if opt in opts else "no:%s:%s" % (mp, ",".join(opts))

def no_new_privs():
    r, err = raw("prctl", PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
    return err or str(r)
`)
	return b.String()
}

// parseProbes extracts the "R name result" lines of out. A probe reported
// twice keeps its first result and is flagged.
func parseProbes(out string) (map[string]string, []string) {
	got := map[string]string{}
	var dups []string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || f[0] != "R" {
			continue
		}
		name, val := f[1], strings.Join(f[2:], " ")
		if _, dup := got[name]; dup {
			dups = append(dups, name)
			continue
		}
		got[name] = val
	}
	sort.Strings(dups)
	return got, dups
}

// matches reports whether got is one of the "|"-separated results in want.
func matches(want, got string) bool {
	for w := range strings.SplitSeq(want, "|") {
		if strings.TrimSpace(w) == got {
			return true
		}
	}
	return false
}
