package deploy

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// releaseTargets are the GOOS/GOARCH pairs scripts/release builds: the
// daemon for Linux, the client elsewhere.
var releaseTargets = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64", "windows/amd64"}

// binDir holds the binaries built for the tests, once each.
var (
	binDir   string
	binMu    sync.Mutex
	binBuilt = map[string]string{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentbox-release-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// built is buildTarget into binDir, once per target for the whole run.
func built(t *testing.T, target string) string {
	t.Helper()
	binMu.Lock()
	defer binMu.Unlock()
	if p, ok := binBuilt[target]; ok {
		return p
	}
	p := buildTarget(t, target, binDir)
	binBuilt[target] = p
	return p
}

// buildTarget cross-compiles ./cmd/agentbox for target into dir, as
// scripts/release does (static, same tags), and returns the binary's path.
func buildTarget(t *testing.T, target, dir string) string {
	t.Helper()
	goos, goarch, _ := strings.Cut(target, "/")
	out := filepath.Join(dir, "agentbox-"+goos+"-"+goarch)
	if goos == "windows" {
		out += ".exe"
	}
	tags, err := exec.Command("../scripts/build", "--print-tags").Output()
	if err != nil {
		t.Fatalf("scripts/build --print-tags: %v", err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-tags", strings.TrimSpace(string(tags)), "-o", out, "./cmd/agentbox")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build for %s: %v\n%s", target, err, b)
	}
	return out
}

// TestReleaseTargetsBuild: every release target compiles: the Linux
// daemon, and the client for macOS and Windows, whose Linux-only parts
// (serve, doctor, the sandboxes) are build-tagged out. scripts/release
// builds the same list.
func TestReleaseTargetsBuild(t *testing.T) {
	script, err := os.ReadFile("../scripts/release")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^targets=\(([^)]*)\)`).FindSubmatch(script)
	if m == nil || !slices.Equal(strings.Fields(string(m[1])), releaseTargets) {
		t.Fatalf("scripts/release builds %q, this test %q", m, releaseTargets)
	}
	for _, target := range releaseTargets {
		t.Run(strings.ReplaceAll(target, "/", "-"), func(t *testing.T) {
			built(t, target)
		})
	}
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

// TestSystemdUnit: the unit runs `agentbox serve --config`, hardened only
// with options that leave sandbox creation working (none of those that
// take namespaces, cgroups, sethostname, /dev/kvm, the agents' home or the
// owner records), and passes systemd-analyze verify where it is installed.
func TestSystemdUnit(t *testing.T) {
	opts := unitOptions(t, "agentbox.service")
	want := map[string]string{
		"Service.ExecStart":       "/usr/local/bin/agentbox serve --config /etc/agentbox/agentbox.yaml",
		"Service.NoNewPrivileges": "yes",
		"Service.ProtectSystem":   "full",
		"Service.PrivateTmp":      "yes",
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
		"ProtectHome", "PrivateDevices", "ProtectProc", "ProtectClock", "CapabilityBoundingSet", "AmbientCapabilities",
		"SystemCallFilter", "RestrictAddressFamilies", "SystemCallArchitectures", "MemoryDenyWriteExecute",
		"RestrictSUIDSGID", "RuntimeDirectory", "DynamicUser", "User", "PrivateUsers", "PrivateNetwork", "DevicePolicy", "DeviceAllow"} {
		if v, ok := opts["Service."+k]; ok {
			t.Errorf("Service.%s=%q breaks sandbox creation (see the unit's comment)", k, v)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the unit was checked by this test's parser only")
		return
	}
	// verify wants ExecStart's binary to exist: a built daemon stands in.
	dir := t.TempDir()
	bin := built(t, "linux/"+runtime.GOARCH)
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
	rel := t.TempDir()
	b, err := os.ReadFile(built(t, "linux/"+runtime.GOARCH))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(rel, "agentbox-linux-"+runtime.GOARCH)
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"install.sh", "agentbox.service"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rel, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256File(t, bin)
	if err := os.WriteFile(filepath.Join(rel, "SHA256SUMS"), []byte(sum+"  "+filepath.Base(bin)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
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
