package microvm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
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
	interp, err := hasInterp(exe)
	if err != nil {
		return fmt.Errorf("guest init %s: %w", exe, err)
	}
	if interp {
		return fmt.Errorf("guest init %s is dynamically linked (build with CGO_ENABLED=0)", exe)
	}
	return nil
}

// hasInterp reports whether the ELF file exe has a PT_INTERP program
// header (asks for a dynamic loader). It reads only the ELF header and
// the program headers, not the whole of debug/elf's model of the file
// (debug/elf, with its DWARF and compressed-section readers, cost 150 KiB
// of the binary for this one check).
func hasInterp(exe string) (bool, error) {
	f, err := os.Open(exe)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	var ident [16]byte
	if _, err := io.ReadFull(f, ident[:]); err != nil || string(ident[:4]) != "\x7fELF" {
		return false, errors.New("not an ELF file")
	}
	var bo binary.ByteOrder
	switch ident[5] {
	case 1:
		bo = binary.LittleEndian
	case 2:
		bo = binary.BigEndian
	default:
		return false, errors.New("ELF file of unknown byte order")
	}
	// e_phoff, e_phentsize, e_phnum: their offsets and widths differ
	// between ELFCLASS32 and ELFCLASS64.
	var hdr [64]byte
	n, err := f.ReadAt(hdr[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return false, err
	}
	var phoff int64
	var phentsize, phnum int
	switch {
	case ident[4] == 1 && n >= 52:
		phoff, phentsize, phnum = int64(bo.Uint32(hdr[28:])), int(bo.Uint16(hdr[42:])), int(bo.Uint16(hdr[44:]))
	case ident[4] == 2 && n >= 64:
		phoff, phentsize, phnum = int64(bo.Uint64(hdr[32:])), int(bo.Uint16(hdr[54:])), int(bo.Uint16(hdr[56:]))
	default:
		return false, errors.New("ELF header of unknown class or cut short")
	}
	if phnum > 0 && phentsize < 4 || phnum > 1<<16 {
		return false, errors.New("malformed ELF program headers")
	}
	const ptInterp = 3
	p := make([]byte, 4)
	for i := range phnum {
		if _, err := f.ReadAt(p, phoff+int64(i*phentsize)); err != nil {
			return false, fmt.Errorf("reading ELF program header %d: %w", i, err)
		}
		if bo.Uint32(p) == ptInterp {
			return true, nil
		}
	}
	return false, nil
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
