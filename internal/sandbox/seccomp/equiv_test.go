package seccomp

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"testing"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The filter used to be assembled by github.com/elastic/go-seccomp-bpf.
// That library stays a test-only dependency: buildLibrary and ociLibrary
// are the code as it was (at 44c0476), and the tests below require our
// programs to answer every input as its programs do.

func libInfo() *arch.Info {
	switch runtime.GOARCH {
	case "amd64":
		return arch.X86_64
	case "arm64":
		return arch.AARCH64
	}
	return nil
}

// libName is the library's name for a syscall of the build architecture.
// Its aarch64 table calls 79 fstatat, so the old code skipped newfstatat
// there (a deny that failed open); ours denies it. The references below
// translate, so that this is the only difference they allow.
func libName(name string) string {
	if runtime.GOARCH == "arm64" && name == "newfstatat" {
		return "fstatat"
	}
	return name
}

func libKnown(name string) bool {
	_, x := arch.X86_64.SyscallNames[name]
	_, a := arch.AARCH64.SyscallNames[name]
	return x || a
}

// buildLibrary is build as it was: the same prefix, then the library's
// deny list (which adds the x32 check on x86_64).
func buildLibrary(profile string, extraDeny []string, allow ...string) ([]bpf.Instruction, error) {
	if Denied(profile) == nil {
		return nil, fmt.Errorf("unknown profile %q", profile)
	}
	for _, n := range extraDeny {
		if !libKnown(n) {
			return nil, fmt.Errorf("unknown syscall %q", n)
		}
	}
	info := libInfo()
	nr := func(name string) uint32 { return uint32(info.SyscallNames[name]) }
	p := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(info.ID), SkipTrue: 1},
		retKill,
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr("clone3"), SkipFalse: 1},
		retENOSYS,
	}
	rule := func(name string, body ...bpf.Instruction) {
		p = append(p,
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: nr(name), SkipTrue: uint8(len(body))},
		)
		p = append(p, body...)
	}
	rule("clone",
		bpf.LoadAbsolute{Off: offArgLo(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cloneNewMask, SkipFalse: 1},
		retEPERM,
	)
	rule("socket",
		bpf.LoadAbsolute{Off: offArgLo(2), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ipprotoMPTCP, SkipFalse: 1},
		retEPERM,
		bpf.LoadAbsolute{Off: offArgLo(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: afPacket, SkipFalse: 1},
		retEPERM,
	)
	rule("ioctl",
		bpf.LoadAbsolute{Off: offArgLo(1), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: tiocsti, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: tioclinux, SkipTrue: 1},
		retEPERM,
	)
	rule("personality",
		bpf.LoadAbsolute{Off: offArgLo(0), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: perLinux, SkipTrue: 5},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: perLinux32, SkipTrue: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: perUname26, SkipTrue: 3},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: perLinux32U26, SkipTrue: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: personaQuery, SkipTrue: 1},
		retEPERM,
	)
	var names []string
	for _, n := range Denied(profile) {
		if !slices.Contains(allow, n) {
			names = append(names, n)
		}
	}
	var keep []string
	for _, n := range append(names, extraDeny...) {
		n = libName(n)
		if _, ok := info.SyscallNames[n]; ok && !slices.Contains(keep, n) {
			keep = append(keep, n)
		}
	}
	policy := libseccomp.Policy{
		DefaultAction: libseccomp.ActionAllow,
		Syscalls:      []libseccomp.SyscallGroup{{Names: keep, Action: libseccomp.ActionErrno}},
	}
	tail, err := policy.Assemble()
	if err != nil {
		return nil, err
	}
	return append(p, tail...), nil
}

// ociLibrary is OCI as it was.
func ociLibrary(profile string, extraDeny []string) (*specs.LinuxSeccomp, error) {
	if _, err := buildLibrary(profile, extraDeny); err != nil {
		return nil, err
	}
	info := libInfo()
	scmpArch := map[string]specs.Arch{"x86_64": specs.ArchX86_64, "aarch64": specs.ArchAARCH64}[info.Name]
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	deny := func(name string, args ...specs.LinuxSeccompArg) specs.LinuxSyscall {
		return specs.LinuxSyscall{Names: []string{name}, Action: specs.ActErrno, ErrnoRet: &eperm, Args: args}
	}
	eq := func(i uint, v uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: i, Value: v, Op: specs.OpEqualTo}
	}
	s := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{scmpArch},
		Syscalls: []specs.LinuxSyscall{
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
		},
	}
	for bit := uint64(1); bit != 0 && bit <= cloneNewMask; bit <<= 1 {
		if cloneNewMask&bit != 0 {
			s.Syscalls = append(s.Syscalls, deny("clone", specs.LinuxSeccompArg{Index: 0, Value: bit, ValueTwo: bit, Op: specs.OpMaskedEqual}))
		}
	}
	s.Syscalls = append(s.Syscalls,
		deny("socket", eq(2, ipprotoMPTCP)),
		deny("socket", eq(0, afPacket)),
		deny("ioctl", eq(1, tiocsti)),
		deny("ioctl", eq(1, tioclinux)),
	)
	var names []string
	seen := map[string]bool{}
	for _, n := range append(Denied(profile), extraDeny...) {
		if _, ok := info.SyscallNames[libName(n)]; ok && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("seccomp: empty deny list")
	}
	s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: names, Action: specs.ActErrno, ErrnoRet: &eperm})
	return s, nil
}

// nameDelta is every name whose "known" answer changed with the move from
// the library's tables to x/sys/unix's (the kernel's unistd headers).
// true: now known, false: now refused.
var nameDelta = map[string]bool{
	// Newer syscalls the library (Linux 6.15 tables) lacks.
	"file_getattr": true, "file_setattr": true, "listns": true, "rseq_slice_yield": true,
	"uprobe": true,
	// The library's aarch64 table took the 32-bit-only asm-generic calls
	// (time64) and fstatat, which on 64-bit kernels is named newfstatat
	// (and was known through x86_64): none of them is an aarch64 or x86_64
	// syscall.
	"fstatat":                      false,
	"clock_gettime64":              false,
	"clock_settime64":              false,
	"clock_adjtime64":              false,
	"clock_getres_time64":          false,
	"clock_nanosleep_time64":       false,
	"timer_gettime64":              false,
	"timer_settime64":              false,
	"timerfd_gettime64":            false,
	"timerfd_settime64":            false,
	"utimensat_time64":             false,
	"pselect6_time64":              false,
	"ppoll_time64":                 false,
	"io_pgetevents_time64":         false,
	"recvmmsg_time64":              false,
	"mq_timedsend_time64":          false,
	"mq_timedreceive_time64":       false,
	"semtimedop_time64":            false,
	"rt_sigtimedwait_time64":       false,
	"futex_time64":                 false,
	"sched_rr_get_interval_time64": false,
}

// commonNames are the names both the library and we know.
func commonNames() []string {
	var out []string
	for n := range libInfo().SyscallNames {
		if _, changed := nameDelta[n]; !changed {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

func TestKnownNamesMatchLibrary(t *testing.T) {
	if libInfo() == nil {
		t.Skip("unsupported architecture")
	}
	all := map[string]bool{}
	for _, tbl := range []map[string]int{arch.X86_64.SyscallNames, arch.AARCH64.SyscallNames} {
		for n := range tbl {
			all[n] = true
		}
	}
	for _, e := range sysTable {
		all[e.name] = true
	}
	for _, n := range foreignNames {
		all[n] = true
	}
	for n := range all {
		want := libKnown(n)
		if d, ok := nameDelta[n]; ok {
			want = d
		}
		if got := known(n); got != want {
			t.Errorf("known(%q) = %v, want %v (library: %v)", n, got, want, libKnown(n))
		}
	}
	// The build architecture's numbers are the library's.
	for n, v := range libInfo().SyscallNames {
		if got, ok := sysnum(n); ok && got != uint32(v) {
			t.Errorf("%s: %d, library %d", n, got, v)
		}
	}
}

// policyCase is one policy the code produces: Install (profile, extra),
// InstallAllowing (gVisor's wrapper: allow syslog).
type policyCase struct {
	name    string
	profile string
	extra   []string
	allow   []string
}

func policyCases() []policyCase {
	common := commonNames()
	var every, everyOther []string
	for i, n := range common {
		every = append(every, n)
		if i%2 == 1 {
			everyOther = append(everyOther, n)
		}
	}
	slices.Reverse(everyOther)
	return []policyCase{
		{name: "empty profile", profile: ""},
		{name: "default", profile: ProfileDefault},
		{name: "strict", profile: ProfileStrict},
		{name: "default+getpriority", profile: ProfileDefault, extra: []string{"getpriority"}},
		{name: "strict+getpriority", profile: ProfileStrict, extra: []string{"getpriority"}},
		{name: "gvisor wrapper", profile: ProfileDefault, allow: []string{"syslog"}},
		{name: "gvisor wrapper strict", profile: ProfileStrict, extra: []string{"syslog", "getuid"}, allow: []string{"syslog"}},
		{name: "duplicates and foreign names", profile: ProfileDefault,
			extra: []string{"ptrace", "ptrace", "iopl", "open", "stat", "renameat", "newfstatat", "arch_specific_syscall"}},
		{name: "argument-rule calls denied outright", profile: ProfileDefault,
			extra: []string{"clone", "socket", "ioctl", "personality", "clone3"}},
		{name: "allow everything allowable", profile: ProfileStrict, allow: Denied(ProfileStrict)},
		// More than 255 names: the library inserted extra returns for long
		// jumps, ours splits the runs.
		{name: "every syscall", profile: ProfileDefault, extra: every},
		{name: "every other syscall reversed", profile: ProfileStrict, extra: everyOther},
	}
}

// abiCases are AUDIT_ARCH values a filter can see.
var abiCases = []uint32{
	unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_ARM,
	unix.AUDIT_ARCH_PPC64LE, unix.AUDIT_ARCH_S390X, unix.AUDIT_ARCH_RISCV64, 0, 0xffffffff,
	unix.AUDIT_ARCH_X86_64 ^ 1, unix.AUDIT_ARCH_AARCH64 &^ 0x80000000,
}

// edgeValues are argument values at the edges of every argument rule.
func edgeValues() []uint64 {
	base := []uint64{0, 1, 0xffffffff, 0x7fffffff, 0x80000000,
		cloneNewMask, ^uint64(cloneNewMask) & 0xffffffff, cloneNewMask << 32,
		ipprotoMPTCP, afPacket, tiocsti, tioclinux,
		perLinux, perLinux32, perUname26, perLinux32U26, personaQuery, 0x0040000, 0x0400000,
		unix.AF_INET, unix.AF_INET6, unix.AF_UNIX, unix.IPPROTO_TCP, unix.TCGETS}
	for bit := uint64(1); bit <= 1<<31; bit <<= 1 {
		base = append(base, bit)
	}
	var out []uint64
	for _, v := range base {
		v32 := v & 0xffffffff
		out = append(out, v, v32-1&0xffffffff, v32+1&0xffffffff, 1<<32|v32, 0xffffffff00000000|v32)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func runProg(t testing.TB, vm *bpf.VM, auditArch, nr uint32, args [6]uint64) uint32 {
	t.Helper()
	got, err := vm.Run(seccompData(auditArch, nr, args[:]...))
	if err != nil {
		t.Fatalf("vm: %v", err)
	}
	return uint32(got)
}

type vmPair struct {
	name      string
	ours, lib *bpf.VM
}

func buildPairs(t testing.TB) []vmPair {
	t.Helper()
	if libInfo() == nil {
		t.Skip("unsupported architecture")
	}
	var pairs []vmPair
	for _, c := range policyCases() {
		ours, err := build(c.profile, c.extra, c.allow...)
		if err != nil {
			t.Fatalf("%s: build: %v", c.name, err)
		}
		lib, err := buildLibrary(c.profile, c.extra, c.allow...)
		if err != nil {
			t.Fatalf("%s: library: %v", c.name, err)
		}
		if _, err := bpf.Assemble(ours); err != nil || len(ours) > unix.BPF_MAXINSNS {
			t.Fatalf("%s: %d instructions: %v", c.name, len(ours), err)
		}
		vo, err := bpf.NewVM(ours)
		if err != nil {
			t.Fatalf("%s: ours: %v", c.name, err)
		}
		vl, err := bpf.NewVM(lib)
		if err != nil {
			t.Fatalf("%s: library's: %v", c.name, err)
		}
		pairs = append(pairs, vmPair{c.name, vo, vl})
	}
	return pairs
}

// TestFilterEquivalence runs our program and the library-built one for
// every policy over every syscall number (and past the last), every
// AUDIT_ARCH value above, x32 numbers, and, for the calls with argument
// rules, every edge value in every argument they test.
func TestFilterEquivalence(t *testing.T) {
	pairs := buildPairs(t)
	maxNr := uint32(0)
	for _, e := range sysTable {
		maxNr = max(maxNr, uint32(e.nr))
	}
	var nrs []uint32
	for nr := uint32(0); nr <= maxNr+64; nr++ {
		nrs = append(nrs, nr, nr|x32Bit)
	}
	nrs = append(nrs, x32Bit-1, 0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff, 1<<16, 1<<16|maxNr)
	argNrs := map[uint32]bool{}
	for _, n := range []string{"clone", "clone3", "socket", "ioctl", "personality"} {
		v, _ := sysnum(n)
		argNrs[v] = true
	}
	edges := edgeValues()
	rng := rand.New(rand.NewPCG(1, 14))
	native, _, _ := nativeArch()
	inputs := 0
	for _, pair := range pairs {
		t.Run(pair.name, func(t *testing.T) {
			check := func(a, nr uint32, args [6]uint64) {
				inputs++
				o, l := runProg(t, pair.ours, a, nr, args), runProg(t, pair.lib, a, nr, args)
				if o != l {
					t.Fatalf("arch %#x nr %d (%#x) args %#x: ours %#x, library %#x", a, nr, nr, args, o, l)
				}
			}
			for _, a := range abiCases {
				for _, nr := range nrs {
					check(a, nr, [6]uint64{})
					check(a, nr, [6]uint64{rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64()})
				}
			}
			for nr := range argNrs {
				for _, a := range []uint32{native, unix.AUDIT_ARCH_I386} {
					for i := range 3 {
						for _, v := range edges {
							var args [6]uint64
							args[i] = v
							check(a, nr, args)
							check(a, nr|x32Bit, args)
						}
					}
					if socket, _ := sysnum("socket"); nr != socket || a != native {
						continue
					}
					// Both socket arguments at once.
					for _, d := range edges {
						for _, p := range edges {
							check(a, nr, [6]uint64{d, unix.SOCK_STREAM, p})
						}
					}
				}
			}
		})
	}
	t.Logf("%d inputs agree", inputs)
}

// FuzzFilterEquivalence is TestFilterEquivalence with random seccomp_data.
func FuzzFilterEquivalence(f *testing.F) {
	native, _, _ := nativeArch()
	clone, _ := sysnum("clone")
	socket, _ := sysnum("socket")
	f.Add(uint8(0), uint8(0), uint32(0), clone, uint64(unix.CLONE_NEWUSER), uint64(0), uint64(0), uint64(0))
	f.Add(uint8(1), uint8(0), uint32(0), socket, uint64(unix.AF_INET), uint64(1), uint64(1<<32|ipprotoMPTCP), uint64(0))
	f.Add(uint8(2), uint8(1), uint32(0), uint32(0), uint64(0), uint64(0), uint64(0), uint64(0))
	f.Add(uint8(3), uint8(2), native, uint32(x32Bit|39), uint64(0), uint64(0), uint64(0), uint64(0))
	pairs := buildPairs(f)
	f.Fuzz(func(t *testing.T, policy, archSel uint8, rawArch, nr uint32, a0, a1, a2, a3 uint64) {
		p := pairs[int(policy)%len(pairs)]
		a := rawArch
		switch archSel % 4 {
		case 0:
			a = native
			nr %= 1024 // mostly real numbers
		case 1:
			a = native
		case 2:
			a = abiCases[int(rawArch)%len(abiCases)]
		}
		args := [6]uint64{a0, a1, a2, a3, a0 ^ a3, a1 ^ a2}
		o, l := runProg(t, p.ours, a, nr, args), runProg(t, p.lib, a, nr, args)
		if o != l {
			t.Fatalf("%s: arch %#x nr %d args %#x: ours %#x, library %#x", p.name, a, nr, args, o, l)
		}
	})
}

// TestOCIEquivalence: OCI gives the spec it gave, for every policy.
func TestOCIEquivalence(t *testing.T) {
	if libInfo() == nil {
		t.Skip("unsupported architecture")
	}
	for _, c := range policyCases() {
		if len(c.allow) > 0 {
			continue // OCI has no allow list
		}
		got, err := OCI(c.profile, c.extra)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want, err := ociLibrary(c.profile, c.extra)
		if err != nil {
			t.Fatalf("%s: library: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: OCI differs:\n got %+v\nwant %+v", c.name, got, want)
		}
	}
}

// TestEveryListedNameIsDenied: a name the build architecture has, listed in
// the deny list, is denied (clone3 keeps its ENOSYS). The library's aarch64
// table named 79 fstatat, so its program left newfstatat allowed there.
func TestEveryListedNameIsDenied(t *testing.T) {
	native, _, err := nativeArch()
	if err != nil {
		t.Skip(err)
	}
	var names []string
	for _, e := range sysTable {
		names = append(names, e.name)
	}
	prog, err := build(ProfileDefault, names)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range sysTable {
		want := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
		if e.name == "clone3" {
			want = unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)
		}
		if got := runProg(t, vm, native, uint32(e.nr), [6]uint64{}); got != want {
			t.Errorf("%s (%d): action %#x, want %#x", e.name, e.nr, got, want)
		}
	}
}
