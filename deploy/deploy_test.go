package deploy

import (
	"bufio"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// releaseTargets are the GOOS/GOARCH pairs scripts/release builds: the
// daemon for Linux, the client elsewhere.
var releaseTargets = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}

// testVersion is the version scripts/release stamps into the test release.
const testVersion = "v0.0.0-deploytest"

// The release directory of the tests, made once by scripts/release itself.
var (
	tmpDir     string
	releaseMu  sync.Mutex
	releaseDir string
	releaseErr error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentbox-release-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmpDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// release runs scripts/release (every target, as `make release` does) into
// a directory of the test run, once for the whole run, and returns it.
func release(t *testing.T) string {
	t.Helper()
	releaseMu.Lock()
	defer releaseMu.Unlock()
	if releaseDir == "" && releaseErr == nil {
		dist := filepath.Join(tmpDir, "dist")
		cmd := exec.Command("../scripts/release")
		cmd.Env = append(os.Environ(), "DIST="+dist, "VERSION="+testVersion)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			releaseErr = fmt.Errorf("scripts/release: %w\n%s", err, out)
		} else {
			releaseDir = dist
			t.Logf("scripts/release: %v", time.Since(start).Round(time.Millisecond))
		}
	}
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseDir
}

// nativeDaemon is the release's Linux daemon for this machine.
func nativeDaemon(t *testing.T) string {
	t.Helper()
	return filepath.Join(release(t), "agentbox-linux-"+runtime.GOARCH)
}

// TestReleaseTargetsBuild: scripts/release builds every target (the Linux
// daemon, and the client for macOS and Windows, whose Linux-only parts —
// serve, doctor, the sandboxes — are build-tagged out), each an executable
// of its system and architecture, lists each in SHA256SUMS with its sum, and
// copies the deploy files and the image's rootfs/ beside them.
func TestReleaseTargetsBuild(t *testing.T) {
	script, err := os.ReadFile("../scripts/release")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^targets=\(([^)]*)\)`).FindSubmatch(script)
	if m == nil || !slices.Equal(strings.Fields(string(m[1])), releaseTargets) {
		t.Fatalf("scripts/release builds %q, this test %q", m, releaseTargets)
	}
	dist := release(t)
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for line := range strings.Lines(string(sums)) {
		if sum, name, ok := strings.Cut(strings.TrimSpace(line), "  "); ok {
			listed[name] = sum
		}
	}
	for _, target := range releaseTargets {
		t.Run(strings.ReplaceAll(target, "/", "-"), func(t *testing.T) {
			goos, goarch, _ := strings.Cut(target, "/")
			name := "agentbox-" + goos + "-" + goarch
			if goos == "windows" {
				name += ".exe"
			}
			p := filepath.Join(dist, name)
			if got := executableKind(t, p); got != target {
				t.Errorf("%s is an executable for %q, want %q", name, got, target)
			}
			if listed[name] != sha256File(t, p) {
				t.Errorf("SHA256SUMS lists %s as %q, its sum is %s", name, listed[name], sha256File(t, p))
			}
		})
	}
	for _, f := range []string{"install.sh", "agentbox.service", "Containerfile", "rootfs/etc/ssl/certs/ca-certificates.crt"} {
		if fi, err := os.Stat(filepath.Join(dist, f)); err != nil || fi.Size() == 0 {
			t.Errorf("release: %s missing or empty (%v)", f, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dist, "rootfs/tmp")); err != nil || fi.Mode()&(os.ModeDir|os.ModePerm|os.ModeSticky) != os.ModeDir|os.ModeSticky|0o777 {
		t.Errorf("release: rootfs/tmp: %v %v, want a directory of mode 1777", fi.Mode(), err)
	}
}

// executableKind is the GOOS/GOARCH an executable file is for, from its
// header (ELF, Mach-O or PE).
func executableKind(t *testing.T, p string) string {
	t.Helper()
	if f, err := elf.Open(p); err == nil {
		defer f.Close()
		return "linux/" + map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
	}
	if f, err := macho.Open(p); err == nil {
		defer f.Close()
		return "darwin/" + map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
	}
	if f, err := pe.Open(p); err == nil {
		defer f.Close()
		return "windows/" + map[uint16]string{pe.IMAGE_FILE_MACHINE_AMD64: "amd64", pe.IMAGE_FILE_MACHINE_ARM64: "arm64"}[f.Machine]
	}
	t.Fatalf("%s: not an ELF, Mach-O or PE executable", p)
	return ""
}

// unitOptions reads a systemd unit: section.key → values.
func unitOptions(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	opts := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %s", path, n, line)
			}
			opts[section+"."+k] = append(opts[section+"."+k], v)
		}
	}
	return opts
}

// keptCaps are capabilities the daemon, a sandbox's init, runsc or an
// agent run unsandboxed use: the unit's bounding set must keep them.
var keptCaps = []string{"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_KILL",
	"CAP_SYS_PTRACE", "CAP_SYS_CHROOT", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_NET_BIND_SERVICE", "CAP_CHOWN",
	"CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_MKNOD", "CAP_SYS_RESOURCE",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_NICE", "CAP_AUDIT_WRITE"}

// exposureCeiling is `systemd-analyze security`'s overall exposure of the
// unit as it is (8.4 before its capability deny list, PrivateMounts and
// PrivateIPC): a change that loosens it fails here.
const exposureCeiling = 7.7

// droppedCaps is the unit's CapabilityBoundingSet deny list.
func droppedCaps(t *testing.T, opts map[string][]string) []string {
	t.Helper()
	var caps []string
	for _, v := range opts["Service.CapabilityBoundingSet"] {
		list, ok := strings.CutPrefix(v, "~")
		if !ok {
			// An allowlist takes every capability it does not name,
			// also those a future sandbox mechanism needs.
			t.Fatalf("CapabilityBoundingSet=%s: only a deny list (~CAP_...) of unused capabilities", v)
		}
		caps = append(caps, strings.Fields(list)...)
	}
	return caps
}

// TestSystemdUnit: the unit runs `agentbox serve --config`, hardened only
// with options that leave sandbox creation working (none of those that
// take namespaces, cgroups, sethostname, /dev/kvm, the agents' home or the
// owner records; capabilities dropped only by a deny list that keeps every
// one sandboxes use), passes `systemd-analyze verify`, and its
// `systemd-analyze security` exposure is no worse than exposureCeiling.
// systemd-analyze needs no running systemd; starting the unit does, and
// the tests have no systemd as PID 1: TestUnitConfinement runs the daemon
// under the parts of the unit that can be reproduced without it.
func TestSystemdUnit(t *testing.T) {
	opts := unitOptions(t, "agentbox.service")
	want := map[string]string{
		"Service.ExecStart":       "/usr/local/bin/agentbox serve --config /etc/agentbox/agentbox.yaml",
		"Service.NoNewPrivileges": "yes",
		"Service.ProtectSystem":   "full",
		"Service.PrivateTmp":      "yes",
		"Service.PrivateMounts":   "yes",
		"Service.PrivateIPC":      "yes",
		"Service.KillMode":        "mixed",
		"Service.StateDirectory":  "agentbox",
		"Install.WantedBy":        "multi-user.target",
	}
	for k, v := range want {
		if got := opts[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	for _, k := range []string{"RestrictNamespaces", "ProtectControlGroups", "ProtectKernelTunables", "ProtectHostname",
		"ProtectHome", "PrivateDevices", "ProtectProc", "ProcSubset", "ProtectClock", "AmbientCapabilities",
		"SystemCallFilter", "RestrictAddressFamilies", "SystemCallArchitectures", "MemoryDenyWriteExecute",
		"RestrictSUIDSGID", "RuntimeDirectory", "DynamicUser", "User", "PrivateUsers", "PrivateNetwork", "DevicePolicy", "DeviceAllow"} {
		if v, ok := opts["Service."+k]; ok {
			t.Errorf("Service.%s=%q breaks sandbox creation (see the unit's comment)", k, v)
		}
	}
	dropped := droppedCaps(t, opts)
	if len(dropped) == 0 {
		t.Error("the unit drops no capability")
	}
	for _, c := range dropped {
		if slices.Contains(keptCaps, c) {
			t.Errorf("CapabilityBoundingSet drops %s, which sandboxes need", c)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd; scripts/setup installs it): the unit was checked by this test's parser only")
	}
	// verify wants ExecStart's binary to exist: the release's daemon stands in.
	dir := t.TempDir()
	bin := nativeDaemon(t)
	unit, err := os.ReadFile("agentbox.service")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "agentbox.service")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/agentbox", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", p).CombinedOutput()
	// verify exits 0 on unknown keys, with a warning naming the file.
	if err != nil || strings.Contains(string(out), p) {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	// security on the file (--offline, systemd 250 and later).
	out, err = exec.Command(analyze, "security", "--offline=yes", "--no-pager", p).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security --offline=yes: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for agentbox.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security: no overall exposure level in\n%s", out)
	}
	exposure, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: overall exposure %.1f (ceiling %.1f)", exposure, exposureCeiling)
	if exposure > exposureCeiling {
		t.Errorf("systemd-analyze security: exposure %.1f, above %.1f:\n%s", exposure, exposureCeiling, out)
	}
}

func sha256File(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestInstallScript: install.sh parses (bash -n); from a release
// directory it installs the binary for this machine, the unit, the data
// directory (0700) and a configuration (0600) under --destdir; run again it
// changes nothing and keeps an edited configuration; a binary whose sha256
// does not match, or that has none, is refused and not installed.
func TestInstallScript(t *testing.T) {
	if out, err := exec.Command("bash", "-n", "install.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n install.sh: %v\n%s", err, out)
	}
	if runtime.GOOS != "linux" {
		t.Skip("install.sh installs the Linux daemon")
	}
	// A release directory as scripts/release makes it.
	rel := release(t)
	bin := nativeDaemon(t)
	sum := sha256File(t, bin)
	run := func(args ...string) (string, error) {
		cmd := exec.Command("bash", append([]string{filepath.Join(rel, "install.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "PATH=/usr/bin:/bin:/usr/sbin:/sbin")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	dest := t.TempDir()
	if out, err := run("--destdir", dest, rel); err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	for p, mode := range map[string]os.FileMode{
		"usr/local/bin/agentbox":              0o755,
		"etc/systemd/system/agentbox.service": 0o644,
		"etc/agentbox/agentbox.yaml":          0o600,
		"var/lib/agentbox":                    0o700 | os.ModeDir,
	} {
		fi, err := os.Stat(filepath.Join(dest, p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModeDir|os.ModePerm) != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
		}
	}
	if got := sha256File(t, filepath.Join(dest, "usr/local/bin/agentbox")); got != sum {
		t.Fatalf("installed binary sha256 %s, want %s", got, sum)
	}
	// The installed binary runs, and is the release's build.
	if out, err := exec.Command(filepath.Join(dest, "usr/local/bin/agentbox"), "version", "--url", "unix:///nonexistent").CombinedOutput(); err != nil || !strings.Contains(string(out), "agentbox "+testVersion) {
		t.Errorf("installed agentbox version: %v\n%s", err, out)
	}
	// systemd finds the unit where it was staged: by name, under the root.
	if analyze, err := exec.LookPath("systemd-analyze"); err == nil {
		out, err := exec.Command(analyze, "security", "--offline=yes", "--no-pager", "--root="+dest, "agentbox.service").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Overall exposure level for agentbox.service") {
			t.Errorf("systemd-analyze security --root=DESTDIR agentbox.service: %v\n%s", err, out)
		}
	}
	// The configuration it writes is one serve takes.
	conf := filepath.Join(dest, "etc/agentbox/agentbox.yaml")
	if out, err := exec.Command(bin, "serve", "--config", conf, "--log-level", "nonsense").CombinedOutput(); err == nil || !strings.Contains(string(out), "--log-level") {
		t.Fatalf("serve --config on the written configuration: %v\n%s", err, out)
	}

	// Again: nothing changes, an edited configuration is kept.
	if err := os.WriteFile(conf, []byte("listen: 127.0.0.1:7000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run("--destdir", dest, rel)
	if err != nil || !strings.Contains(out, "up to date") || strings.Contains(out, "wrote") {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(conf); string(b) != "listen: 127.0.0.1:7000\n" {
		t.Fatalf("the configuration was overwritten: %q", b)
	}

	// A binary given with its sum installs; a wrong sum, or none, is refused.
	dest2 := t.TempDir()
	if out, err := run("--destdir", dest2, "--sha256", sum, bin); err != nil {
		t.Fatalf("install.sh BINARY --sha256: %v\n%s", err, out)
	}
	bad := strings.Repeat("0", 64)
	for _, args := range [][]string{{"--sha256", bad, bin}, {"--sha256", "nothex", bin}} {
		dest3 := t.TempDir()
		out, err := run(append([]string{"--destdir", dest3}, args...)...)
		if err == nil {
			t.Errorf("install.sh %q: installed:\n%s", args, out)
		}
		if _, err := os.Stat(filepath.Join(dest3, "usr/local/bin/agentbox")); err == nil {
			t.Errorf("install.sh %q: the binary is in place", args)
		}
	}
	lone := filepath.Join(t.TempDir(), "agentbox")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(lone, b, 0o755) != nil {
		t.Fatal(err)
	}
	if out, err := run("--destdir", t.TempDir(), lone); err == nil || !strings.Contains(out, "checksum") {
		t.Errorf("install.sh of a binary without a sum: %v\n%s", err, out)
	}
}

// TestContainerfile: the image is FROM scratch with the Linux binary of a
// release directory, which scripts/release fills with what it copies.
func TestContainerfile(t *testing.T) {
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	var from []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "FROM" {
			from = append(from, f[1])
		}
	}
	if !slices.Equal(from, []string{"scratch"}) {
		t.Errorf("FROM %q, want scratch only", from)
	}
	if !strings.Contains(string(b), "agentbox-linux-${TARGETARCH} /agentbox") {
		t.Error("the image does not copy the release's agentbox-linux-${TARGETARCH}")
	}
	script, err := os.ReadFile("../scripts/release")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "cp deploy/install.sh deploy/agentbox.service deploy/Containerfile") {
		t.Error("scripts/release does not copy the deploy files into the release")
	}
}
