package agentbox_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
)

// TestCwdBoundByWorkspaceRoots checks that a session's working directory
// never widens what the operator's global policy allows: the built-in
// global policy refuses filesystem.write of a host directory, so "cwd" may
// not make it writable either; a system path, a home or a directory
// holding homes is never a workspace, with or without a sandbox.
func TestCwdBoundByWorkspaceRoots(t *testing.T) {
	srv := start(t, agentbox.Options{}) // the built-in global policy
	c := srv.Client()
	dir := t.TempDir()

	_, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock",
		Policy: json.RawMessage(`{"version":1,"filesystem":{"write":["` + dir + `"]}}`)})
	if !client.HasProblemType(err, client.ProblemPolicy) {
		t.Fatalf("filesystem.write %s: %v, want a policy problem", dir, err)
	}
	home, _ := os.UserHomeDir()
	cases := []struct{ name, cwd, policy string }{
		{"a host dir the global policy does not make writable, sandboxed", dir, `"agent-default"`},
		{"a host dir outside the workspace roots, unsandboxed", dir, ""},
		{"a cron directory", existing(t, "/etc/cron.d", "/etc"), `"agent-default"`},
		{"a cron directory, unsandboxed", existing(t, "/etc/cron.d", "/etc"), ""},
		{"the root", "/", ""},
		{"a system directory", "/usr/local", ""},
		{"root's home", "/root", ""},
		{"the daemon's home", home, ""},
		{"the directory of homes", "/home", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := client.CreateSession{Agent: "mock", Cwd: tc.cwd}
			if tc.policy != "" {
				cs.Policy = json.RawMessage(tc.policy)
			}
			s, err := c.CreateSession(t.Context(), cs)
			if err == nil {
				t.Fatalf("session %s created with cwd %s; want it refused", s.ID, tc.cwd)
			}
			if !client.HasProblemType(err, client.ProblemPolicy) || !strings.Contains(err.Error(), "cwd") {
				t.Fatalf("cwd %s: %v, want a policy problem naming the cwd", tc.cwd, err)
			}
		})
	}
	// A session without a cwd gets its own workspace under the data dir.
	if _, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock"}); err != nil {
		t.Fatal(err)
	}
}

// TestWorkspaceRootsPolicy checks a global policy's workspace_roots: a cwd
// inside a root is accepted, one that leaves it through a symlink, lies in
// a hidden directory or is outside is refused; and a daemon refuses to
// start with a root that is a system path or holds a home.
func TestWorkspaceRootsPolicy(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"proj/sub", "proj/.git", "other"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(root, "etc-link")); err != nil {
		t.Fatal(err)
	}
	srv := start(t, agentbox.Options{GlobalPolicy: globalPolicy(t, root)})
	c := srv.Client()
	for _, ok := range []string{filepath.Join(root, "proj"), filepath.Join(root, "proj/sub"), root} {
		if _, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: ok}); err != nil {
			t.Errorf("cwd %s inside the root: %v", ok, err)
		}
	}
	for _, bad := range []string{filepath.Join(root, "etc-link"), filepath.Join(root, "proj/.git"), t.TempDir()} {
		if _, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Cwd: bad}); !client.HasProblemType(err, client.ProblemPolicy) {
			t.Errorf("cwd %s: %v, want a policy problem", bad, err)
		}
	}

	home, _ := os.UserHomeDir()
	for _, r := range []string{"/", "/etc", "/usr/lib", "/home", "/root", home, "/var"} {
		_, err := agentbox.Start(t.Context(), agentbox.Options{DataDir: t.TempDir(), GlobalPolicy: globalPolicy(t, r)})
		if err == nil || !strings.Contains(err.Error(), "workspace_roots") {
			t.Errorf("a daemon with workspace root %s: %v, want it refused naming workspace_roots", r, err)
		}
	}
}

// globalPolicy writes the built-in global policy with workspace roots and
// returns its path.
func globalPolicy(t *testing.T, roots ...string) string {
	t.Helper()
	rs, _ := json.Marshal(roots)
	doc := `version: 1
isolation: process
resources: {memory: 8Gi, cpus: 4, pids: 4096, timeout: 24h, disk: 20Gi, output: 64Mi}
filesystem:
  read_outside_workspace: true
  workspace_roots: ` + string(rs) + `
network: {default: ask, mode: proxy, allow: ["*"]}
env: {pass: [TERM, COLORTERM, LANG, LC_ALL, TZ]}
`
	p := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// existing returns the first path that exists.
func existing(t *testing.T, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("none of %v exists", paths)
	return ""
}
