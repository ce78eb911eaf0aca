// Package seccomp builds and installs the sandbox's seccomp-BPF deny filter:
// a default-allow program that makes escape-relevant system calls fail with
// EPERM, makes clone3 fail with ENOSYS, and kills a process that enters the
// kernel through a foreign system call ABI.
//
// The program is assembled here on golang.org/x/net/bpf, from a syscall
// table generated for the build architecture only (zsysnum_*.go: static
// data, nothing built at init). Argument rules compare the low 32 bits of
// an argument: the kernel truncates int arguments (socket's protocol,
// ioctl's request, personality's persona) to 32 bits, so
// socket(AF_INET, SOCK_STREAM, 1<<32|IPPROTO_MPTCP) would slip past a
// 64-bit equality test.
package seccomp

import (
	"fmt"
	"runtime"
	"slices"
	"sort"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Profiles.
const (
	ProfileDefault = "default"
	ProfileStrict  = "strict"
)

// defaultDeny is denied with EPERM in every profile. Names that do not exist
// on the running architecture (iopl on arm64) are skipped: there is nothing
// to deny.
var defaultDeny = []string{
	// Inspecting or changing other processes.
	"ptrace", "process_vm_readv", "process_vm_writev",
	// Mount table and root changes, old and new mount API.
	"mount", "umount2", "pivot_root", "chroot",
	"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
	// Namespace creation and entry (clone's CLONE_NEW* flags: see rules).
	"unshare", "setns",
	// Large kernel attack surface rarely needed by workloads.
	"bpf", "keyctl", "add_key", "request_key",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"userfaultfd", "perf_event_open", "fanotify_init",
	// Host administration.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"acct", "swapon", "swapoff", "reboot", "syslog", "quotactl", "quotactl_fd",
	"lookup_dcookie", "vhangup", "iopl", "ioperm",
	// File handles bypass path-based checks (the "shocker" escape).
	"open_by_handle_at", "name_to_handle_at",
}

// strictDeny is added by the strict profile: calls few programs need whose
// absence shrinks the kernel surface further.
var strictDeny = []string{
	"pidfd_getfd", "process_madvise", "kcmp",
	"move_pages", "migrate_pages", "mbind", "set_mempolicy",
	"uselib", "nfsservctl", "_sysctl", "ustat", "sysfs",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	"fanotify_mark", "memfd_secret", "remap_file_pages",
}

// Rule is one entry of a profile, for documentation and `agentbox doctor`.
type Rule struct {
	Syscall string `json:"syscall"`
	// When is empty for an unconditional rule, else the argument test.
	When  string `json:"when,omitempty"`
	Errno string `json:"errno"`
}

// Argument-level constants. CLONE_NEW* is every namespace flag clone(2)
// accepts: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
const (
	cloneNewMask  = 0x7E020000
	ipprotoMPTCP  = 262
	afPacket      = 17
	tiocsti       = 0x5412
	tioclinux     = 0x541C
	personaQuery  = 0xffffffff
	perLinux      = 0x0000
	perLinux32    = 0x0008
	perUname26    = 0x0020000
	perLinux32U26 = 0x0020008
)

// argRules are the argument-filtered rules, in program order.
var argRules = []Rule{
	{Syscall: "clone3", Errno: "ENOSYS"},
	{Syscall: "clone", When: "flags & CLONE_NEW* (0x7e020000)", Errno: "EPERM"},
	{Syscall: "socket", When: "protocol == IPPROTO_MPTCP (262)", Errno: "EPERM"},
	{Syscall: "socket", When: "domain == AF_PACKET", Errno: "EPERM"},
	{Syscall: "ioctl", When: "request == TIOCSTI or TIOCLINUX", Errno: "EPERM"},
	{Syscall: "personality", When: "persona not in {PER_LINUX, PER_LINUX32, UNAME26, query}", Errno: "EPERM"},
}

// Denied returns the syscalls profile denies unconditionally with EPERM,
// sorted, including names the running architecture lacks. It returns nil
// for an unknown profile. argRules are the argument-filtered ones.
func Denied(profile string) []string {
	var names []string
	switch profile {
	case "", ProfileDefault:
		names = slices.Clone(defaultDeny)
	case ProfileStrict:
		names = append(slices.Clone(defaultDeny), strictDeny...)
	default:
		return nil
	}
	sort.Strings(names)
	return names
}

// Check validates profile and extraDeny without installing anything, so a
// policy can be refused when it is loaded rather than when a sandbox starts.
// A name is known when any supported architecture (x86_64, aarch64) has it.
func Check(profile string, extraDeny []string) error {
	if Denied(profile) == nil {
		return fmt.Errorf("seccomp: unknown profile %q (want %q or %q)", profile, ProfileDefault, ProfileStrict)
	}
	var unknown []string
	for _, n := range extraDeny {
		if !known(n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("seccomp: unknown syscall name(s) %q in the deny list", unknown)
	}
	return nil
}

// Install puts the filter of profile plus extraDeny on every thread of the
// calling process (TSYNC). It also sets no_new_privs, which the kernel
// requires of an unprivileged caller and which the sandbox init sets anyway.
// The filter is inherited across fork and execve and cannot be removed.
func Install(profile string, extraDeny []string) error {
	return InstallAllowing(profile, extraDeny, nil)
}

// InstallAllowing is Install with the profile's unconditional denies in
// allow left out (extraDeny still wins). gVisor uses it for syslog, which
// there reads gVisor's own kernel log, not the host's.
func InstallAllowing(profile string, extraDeny, allow []string) error {
	prog, err := build(profile, extraDeny, allow...)
	if err != nil {
		return err
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return fmt.Errorf("seccomp: assemble: %w", err)
	}
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: set no_new_privs: %w", err)
	}
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(filter)
	if errno != 0 {
		return fmt.Errorf("seccomp: install filter: %w", errno)
	}
	if r != 0 {
		// TSYNC failed: thread r already has an incompatible filter.
		return fmt.Errorf("seccomp: install filter: thread %d could not be synchronized", r)
	}
	return nil
}

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
)

func offArgLo(i int) uint32 { return 16 + 8*uint32(i) } // little-endian low half

var (
	retEPERM  = bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)}
	retENOSYS = bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)}
	retKill   = bpf.RetConstant{Val: unix.SECCOMP_RET_KILL_PROCESS}
	retAllow  = bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}
)

// build returns the whole program for the build architecture: the ABI
// checks, the argument rules, then the unconditional denies; anything else
// is allowed.
func build(profile string, extraDeny []string, allow ...string) ([]bpf.Instruction, error) {
	if err := Check(profile, extraDeny); err != nil {
		return nil, err
	}
	auditArch, archName, err := nativeArch()
	if err != nil {
		return nil, err
	}
	nr := func(name string) (uint32, error) {
		n, ok := sysnum(name)
		if !ok {
			return 0, fmt.Errorf("seccomp: %s has no syscall %q", archName, name)
		}
		return n, nil
	}
	var p []bpf.Instruction
	// A foreign ABI (i386 through int 0x80 on x86_64, arm32 on arm64) has
	// other syscall numbers; nothing below would mean anything for it.
	p = append(p,
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		retKill,
	)
	p = append(p, bpf.LoadAbsolute{Off: offNr, Size: 4})
	// x32 shares x86_64's AUDIT_ARCH but numbers its calls from
	// __X32_SYSCALL_BIT, so the deny list below would not match them:
	// every number from that bit up fails with ENOSYS.
	if runtime.GOARCH == "amd64" {
		p = append(p,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1},
			retENOSYS,
		)
	}
	// clone3 keeps its flags in memory seccomp cannot read. ENOSYS (not
	// EPERM) makes glibc and Go fall back to clone, filtered below.
	clone3, err := nr("clone3")
	if err != nil {
		return nil, err
	}
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: clone3, SkipFalse: 1},
		retENOSYS,
	)
	// Each argument rule: "if nr == N { body }", where body returns EPERM
	// or falls through. A is reloaded with nr after each body.
	rule := func(name string, body ...bpf.Instruction) error {
		n, err := nr(name)
		if err != nil {
			return err
		}
		p = append(p,
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: n, SkipTrue: uint8(len(body))},
		)
		p = append(p, body...)
		return nil
	}
	// clone(flags, ...): flags is arg 0 on both architectures, and every
	// CLONE_NEW* bit is in its low word.
	if err := rule("clone",
		bpf.LoadAbsolute{Off: offArgLo(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cloneNewMask, SkipFalse: 1},
		retEPERM,
	); err != nil {
		return nil, err
	}
	// socket(domain, type, protocol): MPTCP defeats Landlock's TCP rules;
	// packet sockets are a history of kernel bugs and need no workload.
	if err := rule("socket",
		bpf.LoadAbsolute{Off: offArgLo(2), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ipprotoMPTCP, SkipFalse: 1},
		retEPERM,
		bpf.LoadAbsolute{Off: offArgLo(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: afPacket, SkipFalse: 1},
		retEPERM,
	); err != nil {
		return nil, err
	}
	// ioctl(fd, request): TIOCSTI pushes input into a terminal; TIOCLINUX
	// can do the same on a console.
	if err := rule("ioctl",
		bpf.LoadAbsolute{Off: offArgLo(1), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: tiocsti, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: tioclinux, SkipTrue: 1},
		retEPERM,
	); err != nil {
		return nil, err
	}
	// personality(persona): allow the values programs use (and the query);
	// deny the rest, e.g. ADDR_NO_RANDOMIZE and READ_IMPLIES_EXEC.
	if err := rule("personality",
		bpf.LoadAbsolute{Off: offArgLo(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: perLinux, SkipTrue: 5},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: perLinux32, SkipTrue: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: perUname26, SkipTrue: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: perLinux32U26, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: personaQuery, SkipTrue: 1},
		retEPERM,
	); err != nil {
		return nil, err
	}

	// The unconditional denies: the profile's (less allow) and extraDeny,
	// each number once; names this architecture lacks have nothing to deny.
	var nums []uint32
	for _, n := range Denied(profile) {
		if slices.Contains(allow, n) {
			continue
		}
		if v, ok := sysnum(n); ok && !slices.Contains(nums, v) {
			nums = append(nums, v)
		}
	}
	for _, n := range extraDeny {
		if v, ok := sysnum(n); ok && !slices.Contains(nums, v) {
			nums = append(nums, v)
		}
	}
	p = append(p, bpf.LoadAbsolute{Off: offNr, Size: 4})
	p = append(p, denyAny(nums, retEPERM)...)
	return append(p, retAllow), nil
}

// maxSkip is the farthest a conditional jump reaches.
const maxSkip = 255

// denyAny returns code that executes ret when A equals one of nums and
// falls through otherwise: runs of equality tests that jump to a ret after
// the run, each run short enough for a conditional jump's 8-bit offset.
func denyAny(nums []uint32, ret bpf.Instruction) []bpf.Instruction {
	var p []bpf.Instruction
	for run := range slices.Chunk(nums, maxSkip+1) {
		for i, n := range run {
			last := len(run) - 1
			if i < last {
				p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipTrue: uint8(last - i)})
			} else {
				p = append(p, bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipFalse: 1})
			}
		}
		p = append(p, ret)
	}
	return p
}
