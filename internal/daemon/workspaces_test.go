package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// TestWorkspaceRules checks what may be a workspace root and a session's
// cwd: homes come from the passwd file, symlinks are resolved, and the
// data dir is never a workspace but for its own workspaces.
func TestWorkspaceRules(t *testing.T) {
	base := t.TempDir()
	mk := func(p string) string {
		t.Helper()
		d := filepath.Join(base, p)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	data := mk("data")
	srv, gitHome, proj := mk("srv"), mk("srv/git"), mk("ws/proj")
	mk("ws/proj/.git/hooks")
	if err := os.Symlink(gitHome, filepath.Join(base, "ws/to-home")); err != nil {
		t.Fatal(err)
	}
	passwd := filepath.Join(base, "passwd")
	if err := os.WriteFile(passwd, []byte("git:x:998:998::"+gitHome+":/usr/bin/git-shell\nbad line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := newWorkspaceRules(data)
	if err != nil {
		t.Fatal(err)
	}
	w.passwd = passwd
	for _, tc := range []struct {
		root, why string
	}{
		{filepath.Join(base, "ws"), ""},
		{filepath.Join(data, "workspaces"), ""},
		{srv, "holds the home directory"},
		{gitHome, "is a home directory"},
		{data, "inside agentbox's data directory"},
		{base, "holds agentbox's data directory"},
		{"/usr/local/src", "system path (/usr)"},
		{"/libx32/anything", "system path"},
		{"/var/tmp", "system path (/var)"},
		{"/home", "shared by the whole host"},
	} {
		err := w.checkRoots([]string{tc.root})
		if tc.why == "" && err != nil || tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)) {
			t.Errorf("root %s: %v, want %q", tc.root, err, tc.why)
		}
	}
	global := &policy.Policy{Version: 1, Filesystem: policy.Filesystem{WorkspaceRoots: []string{filepath.Join(base, "ws")}}}
	for _, tc := range []struct {
		cwd, want, why string
	}{
		{proj, proj, ""},
		{filepath.Join(base, "ws/proj/../proj"), proj, ""},
		{filepath.Join(base, "ws/proj/.git/hooks"), "", "hidden directory"},
		{filepath.Join(base, "ws/to-home"), "", "is a home directory"},
		{filepath.Join(data, "workspaces"), "", "every session's workspace"},
		{base + "/nowhere", "", "no such file"},
	} {
		got, err := w.check(global, tc.cwd)
		if tc.why == "" && (err != nil || got != tc.want) || tc.why != "" && (err == nil || !strings.Contains(err.Error(), tc.why)) {
			t.Errorf("cwd %s: %q, %v; want %q or an error with %q", tc.cwd, got, err, tc.want, tc.why)
		}
	}
	// Without roots in the global policy, the data dir's workspaces are the
	// root, but never a cwd themselves.
	own := filepath.Join(data, "workspaces")
	ses := filepath.Join(own, "ses_1")
	if err := os.Mkdir(ses, 0o700); err != nil {
		t.Fatal(err)
	}
	if got, err := w.check(&policy.Policy{Version: 1}, ses); err != nil || got != ses {
		t.Errorf("cwd %s under the default root: %q, %v", ses, got, err)
	}
	if _, err := w.check(nil, own); err == nil || !strings.Contains(err.Error(), "every session's workspace") {
		t.Errorf("cwd %s: %v, want it refused", own, err)
	}
	if _, err := w.check(nil, proj); err == nil || !strings.Contains(err.Error(), "not inside a workspace root") {
		t.Errorf("cwd %s under the default root: %v, want it refused", proj, err)
	}
}
