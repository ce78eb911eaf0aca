// Package probe finds out which isolation mechanisms work on this host by
// trying them: it starts children in new namespaces, mounts an overlay in a
// user namespace, asks the kernel for the Landlock ABI, installs a seccomp
// filter in a child, creates a cgroup, runs runsc, and (on request) boots a
// KVM guest. The rows feed the daemon's start-up log, fail-closed checks
// and `agentbox doctor`.
package probe

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/cgroup"
	"github.com/agentbox/agentbox/internal/sandbox/gvisor"
	"github.com/agentbox/agentbox/internal/sandbox/microvm"
)

// Options selects the slow probes.
type Options struct {
	// KVMBoot boots a guest (up to ~10 s); keep it out of start-up paths.
	KVMBoot bool
	// Runsc runs a gVisor smoke test (a few hundred ms).
	Runsc bool
	// Progress, when set, is called as the probe goes: with a row once it
	// is known, and with running set and only the row's name before a
	// slow check (runsc, the KVM boot) starts; cached rows are told the
	// same way.
	Progress func(m sandbox.Mechanism, running bool)
}

var (
	mu    sync.Mutex
	cheap []sandbox.Mechanism
	slow  = map[string][]sandbox.Mechanism{}
)

// Host returns the probe rows; results are cached per process, so only the
// first call of each kind costs anything.
func Host(ctx context.Context, opts Options) []sandbox.Mechanism {
	mu.Lock()
	defer mu.Unlock()
	report := func(ms ...sandbox.Mechanism) {
		if opts.Progress != nil {
			for _, m := range ms {
				opts.Progress(m, false)
			}
		}
	}
	starting := func(name string) {
		if opts.Progress != nil {
			opts.Progress(sandbox.Mechanism{Name: name}, true)
		}
	}
	var rows []sandbox.Mechanism
	if cheap == nil {
		cheap = probeCheap(report)
	} else {
		report(cheap...)
	}
	rows = append(rows, cheap...)
	if opts.Runsc {
		starting("runsc")
		if slow["runsc"] == nil {
			info := gvisor.ProbeRunsc(ctx, "", "")
			slow["runsc"] = []sandbox.Mechanism{{Name: "runsc", OK: info.OK, Detail: runscDetail(info)}}
		}
		report(slow["runsc"]...)
		rows = append(rows, slow["runsc"]...)
	}
	if opts.KVMBoot {
		starting("kvm-boot")
		if slow["kvm"] == nil {
			slow["kvm"] = microvm.Boot(ctx, microvm.Options{}).Mechanisms()
		}
		report(slow["kvm"]...)
		rows = append(rows, slow["kvm"]...)
	} else {
		k := kvmNode()
		report(k)
		rows = append(rows, k)
	}
	return rows
}

func runscDetail(i gvisor.RunscInfo) string {
	if i.Path == "" || i.OK {
		return i.Detail
	}
	return i.Path + ": " + i.Detail
}

// Find returns the row called name.
func Find(rows []sandbox.Mechanism, name string) (sandbox.Mechanism, bool) {
	for _, r := range rows {
		if r.Name == name {
			return r, true
		}
	}
	return sandbox.Mechanism{}, false
}

func kvmNode() sandbox.Mechanism {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return sandbox.Mechanism{Name: "kvm", Detail: fmt.Sprintf("/dev/kvm: %v", err)}
	}
	f.Close()
	return sandbox.Mechanism{Name: "kvm", OK: true, Detail: "/dev/kvm opens (not proof a guest boots: see kvm-boot)"}
}

// probeCheap runs the quick checks, telling report of each row as it is
// known.
func probeCheap(report func(...sandbox.Mechanism)) []sandbox.Mechanism {
	var rows []sandbox.Mechanism
	add := func(name string, err error, okDetail string) {
		m := sandbox.Mechanism{Name: name, OK: err == nil, Detail: okDetail}
		if err != nil {
			m.Detail = err.Error()
		}
		rows = append(rows, m)
		report(m)
	}
	add("userns", tryClone(syscall.CLONE_NEWUSER), "child started in a new user namespace")
	for _, ns := range []struct {
		name string
		flag uintptr
	}{{"mountns", syscall.CLONE_NEWNS}, {"pidns", syscall.CLONE_NEWPID}, {"netns", syscall.CLONE_NEWNET},
		{"ipcns", syscall.CLONE_NEWIPC}, {"utsns", syscall.CLONE_NEWUTS}} {
		add(ns.name, tryClone(syscall.CLONE_NEWUSER|ns.flag), "child started in a new "+strings.TrimSuffix(ns.name, "ns")+" namespace (inside a user namespace)")
	}
	add("overlay-userns", tryHelper(helperOverlay), "overlayfs (userxattr) mounted and written in a user namespace")
	abi, err := LandlockABI()
	add("landlock", err, fmt.Sprintf("ABI %d", abi))
	actions, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail")
	acts := strings.Fields(string(actions))
	if err == nil {
		err = tryHelper(helperSeccomp)
	}
	add("seccomp", err, "deny filter installed in a child; unshare refused with EPERM")
	notif := fmt.Errorf("user_notif not in actions_avail (%s)", strings.Join(acts, " "))
	for _, a := range acts {
		if a == "user_notif" {
			notif = nil
		}
	}
	add("seccomp-user-notif", notif, "SECCOMP_RET_USER_NOTIF available")
	cg := cgroup.Probe()
	m := sandbox.Mechanism{Name: "cgroup", OK: cg.Usable && len(cg.Missing) == 0,
		Detail: fmt.Sprintf("%s (%s): %s", cg.Version, cg.Mode, strings.Join(cg.Controllers, " "))}
	if len(cg.Missing) > 0 {
		m.Detail += "; missing " + strings.Join(cg.Missing, " ")
	}
	if cg.Err != "" {
		m.Detail += "; " + cg.Err
	}
	rows = append(rows, m)
	report(m)
	return rows
}

// LandlockABI asks the kernel for its Landlock ABI version.
func LandlockABI() (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, fmt.Errorf("landlock unavailable: %w", errno)
	}
	return int(r), nil
}

// idMaps maps root inside to the caller, which works unprivileged too.
func idMaps() ([]syscall.SysProcIDMap, []syscall.SysProcIDMap) {
	return []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		[]syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
}

// tryClone starts the running binary as a probe helper that exits at once,
// in new namespaces.
func tryClone(flags uintptr) error {
	return runHelper(helperExit, flags)
}

func tryHelper(name string) error {
	return runHelper(name, syscall.CLONE_NEWUSER|syscall.CLONE_NEWNS)
}

func runHelper(name string, flags uintptr) error {
	if err := reexec.Check(helperArg0); err != nil {
		return err
	}
	// Not a caller's context: Host caches these results for the whole
	// process, so one caller giving up must not mark a mechanism missing
	// for every later one. The helpers exit at once.
	cmd := exec.CommandContext(context.Background(), sandbox.SelfExe())
	cmd.Args = []string{helperArg0, name}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags, Pdeathsig: syscall.SIGKILL}
	if flags&syscall.CLONE_NEWUSER != 0 {
		cmd.SysProcAttr.UidMappings, cmd.SysProcAttr.GidMappings = idMaps()
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if s := strings.TrimSpace(string(out)); s != "" {
			return fmt.Errorf("%w: %s", err, s)
		}
		return err
	}
	return nil
}
