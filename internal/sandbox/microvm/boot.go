package microvm

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// BootResult is the outcome of one boot probe.
type BootResult struct {
	OK bool `json:"ok"`
	// Reason says what failed ("" when OK).
	Reason string `json:"reason,omitempty"`
	// KVM: /dev/kvm could be opened read-write.
	KVM    bool          `json:"kvm"`
	QEMU   string        `json:"qemu,omitempty"`
	Kernel string        `json:"kernel,omitempty"`
	Took   time.Duration `json:"took"`
}

// Mechanisms renders the result as host-probe rows.
func (b BootResult) Mechanisms() []sandbox.Mechanism {
	kvm := sandbox.Mechanism{Name: "kvm", OK: b.KVM, Detail: "/dev/kvm opens read-write"}
	if !b.KVM {
		kvm.Detail = "/dev/kvm missing or not accessible"
	}
	boot := sandbox.Mechanism{Name: "kvm-boot", OK: b.OK}
	if b.OK {
		boot.Detail = fmt.Sprintf("guest %s reached init in %v", filepath.Base(b.Kernel), b.Took.Round(time.Millisecond))
	} else {
		boot.Detail = b.Reason
	}
	return []sandbox.Mechanism{kvm, boot}
}

// Boot tries to boot a real guest under KVM: QEMU's microvm machine, the
// host's kernel, and an initramfs whose /init is the running binary. It
// succeeds only when the guest's init prints its marker within the
// timeout.
func Boot(ctx context.Context, opts Options) (res BootResult) {
	start := time.Now()
	defer func() { res.Took = time.Since(start) }()
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
		f.Close()
		res.KVM = true
	}
	accel, cpu, extra := "kvm", "host", ""
	switch opts.Accel {
	case "", "kvm":
		if !res.KVM {
			res.Reason = "no usable /dev/kvm"
			return res
		}
	case "tcg":
		// Without a TSC frequency a TCG guest can hang calibrating it.
		accel, cpu, extra = "tcg", "max", tscParam()
	default:
		res.Reason = fmt.Sprintf("unknown accelerator %q", opts.Accel)
		return res
	}
	qemu := opts.QEMU
	if qemu == "" {
		qemu = "qemu-system-x86_64"
	}
	qemu, err := exec.LookPath(qemu)
	if err != nil {
		res.Reason = fmt.Sprintf("QEMU not installed: %v", err)
		return res
	}
	res.QEMU = qemu
	res.Kernel = opts.Kernel
	if res.Kernel == "" {
		if res.Kernel, err = hostKernel(); err != nil {
			res.Reason = err.Error()
			return res
		}
	}
	exe := sandbox.SelfExe()
	if err := reexec.Check(guestArg); err != nil {
		res.Reason = err.Error()
		return res
	}
	if err := checkStatic(exe); err != nil {
		res.Reason = err.Error()
		return res
	}
	dir, err := os.MkdirTemp("", "agentbox-microvm-probe-")
	if err != nil {
		res.Reason = err.Error()
		return res
	}
	defer func() { _ = os.RemoveAll(dir) }() // best effort: a temp dir
	initrd := filepath.Join(dir, "initrd.cpio")
	if err := writeInitramfs(initrd, exe); err != nil {
		res.Reason = fmt.Sprintf("write initramfs: %v", err)
		return res
	}

	ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on",
		"-accel", accel, "-cpu", cpu, "-m", "256", "-smp", "1",
		"-nodefaults", "-no-user-config", "-nographic", "-serial", "stdio", "-no-reboot",
		"-kernel", res.Kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet reboot=t panic=-1"+extra+" -- "+guestArg)
	out := &markerWriter{found: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		res.Reason = fmt.Sprintf("start %s: %v", qemu, err)
		return res
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-out.found:
		res.OK = true
		cancel() // the guest is rebooting; do not wait for QEMU politely
		<-done   //nolint:errcheck // QEMU was killed on purpose: its exit error says nothing
		return res
	case err := <-done:
		if out.seen() {
			res.OK = true
			return res
		}
		if ctx.Err() != nil {
			res.Reason = fmt.Sprintf("guest did not reach init within %v%s", opts.Timeout, out.tail())
		} else {
			res.Reason = fmt.Sprintf("qemu exited (%v) before the guest reached init%s", err, out.tail())
		}
		return res
	}
}

// tscParam returns " tsc_early_khz=N" from the host's CPU frequency.
func tscParam() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && mhz > 0 {
				return fmt.Sprintf(" tsc_early_khz=%d", int(mhz*1000))
			}
		}
	}
	return ""
}

// hostKernel returns the newest /boot/vmlinuz-*.
func hostKernel() (string, error) {
	ks, _ := filepath.Glob("/boot/vmlinuz-*")
	var readable []string
	for _, k := range ks {
		if f, err := os.Open(k); err == nil {
			f.Close()
			readable = append(readable, k)
		}
	}
	if len(readable) == 0 {
		return "", errors.New("no guest kernel: no readable /boot/vmlinuz-*")
	}
	sort.Strings(readable)
	return readable[len(readable)-1], nil
}

// checkStatic refuses a dynamically linked binary: the initramfs has no
// libc, so such an /init could never run.
func checkStatic(exe string) error {
	f, err := elf.Open(exe)
	if err != nil {
		return fmt.Errorf("guest init %s: %w", exe, err)
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("guest init %s is dynamically linked (build with CGO_ENABLED=0)", exe)
		}
	}
	return nil
}

// markerWriter keeps the console's last bytes and signals the marker.
type markerWriter struct {
	mu    sync.Mutex
	buf   []byte
	hit   bool
	found chan struct{}
}

func (w *markerWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if !w.hit && bytes.Contains(w.buf, []byte(guestMarker)) {
		w.hit = true
		close(w.found)
	}
	if len(w.buf) > 64<<10 {
		w.buf = w.buf[len(w.buf)-32<<10:]
	}
	return len(p), nil
}

func (w *markerWriter) seen() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hit
}

// tail returns the console's last lines, for the failure reason.
func (w *markerWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(w.buf)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	s := strings.TrimSpace(strings.Join(lines, " | "))
	if s == "" {
		return " (no console output)"
	}
	return "; last output: " + s
}
