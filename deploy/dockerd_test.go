package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// dockerdScript runs scripts/dockerd ARGS with its directory dir.
func dockerdScript(t *testing.T, dir string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command("../scripts/dockerd", args...)
	cmd.Env = append(os.Environ(), "AGENTBOX_DOCKERD_DIR="+dir)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestDockerdScript: scripts/dockerd starts a dockerd of its own beside
// any other (the one of DOCKER_HOST included), prints its DOCKER_HOST,
// reuses it when run again, answers status, stops it; a dockerd that
// cannot start fails the script with the log's tail.
func TestDockerdScript(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("dockerd needs root")
	}
	if _, err := exec.LookPath("dockerd"); err != nil {
		t.Skip("dockerd not installed (scripts/setup installs Debian's docker.io)")
	}
	dir := t.TempDir()
	t.Cleanup(func() { _, _, _ = dockerdScript(t, dir, "stop") })
	host, errOut, err := dockerdScript(t, dir)
	want := "unix://" + filepath.Join(dir, "docker.sock") + "\n"
	if err != nil || host != want {
		t.Fatalf("scripts/dockerd: %v, printed %q, want %q\n%s", err, host, want, errOut)
	}
	pid, err := os.ReadFile(filepath.Join(dir, "dockerd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	// Its own daemon: a docker client on its socket reaches it, and its
	// state is under dir.
	d := docker{t, strings.TrimSpace(host)}
	if root := strings.TrimSpace(d.run("info", "--format", "{{.DockerRootDir}}")); root != filepath.Join(dir, "data") {
		t.Errorf("its data root is %q, want %q", root, filepath.Join(dir, "data"))
	}
	// Again: the same daemon.
	if again, errOut, err := dockerdScript(t, dir); err != nil || again != want {
		t.Fatalf("scripts/dockerd again: %v %q\n%s", err, again, errOut)
	}
	if now, _ := os.ReadFile(filepath.Join(dir, "dockerd.pid")); string(now) != string(pid) {
		t.Errorf("run again, it started another dockerd (pid %s, was %s)", now, pid)
	}
	if out, _, err := dockerdScript(t, dir, "status"); err != nil || out != want {
		t.Errorf("scripts/dockerd status: %v %q", err, out)
	}
	if _, errOut, err := dockerdScript(t, dir, "stop"); err != nil {
		t.Fatalf("scripts/dockerd stop: %v\n%s", err, errOut)
	}
	if _, err := os.Stat("/proc/" + strings.TrimSpace(string(pid))); err == nil {
		t.Errorf("dockerd (pid %s) still runs after stop", pid)
	}
	if _, _, err := dockerdScript(t, dir, "status"); err == nil {
		t.Error("scripts/dockerd status after stop: exit 0")
	}

	// A dockerd that cannot start: the script fails, showing why.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "daemon.json"), []byte(`{"no-such-option": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = dockerdScript(t, bad, "stop") })
	out, errOut, err := dockerdScript(t, bad)
	if err == nil || out != "" || !strings.Contains(errOut, "no-such-option") {
		t.Errorf("scripts/dockerd with a broken configuration: %v, printed %q\n%s", err, out, errOut)
	}
}
