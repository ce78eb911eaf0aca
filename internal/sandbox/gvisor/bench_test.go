package gvisor

import (
	"os/exec"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// The benchmarks run `true`, so a bench script can print ratios against
// the process runtime's benchmarks (go test -bench . -benchtime 20x).

// BenchmarkColdTrue: a fresh gVisor sandbox per run (bundle, cgroup,
// overlay, `runsc run --detach`), `runsc exec true`, and Close.
func BenchmarkColdTrue(b *testing.B) {
	rt := needRunsc(b)
	spec := baseSpec(b)
	for b.Loop() {
		sb, err := rt.Create(b.Context(), spec)
		if err != nil {
			b.Fatal(err)
		}
		runTrue(b, sb)
		if _, err := sb.Close(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWarmExecTrue: `runsc exec true` in a warm container.
func BenchmarkWarmExecTrue(b *testing.B) {
	rt := needRunsc(b)
	sb, err := rt.Create(b.Context(), baseSpec(b))
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(b.Context())
	for b.Loop() {
		runTrue(b, sb)
	}
}

func runTrue(b *testing.B, sb sandbox.Sandbox) {
	p, err := sb.Start(b.Context(), sandbox.Cmd{Args: []string{"true"}})
	if err != nil {
		b.Fatal(err)
	}
	if e, err := p.Wait(); err != nil || e.Code != 0 {
		b.Fatalf("true: %+v, %v", e, err)
	}
}

// BenchmarkBwrap: bubblewrap with every namespace and a minimal read-only
// root, the usual unprivileged-sandbox baseline.
func BenchmarkBwrap(b *testing.B) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skip("bwrap is not installed (Debian package bubblewrap)")
	}
	args := []string{"--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv",
		"--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
		"--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", b.TempDir(), "/workspace", "--chdir", "/workspace", "/usr/bin/true"}
	for b.Loop() {
		if out, err := exec.Command(bwrap, args...).CombinedOutput(); err != nil {
			b.Fatalf("bwrap: %v: %s", err, out)
		}
	}
}

// BenchmarkRunscDo: plain `runsc --network=none do true`, the cost of
// gVisor itself without agentbox's bundle, overlay and cgroup.
func BenchmarkRunscDo(b *testing.B) {
	runsc, err := exec.LookPath("runsc")
	if err != nil {
		b.Skip("runsc is not installed (Debian package runsc)")
	}
	root := b.TempDir()
	for b.Loop() {
		cmd := exec.Command(runsc, "--root", root, "--network=none", "--platform=ptrace", "do", "true")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("runsc do: %v: %s", err, out)
		}
	}
}
