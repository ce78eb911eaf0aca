package microvm

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

type cpioEntry struct {
	name       string
	mode       uint32
	data       []byte
	rdevMajor  uint32
	rdevMinor  uint32
	headerAt   int
	dataOffset int
}

// readCPIO parses a newc archive strictly (as the kernel does), up to the
// trailer.
func readCPIO(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("bad header field %d at %d: %v", i, off, err)
		}
		return uint32(v)
	}
	for {
		if off%4 != 0 {
			t.Fatalf("header at %d not 4-aligned", off)
		}
		if string(b[off:off+6]) != "070701" {
			t.Fatalf("bad magic at %d: %q", off, b[off:off+6])
		}
		e := cpioEntry{mode: field(1), rdevMajor: field(9), rdevMinor: field(10), headerAt: off}
		size, nameSize := int(field(6)), int(field(11))
		name := b[off+110 : off+110+nameSize]
		if name[len(name)-1] != 0 {
			t.Fatalf("name at %d not NUL-terminated", off)
		}
		e.name = string(name[:len(name)-1])
		off = (off + 110 + nameSize + 3) &^ 3
		e.dataOffset = off
		e.data = b[off : off+size]
		off = (off + size + 3) &^ 3
		if e.name == "TRAILER!!!" {
			if off != len(b) {
				t.Errorf("%d bytes after the trailer", len(b)-off)
			}
			return out
		}
		out = append(out, e)
	}
}

func TestCPIO(t *testing.T) {
	var buf bytes.Buffer
	err := writeCPIO(&buf, []cpioFile{
		{Name: "dev", Mode: 0o040755},
		{Name: "dev/console", Mode: 0o020600, RdevMajor: 5, RdevMinor: 1},
		{Name: "init", Mode: 0o100755, Data: strings.NewReader("hello"), Size: 5},
		{Name: "odd-name-len", Mode: 0o100644, Data: strings.NewReader("x"), Size: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := readCPIO(t, buf.Bytes())
	want := []struct {
		name string
		mode uint32
		data string
	}{{"dev", 0o040755, ""}, {"dev/console", 0o020600, ""}, {"init", 0o100755, "hello"}, {"odd-name-len", 0o100644, "x"}}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].name != w.name || got[i].mode != w.mode || string(got[i].data) != w.data {
			t.Errorf("entry %d = %q %o %q, want %q %o %q", i, got[i].name, got[i].mode, got[i].data, w.name, w.mode, w.data)
		}
	}
	if got[1].rdevMajor != 5 || got[1].rdevMinor != 1 {
		t.Errorf("console rdev %d:%d, want 5:1", got[1].rdevMajor, got[1].rdevMinor)
	}
	// A short reader must fail rather than write a corrupt archive.
	err = writeCPIO(io.Discard, []cpioFile{{Name: "x", Mode: 0o100644, Data: strings.NewReader("ab"), Size: 10}})
	if err == nil {
		t.Error("short data: no error")
	}
	if cpio := exec.Command("cpio", "-t"); cpio.Err == nil {
		cpio.Stdin = bytes.NewReader(buf.Bytes())
		out, err := cpio.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "odd-name-len") {
			t.Errorf("cpio -t: %v: %s", err, out)
		}
	}
}

func TestInitramfsCarriesBinary(t *testing.T) {
	exe := sandbox.SelfExe()
	path := filepath.Join(t.TempDir(), "initrd")
	if err := writeInitramfs(path, exe); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range readCPIO(t, b) {
		if e.name == "init" {
			if !bytes.Equal(e.data, self) || e.mode != 0o100755 {
				t.Fatalf("/init: %d bytes mode %o; want the %d-byte binary, 0755", len(e.data), e.mode, len(self))
			}
			return
		}
	}
	t.Fatal("no /init in the initramfs")
}

// TestGuestInit runs the guest init as PID 1 of a new pid namespace: it
// must print the marker, and its reboot must end the namespace (SIGHUP to
// its init), just as it ends QEMU in a VM.
func TestGuestInit(t *testing.T) {
	cmd := exec.Command(sandbox.SelfExe(), guestArg)
	cmd.Args[0] = "/init"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	if !strings.Contains(string(out), guestMarker) {
		t.Fatalf("guest init printed %q (%v), want the marker", out, err)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGHUP {
		t.Errorf("guest init ended with %v, want SIGHUP from reboot(RESTART) in its pid namespace", err)
	}
}

func TestBootProbeAndCreate(t *testing.T) {
	timeout := 10 * time.Second
	rt := New(Options{Timeout: timeout})
	start := time.Now()
	p := rt.Probe(t.Context())
	took := time.Since(start)
	t.Logf("probe after %v: %+v", took.Round(time.Millisecond), p)
	if took > timeout+10*time.Second {
		t.Errorf("probe took %v, want it bounded by the %v timeout", took, timeout)
	}
	if p.Runtime != Name || p.Available {
		t.Errorf("Probe = %+v; want runtime %q, never available (no backend)", p, Name)
	}
	if p.Reason == "" || len(p.Mechanisms) != 2 {
		t.Errorf("Probe = %+v; want a reason and the kvm and kvm-boot rows", p)
	}
	b := rt.bootResult(t.Context())
	switch {
	case !b.KVM:
		if b.Reason != "no usable /dev/kvm" {
			t.Errorf("no KVM, reason %q does not say so", b.Reason)
		}
	case b.QEMU == "":
		if !strings.Contains(b.Reason, "QEMU not installed") {
			t.Errorf("no QEMU, reason %q does not say so", b.Reason)
		}
	case !b.OK && b.Reason == "":
		t.Error("failed boot without a reason")
	}
	// Cached: a second probe does not boot again.
	start = time.Now()
	if p2 := rt.Probe(t.Context()); p2.Reason != p.Reason || time.Since(start) > time.Second {
		t.Errorf("second probe %+v after %v; want the cached result at once", p2, time.Since(start))
	}
	_, err := rt.Create(t.Context(), sandbox.Spec{})
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("Create: %v, want ErrUnavailable", err)
	}
	want := "microvm backend not implemented"
	if !b.OK {
		want = fmt.Sprintf("boot probe failed: %s", b.Reason)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("Create error %q does not contain %q", err, want)
	}
}

func TestCheckStatic(t *testing.T) {
	if err := checkStatic("/bin/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("checkStatic(/bin/sh) = %v, want dynamically linked", err)
	}
	if err := checkStatic(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("checkStatic(missing) = nil")
	}
}

// TestHasInterp holds hasInterp's reading of the program headers to
// debug/elf's, on the system's binaries and libraries (static and
// dynamic, executables and shared objects) and this test binary; files
// that are not ELF, or are cut short, are errors.
func TestHasInterp(t *testing.T) {
	var files []string
	for _, dir := range []string{"/bin", "/usr/lib/x86_64-linux-gnu", "/usr/lib/i386-linux-gnu", "/usr/libexec"} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.Type().IsRegular() {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		files = append(files, exe)
	}
	checked := 0
	for _, path := range files {
		f, err := elf.Open(path)
		if err != nil {
			continue
		}
		want := false
		for _, p := range f.Progs {
			want = want || p.Type == elf.PT_INTERP
		}
		_ = f.Close()
		got, err := hasInterp(path)
		if err != nil || got != want {
			t.Errorf("hasInterp(%s) = %v, %v; debug/elf: %v", path, got, err, want)
		}
		checked++
	}
	if checked < 10 {
		t.Fatalf("only %d ELF files found to check", checked)
	}
	dir := t.TempDir()
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"text": []byte("#!/bin/sh\n"), "empty": nil, "header only": sh[:20], "no program headers": sh[:64]} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, content, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := hasInterp(path); err == nil {
			t.Errorf("hasInterp(%s) = nil error", name)
		}
	}
}

// TestBootTCG boots the probe's guest under software emulation, which works
// on any host with QEMU and a kernel: it shows that the initramfs and the
// guest init are right, so a failing KVM probe is the host's fault.
func TestBootTCG(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skip("qemu-system-x86_64 is not installed (scripts/setup installs qemu-system-x86)")
	}
	if _, err := hostKernel(); err != nil {
		t.Skipf("%v (scripts/setup installs linux-image-cloud-amd64)", err)
	}
	if exe, err := os.Executable(); err == nil && checkStatic(exe) != nil {
		// Only a cgo build (the race detector's) links dynamically; the
		// plain test run, like the shipped binary, is static and boots.
		t.Skip("this test binary is dynamically linked (a -race build), so it cannot be the guest's init")
	}
	b := Boot(t.Context(), Options{Accel: "tcg", Timeout: 90 * time.Second})
	t.Logf("%+v", b)
	if !b.OK {
		t.Fatalf("TCG boot failed: %s", b.Reason)
	}
}
