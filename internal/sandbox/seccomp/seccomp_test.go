package seccomp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// The tests re-execute the test binary as a child that (optionally)
// installs the filter and reports how each probe syscall ended; a filter
// cannot be removed, so it must never be installed in the test process.
const childEnv = "AGENTBOX_SECCOMP_TEST_CHILD"

type childConfig struct {
	Install bool     `json:"install"`
	Profile string   `json:"profile"`
	Extra   []string `json:"extra"`
}

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(child(cfg))
	}
	os.Exit(m.Run())
}

func child(raw string) int {
	var cfg childConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if cfg.Install {
		if err := Install(cfg.Profile, cfg.Extra); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
	}
	out := map[string]string{}
	for _, p := range probes {
		out[p.name] = errnoName(p.call())
	}
	out["go-threads"] = goThreads()
	out["python-threads"] = runOut(pythonPath(), "-c",
		"import threading,subprocess\n"+
			"t=threading.Thread(target=lambda: None); t.start(); t.join()\n"+
			"subprocess.run(['true'], check=True); print('OK', end='')")
	out["unshare-U"] = runOut("unshare", "-U", "true")
	out["unshare-rn"] = runOut("unshare", "-rn", "true")
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		return 4
	}
	return 0
}

func errnoName(e unix.Errno) string {
	if e == 0 {
		return "OK"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// goThreads forces the Go runtime to create new OS threads (clone without
// namespace flags) and reports whether they ran.
func goThreads() string {
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // keeps this M busy so others need new threads
			time.Sleep(20 * time.Millisecond)
		}()
	}
	wg.Wait()
	return "OK"
}

func pythonPath() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

func runOut(name string, args ...string) string {
	cmd := exec.Command(name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Sprintf("FAIL: %v: %s", err, strings.TrimSpace(errb.String()))
	}
	if s := out.String(); s != "" {
		return s
	}
	return "OK"
}

// sc calls syscall name of the running architecture. Every probe passes
// arguments the kernel rejects (bad fd, missing path, bad magic), so an
// unfiltered call is harmless and ends with an errno other than EPERM.
func sc(name string, args ...uintptr) unix.Errno {
	nr, ok := sysnum(name)
	if !ok {
		panic("no syscall " + name)
	}
	var a [6]uintptr
	copy(a[:], args)
	r, _, e := unix.Syscall6(uintptr(nr), a[0], a[1], a[2], a[3], a[4], a[5])
	if e == 0 && name == "socket" {
		unix.Close(int(r))
	}
	return e
}

func str(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

const (
	missing  = "/nonexistent-agentbox-seccomp-test"
	badFD    = ^uintptr(0) // -1
	cloneSig = 0x800       // CLONE_SIGHAND without CLONE_VM: EINVAL before anything happens
)

type probe struct {
	name string
	call func() unix.Errno
	// want under the default profile; "" means the profile allows it and
	// it must end as it does without a filter.
	want unix.Errno
	// strictOnly rules are allowed by the default profile.
	strictOnly bool
}

var probes = []probe{
	{"ptrace", func() unix.Errno { return sc("ptrace", unix.PTRACE_ATTACH, 0x7ffffff0) }, unix.EPERM, false},
	{"process_vm_readv", func() unix.Errno { return sc("process_vm_readv", 0x7ffffff0, 0, 0, 0, 0, 1) }, unix.EPERM, false},
	{"process_vm_writev", func() unix.Errno { return sc("process_vm_writev", 0x7ffffff0, 0, 0, 0, 0, 1) }, unix.EPERM, false},
	{"mount", func() unix.Errno { return sc("mount", str("none"), str(missing), str("tmpfs"), 0, 0) }, unix.EPERM, false},
	{"umount2", func() unix.Errno { return sc("umount2", str(missing), 0) }, unix.EPERM, false},
	{"pivot_root", func() unix.Errno { return sc("pivot_root", str(missing), str(missing+"2")) }, unix.EPERM, false},
	{"chroot", func() unix.Errno { return sc("chroot", str(missing)) }, unix.EPERM, false},
	{"fsopen", func() unix.Errno { return sc("fsopen", str("agentbox-nofs"), 0) }, unix.EPERM, false},
	{"fsconfig", func() unix.Errno { return sc("fsconfig", badFD, 0, 0, 0, 0) }, unix.EPERM, false},
	{"fsmount", func() unix.Errno { return sc("fsmount", badFD, 0, 0) }, unix.EPERM, false},
	{"fspick", func() unix.Errno { return sc("fspick", badFD, str(missing), 0) }, unix.EPERM, false},
	{"move_mount", func() unix.Errno { return sc("move_mount", badFD, str(missing), badFD, str(missing), 0) }, unix.EPERM, false},
	{"open_tree", func() unix.Errno { return sc("open_tree", badFD, str(missing), 0) }, unix.EPERM, false},
	{"mount_setattr", func() unix.Errno { return sc("mount_setattr", badFD, str(missing), 0, 0, 0) }, unix.EPERM, false},
	{"unshare", func() unix.Errno { return sc("unshare", 0x1) }, unix.EPERM, false},
	{"setns", func() unix.Errno { return sc("setns", badFD, 0) }, unix.EPERM, false},
	{"bpf", func() unix.Errno { return sc("bpf", 9999, 0, 0) }, unix.EPERM, false},
	{"keyctl", func() unix.Errno { return sc("keyctl", 9999) }, unix.EPERM, false},
	{"add_key", func() unix.Errno { return sc("add_key", 0, 0, 0, 0, 0) }, unix.EPERM, false},
	{"request_key", func() unix.Errno { return sc("request_key", 0, 0, 0, 0) }, unix.EPERM, false},
	{"io_uring_setup", func() unix.Errno { return sc("io_uring_setup", 0, 0) }, unix.EPERM, false},
	{"io_uring_enter", func() unix.Errno { return sc("io_uring_enter", badFD, 0, 0, 0, 0, 0) }, unix.EPERM, false},
	{"io_uring_register", func() unix.Errno { return sc("io_uring_register", badFD, 0, 0, 0) }, unix.EPERM, false},
	{"userfaultfd", func() unix.Errno { return sc("userfaultfd", 0xffff) }, unix.EPERM, false},
	{"perf_event_open", func() unix.Errno { return sc("perf_event_open", 0, 0, badFD, badFD, 0) }, unix.EPERM, false},
	{"fanotify_init", func() unix.Errno { return sc("fanotify_init", 0xffffffff, 0) }, unix.EPERM, false},
	{"kexec_load", func() unix.Errno { return sc("kexec_load", 0, 0xffff, 0, 0xdead0000) }, unix.EPERM, false},
	{"kexec_file_load", func() unix.Errno { return sc("kexec_file_load", badFD, badFD, 0, 0, 0xffffffff) }, unix.EPERM, false},
	{"init_module", func() unix.Errno { return sc("init_module", 0, 0, 0) }, unix.EPERM, false},
	{"finit_module", func() unix.Errno { return sc("finit_module", badFD, str(""), 0) }, unix.EPERM, false},
	{"delete_module", func() unix.Errno { return sc("delete_module", str("agentbox_no_such_module"), 0) }, unix.EPERM, false},
	{"acct", func() unix.Errno { return sc("acct", str(missing)) }, unix.EPERM, false},
	{"swapon", func() unix.Errno { return sc("swapon", str(missing), 0) }, unix.EPERM, false},
	{"swapoff", func() unix.Errno { return sc("swapoff", str(missing)) }, unix.EPERM, false},
	{"reboot", func() unix.Errno { return sc("reboot", 0, 0, 0, 0) }, unix.EPERM, false},
	{"syslog", func() unix.Errno { return sc("syslog", 9999, 0, 0) }, unix.EPERM, false},
	{"quotactl_fd", func() unix.Errno { return sc("quotactl_fd", badFD, 0, 0, 0) }, unix.EPERM, false},
	{"lookup_dcookie", func() unix.Errno { return sc("lookup_dcookie", 0, 0, 0) }, unix.EPERM, false},
	{"vhangup", func() unix.Errno { return sc("vhangup") }, unix.EPERM, false},
	{"open_by_handle_at", func() unix.Errno { return sc("open_by_handle_at", badFD, 0, 0) }, unix.EPERM, false},
	{"name_to_handle_at", func() unix.Errno { return sc("name_to_handle_at", badFD, 0, 0, 0, 0xffff) }, unix.EPERM, false},
	// Argument rules.
	{"clone3", func() unix.Errno { return sc("clone3", 0, 0) }, unix.ENOSYS, false},
	{"clone-NEWNS", func() unix.Errno { return sc("clone", unix.CLONE_NEWNS|cloneSig) }, unix.EPERM, false},
	{"clone-NEWCGROUP", func() unix.Errno { return sc("clone", unix.CLONE_NEWCGROUP|cloneSig) }, unix.EPERM, false},
	{"clone-NEWUTS", func() unix.Errno { return sc("clone", unix.CLONE_NEWUTS|cloneSig) }, unix.EPERM, false},
	{"clone-NEWIPC", func() unix.Errno { return sc("clone", unix.CLONE_NEWIPC|cloneSig) }, unix.EPERM, false},
	{"clone-NEWUSER", func() unix.Errno { return sc("clone", unix.CLONE_NEWUSER|cloneSig) }, unix.EPERM, false},
	{"clone-NEWPID", func() unix.Errno { return sc("clone", unix.CLONE_NEWPID|cloneSig) }, unix.EPERM, false},
	{"clone-NEWNET", func() unix.Errno { return sc("clone", unix.CLONE_NEWNET|cloneSig) }, unix.EPERM, false},
	{"clone-plain", func() unix.Errno { return sc("clone", cloneSig) }, 0, false},
	{"socket-mptcp4", func() unix.Errno { return sc("socket", unix.AF_INET, unix.SOCK_STREAM, ipprotoMPTCP) }, unix.EPERM, false},
	{"socket-mptcp6", func() unix.Errno { return sc("socket", unix.AF_INET6, unix.SOCK_STREAM, ipprotoMPTCP) }, unix.EPERM, false},
	{"socket-mptcp-highbits", func() unix.Errno { return sc("socket", unix.AF_INET, unix.SOCK_STREAM, 1<<32|ipprotoMPTCP) }, unix.EPERM, false},
	{"socket-packet", func() unix.Errno { return sc("socket", unix.AF_PACKET, unix.SOCK_RAW, 0) }, unix.EPERM, false},
	{"socket-tcp", func() unix.Errno { return sc("socket", unix.AF_INET, unix.SOCK_STREAM, 0) }, 0, false},
	{"socket-tcp-proto", func() unix.Errno { return sc("socket", unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP) }, 0, false},
	{"socket-unix", func() unix.Errno { return sc("socket", unix.AF_UNIX, unix.SOCK_STREAM, 0) }, 0, false},
	{"ioctl-TIOCSTI", func() unix.Errno { return sc("ioctl", badFD, unix.TIOCSTI, 0) }, unix.EPERM, false},
	{"ioctl-TIOCSTI-highbits", func() unix.Errno { return sc("ioctl", badFD, 1<<32|unix.TIOCSTI, 0) }, unix.EPERM, false},
	{"ioctl-TIOCLINUX", func() unix.Errno { return sc("ioctl", badFD, unix.TIOCLINUX, 0) }, unix.EPERM, false},
	{"ioctl-TCGETS", func() unix.Errno { return sc("ioctl", badFD, unix.TCGETS, 0) }, 0, false},
	{"personality-ADDR_NO_RANDOMIZE", func() unix.Errno { return sc("personality", 0x0040000 /* ADDR_NO_RANDOMIZE */) }, unix.EPERM, false},
	{"personality-query", func() unix.Errno { return sc("personality", 0xffffffff) }, 0, false},
	// Strict only.
	{"kcmp", func() unix.Errno { return sc("kcmp", 0, 0, 9999, 0, 0) }, unix.EPERM, true},
	{"pidfd_getfd", func() unix.Errno { return sc("pidfd_getfd", badFD, 0, 0) }, unix.EPERM, true},
	{"settimeofday", func() unix.Errno { return sc("settimeofday", 0, 0) }, unix.EPERM, true},
	// Extra deny (the test passes it in extraDeny).
	{"getpriority", func() unix.Errno { return sc("getpriority", 0xffff, 0) }, 0, false},
}

func runChild(t *testing.T, cfg childConfig) map[string]string {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	// A new session: vhangup without a controlling terminal is harmless.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("child %s: %v\nstderr: %s", raw, err, errb.String())
	}
	res := map[string]string{}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("child output %q: %v", out.String(), err)
	}
	return res
}

func TestInstall(t *testing.T) {
	base := runChild(t, childConfig{})
	for _, profile := range []string{ProfileDefault, ProfileStrict} {
		t.Run(profile, func(t *testing.T) {
			got := runChild(t, childConfig{Install: true, Profile: profile, Extra: []string{"getpriority"}})
			for _, p := range probes {
				want := p.want
				if p.strictOnly && profile != ProfileStrict {
					want = 0
				}
				if p.name == "getpriority" {
					want = unix.EPERM
				}
				switch {
				case want == 0:
					// Allowed: must end exactly as it does unfiltered.
					if got[p.name] != base[p.name] {
						t.Errorf("%s: filtered %s, unfiltered %s; want it allowed", p.name, got[p.name], base[p.name])
					}
				case base[p.name] == errnoName(want):
					// The kernel already answers this way here; the
					// probe cannot tell the filter apart.
					t.Logf("%s: unfiltered result is already %s on this host; not conclusive", p.name, base[p.name])
				case got[p.name] != errnoName(want):
					t.Errorf("%s: got %s, want %s (unfiltered: %s)", p.name, got[p.name], errnoName(want), base[p.name])
				}
			}
			for _, k := range []string{"go-threads", "python-threads"} {
				if got[k] != "OK" {
					t.Errorf("%s under the filter: %s", k, got[k])
				}
			}
			for _, k := range []string{"unshare-U", "unshare-rn"} {
				if !strings.Contains(got[k], "Operation not permitted") {
					t.Errorf("%s under the filter: %q, want it to fail with EPERM", k, got[k])
				}
				if base[k] != "OK" {
					t.Logf("%s fails even without the filter here: %s", k, base[k])
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		profile string
		extra   []string
		wantErr string
	}{
		{"", nil, ""},
		{"default", []string{"getpriority", "iopl"}, ""}, // iopl exists on x86_64 only: still known
		{"strict", nil, ""},
		{"lenient", nil, `unknown profile "lenient"`},
		{"default", []string{"getpriority", "no_such_call", "mount2"}, `unknown syscall name(s) ["no_such_call" "mount2"]`},
	}
	for _, tt := range tests {
		err := Check(tt.profile, tt.extra)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("Check(%q, %q) = %v", tt.profile, tt.extra, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("Check(%q, %q) = %v, want error containing %q", tt.profile, tt.extra, err, tt.wantErr)
		}
		if err := Install(tt.profile, tt.extra); err == nil {
			t.Errorf("Install(%q, %q) succeeded, want the Check error", tt.profile, tt.extra)
		}
	}
}

func TestDeniedAndRules(t *testing.T) {
	def, strict := Denied(""), Denied(ProfileStrict)
	if len(def) == 0 || len(strict) <= len(def) {
		t.Fatalf("Denied: default %d names, strict %d; strict must be a strict superset", len(def), len(strict))
	}
	for _, n := range def {
		if !known(n) {
			t.Errorf("default denies unknown syscall %q", n)
		}
	}
	for _, n := range strict {
		if !known(n) {
			t.Errorf("strict denies unknown syscall %q", n)
		}
	}
	if Denied("nope") != nil || Rules("nope") != nil {
		t.Error("unknown profile must give nil")
	}
	if got := len(Rules("")); got != len(def)+len(argRules) {
		t.Errorf("Rules: %d, want %d", got, len(def)+len(argRules))
	}
}

// seccompData lays out struct seccomp_data for the x/net/bpf VM, which loads
// 32-bit words big-endian: each word is written big-endian at the offset the
// kernel would use on a little-endian machine.
func seccompData(auditArch uint32, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], auditArch)
	for i, a := range args {
		binary.BigEndian.PutUint32(b[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(b[20+8*i:], uint32(a>>32))
	}
	return b
}

// TestProgramABI checks what cannot be provoked from Go: a foreign-ABI
// syscall kills the process, an x32 one fails with ENOSYS.
func TestProgramABI(t *testing.T) {
	prog, err := build("", nil)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	native, _, err := nativeArch()
	if err != nil {
		t.Skip(err)
	}
	getpid, _ := sysnum("getpid")
	mount, _ := sysnum("mount")
	tests := []struct {
		name string
		data []byte
		want uint32
	}{
		{"native getpid", seccompData(native, getpid), unix.SECCOMP_RET_ALLOW},
		{"native mount", seccompData(native, mount), unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)},
		{"foreign arch", seccompData(unix.AUDIT_ARCH_I386, getpid), unix.SECCOMP_RET_KILL_PROCESS},
		{"arm32 arch", seccompData(unix.AUDIT_ARCH_ARM, getpid), unix.SECCOMP_RET_KILL_PROCESS},
	}
	if runtime.GOARCH == "amd64" {
		tests = append(tests, struct {
			name string
			data []byte
			want uint32
		}{"x32 getpid", seccompData(native, getpid|x32Bit), unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)})
	}
	for _, tt := range tests {
		got, err := vm.Run(tt.data)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if uint32(got) != tt.want {
			t.Errorf("%s: action %#x, want %#x", tt.name, uint32(got), tt.want)
		}
	}
}

func TestOCI(t *testing.T) {
	s, err := OCI(ProfileStrict, []string{"getpriority"})
	if err != nil {
		t.Fatal(err)
	}
	if s.DefaultAction != "SCMP_ACT_ALLOW" || len(s.Architectures) != 1 {
		t.Errorf("default %s, arches %v", s.DefaultAction, s.Architectures)
	}
	names := map[string]bool{}
	var cloneRules int
	for _, r := range s.Syscalls {
		for _, n := range r.Names {
			names[n] = true
		}
		if r.Names[0] == "clone3" && (r.ErrnoRet == nil || *r.ErrnoRet != uint(unix.ENOSYS)) {
			t.Errorf("clone3 rule %+v, want ENOSYS", r)
		}
		if r.Names[0] == "clone" {
			cloneRules++
		}
	}
	if cloneRules != 7 {
		t.Errorf("%d clone rules, want one per CLONE_NEW* flag (7)", cloneRules)
	}
	for _, n := range append(Denied(ProfileStrict), "getpriority", "socket", "ioctl") {
		if _, onArch := sysnum(n); onArch && !names[n] {
			t.Errorf("OCI profile lacks %s", n)
		}
	}
	if _, err := OCI("default", []string{"nope"}); err == nil {
		t.Error("OCI accepted an unknown syscall")
	}
}
