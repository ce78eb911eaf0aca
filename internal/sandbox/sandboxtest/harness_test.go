package sandboxtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox/workspace"
	"github.com/google/go-cmp/cmp"
)

// These tests check the suite's own instruments, without any runtime: a
// broken observer would let every escape case pass.

func TestParseProbes(t *testing.T) {
	got, dups := parseProbes("noise\nR a ok\nR b EPERM\nR a EROFS\nR c no: 3 pids\nRx d ok\n")
	want := map[string]string{"a": "ok", "b": "EPERM", "c": "no: 3 pids"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("probes (-want +got):\n%s", diff)
	}
	if !slices.Equal(dups, []string{"a"}) {
		t.Errorf("dups = %v, want [a]", dups)
	}
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{"EPERM", "EPERM", true},
		{"EACCES|EROFS", "EROFS", true},
		{"EACCES|EROFS", "EPERM", false},
		{"ok", "", false},
		{"EROFS", "EROFS2", false},
	} {
		if got := matches(tc.want, tc.got); got != tc.ok {
			t.Errorf("matches(%q, %q) = %v, want %v", tc.want, tc.got, got, tc.ok)
		}
	}
}

func TestProtectedBy(t *testing.T) {
	for _, tc := range []struct {
		rel, pattern string
	}{
		{"CLAUDE.md", "**/CLAUDE.md"},
		{"sub/CLAUDE.md", "**/CLAUDE.md"},
		{"sub/CLAUDE.md.bak", ""},
		{".git/hooks/post-checkout", "**/.git/hooks/**"},
		{".git/hooks", "**/.git/hooks/**"},
		{".git/config", "**/.git/config"},
		{".git", ""},
		{".claude/settings.json", "**/.claude/**"},
		{".claude", "**/.claude/**"},
		{"pkg/.mcp.json", "**/.mcp.json"},
		{".git/hooks.old/pre-commit", ""},
		{"sub/.git/config", "**/.git/config"},
		{"README.md", ""},
		{"x.claude", ""},
	} {
		got, _ := protectedBy(tc.rel)
		if got != tc.pattern {
			t.Errorf("protectedBy(%q) = %q, want %q", tc.rel, got, tc.pattern)
		}
		// The runtime's copy-back must read the patterns the same way.
		wsPat, ok := workspace.Match(Protected, tc.rel)
		if !ok {
			wsPat = ""
		}
		if wsPat != tc.pattern {
			t.Errorf("workspace.Match(%q) = %q, the suite reads %q", tc.rel, wsPat, tc.pattern)
		}
	}
}

func TestSnapshotDiff(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("one"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "g"), []byte("gone"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "m"), []byte("mode"), 0o644))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "l")))
	before, err := snapshot(dir)
	must(err)
	if d := diff(before, before); len(d) != 0 {
		t.Fatalf("diff of a snapshot with itself: %v", d)
	}

	must(os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("two"), 0o644)) // same size, new content
	must(os.Remove(filepath.Join(dir, "g")))
	must(os.Chmod(filepath.Join(dir, "m"), 0o755))
	must(os.Remove(filepath.Join(dir, "l")))
	must(os.Symlink("/etc/shadow", filepath.Join(dir, "l")))
	must(os.WriteFile(filepath.Join(dir, "new"), nil, 0o644))
	after, err := snapshot(dir)
	must(err)
	var paths []string
	for _, c := range diff(before, after) {
		paths = append(paths, c.Path)
	}
	if want := []string{"a/b/f", "g", "l", "m", "new"}; !slices.Equal(paths, want) {
		t.Errorf("changed paths = %v, want %v", paths, want)
	}

	missing, err := snapshot(filepath.Join(dir, "nope"))
	if err != nil || len(missing) != 0 {
		t.Errorf("snapshot of a missing dir = %v, %v; want empty, nil", missing, err)
	}
}

func TestMarkerProcs(t *testing.T) {
	marker := "agentbox-escape-" + randHex(8)
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"AGENTBOX_ESCAPE_MARKER=" + marker}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if found := markerProcs(marker); len(found) != 1 || !strings.HasPrefix(found[0], fmt.Sprintf("%d:", pid)) {
		t.Errorf("markerProcs found %v, want the sleep process %d", found, pid)
	}
	if pidGone(pid, marker) {
		t.Errorf("pidGone(%d) = true for a running process", pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if left := waitNoMarkerProcs(marker, 5*time.Second); len(left) != 0 {
		t.Errorf("after kill, markerProcs still finds %v", left)
	}
	if !pidGone(pid, marker) {
		t.Errorf("pidGone(%d) = false after the process was reaped", pid)
	}

	// A marker in argv only is found too.
	cmd = exec.Command("/bin/sh", "-c", "sleep 30", marker)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// (sh may briefly have a forked child that has not exec'd yet.)
	if found := markerProcs(marker); len(found) == 0 || !strings.HasPrefix(found[0], fmt.Sprintf("%d:", cmd.Process.Pid)) {
		t.Errorf("markerProcs by argv found %v, want the sh process %d", found, cmd.Process.Pid)
	}
}

func TestValidate(t *testing.T) {
	cases := suite()
	if len(cases) < 30 {
		t.Errorf("suite has %d cases, want at least 30", len(cases))
	}
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"empty", Options{}, ""},
		{"good", Options{Expect: map[string]string{"13_bpf/bpf": "ENOSYS"}, Skip: map[string]string{"30_mptcp_blocked_on_host_network": "no host network"}}, ""},
		{"unknown case", Options{Expect: map[string]string{"99_nope/x": "EPERM"}}, `no case "99_nope"`},
		{"unknown probe", Options{Expect: map[string]string{"13_bpf/bfp": "EPERM"}}, `has no probe "bfp"`},
		{"no slash", Options{Expect: map[string]string{"13_bpf": "EPERM"}}, "no case"},
		{"empty expectation", Options{Expect: map[string]string{"13_bpf/bpf": " "}}, "empty expectation"},
		{"skip without reason", Options{Skip: map[string]string{"13_bpf": ""}}, "a reason is required"},
		{"skip unknown", Options{Skip: map[string]string{"13_bfp": "x"}}, "no such case"},
		{"only unknown", Options{Only: []string{"nope"}}, `no case "nope"`},
	} {
		err := validate(cases, tc.opts)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.wantErr)
		}
	}
}

// TestPreludeOnHost runs the probe prelude with python3 on the host, where
// nothing is filtered: it proves the helpers work and that the
// discriminating probes do succeed without a sandbox.
func TestPreludeOnHost(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed; the suite needs it inside sandboxes too")
	}
	code := prelude() + `
sc("clone3_unfiltered", "clone3", None, 0)
op("missing", read, "/nonexistent/agentbox")
op("ok_read", read, "/proc/self/status")
sc("keyctl", "keyctl", KEYCTL_GET_ID, KEY_SPEC_SESSION, 1)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
src = ctypes.create_string_buffer(b"secret!", 8)
dst = ctypes.create_string_buffer(8)
local = iovec(ctypes.cast(dst, ctypes.c_void_p), 8)
remote = iovec(ctypes.cast(src, ctypes.c_void_p), 8)
sc("vm_readv_self", "process_vm_readv", os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
R("vm_readv_data", dst.value.decode())
op("gai", socket.getaddrinfo, "agentbox-no-such-host.invalid", 80)
`
	out, err := exec.Command(py, "-I", "-S", "-c", code).CombinedOutput()
	if err != nil {
		t.Fatalf("prelude failed: %v\n%s", err, out)
	}
	got, _ := parseProbes(string(out))
	want := map[string]string{
		"clone3_unfiltered": "EINVAL", "missing": "ENOENT", "ok_read": "ok",
		"keyctl": "ok", "vm_readv_self": "ok", "vm_readv_data": "secret!", "gai": "gaierror",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("host probe results (-want +got):\n%s\n%s", diff, out)
	}
}

func TestGitRuleBy(t *testing.T) {
	for _, tc := range []struct {
		rel  string
		dir  bool
		rule bool
	}{
		{".git", true, true},
		{"sub/.git", false, true},
		{".GIT", true, true},
		{".git/HEAD", false, false},
		{".git/ORIG_HEAD", false, false},
		{".git/objects/ab/cd", false, false},
		{".git/objects/ab", true, false},
		{".git/refs/heads/main", false, false},
		{".git/logs/HEAD", false, false},
		{".git/index", false, false},
		{".git/COMMIT_EDITMSG", false, false},
		{".git/modules/lib/HEAD", false, false},
		{".git/modules/lib", true, false},
		{".git/config", false, true},
		{".git/hooks/pre-commit", false, true},
		{".git/hooks", true, true},
		{".git/commondir", false, true},
		{".git/info/exclude", false, true},
		{".git/objects/info/alternates", false, true},
		{".git/index.lock", false, true},
		{".git/modules/lib/config", false, true},
		{".git/rebase-merge/git-rebase-todo", false, true},
		{"README.md", false, false},
		{".github/x", false, false},
	} {
		if _, got := gitRuleBy(tc.rel, tc.dir); got != tc.rule {
			t.Errorf("gitRuleBy(%q, dir=%v) = %v, want %v", tc.rel, tc.dir, got, tc.rule)
		}
	}
}

func TestHiddenBy(t *testing.T) {
	for rel, want := range map[string]string{
		".env": ".env", "src/.eslintrc.js": ".eslintrc.js", ".config/x/y": ".config", "a/b": "", ".git/HEAD": "", "x/.git/y": "",
	} {
		got, ok := hiddenBy(rel)
		if got != want || ok != (want != "") {
			t.Errorf("hiddenBy(%q) = %q, %v; want %q", rel, got, ok, want)
		}
	}
}
