package acp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/internal/agent"
)

// TestHomeWritesStayInTheHome: a sandboxed session's home holds what the
// sandbox wrote back, symbolic links included; the daemon's own writes
// into it (an agent's settings, at every start of the session) must never
// follow one out of the home.
func TestHomeWritesStayInTheHome(t *testing.T) {
	home, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(home, ".gemini")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target.toml"), filepath.Join(home, "config.toml")); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(home, ".gemini/settings.json", map[string]any{"a": 1}); err == nil {
		t.Error("a write through a symlinked directory out of the home succeeded")
	}
	if err := writeIn(home, "config.toml", []byte("x")); err == nil {
		t.Error("a write through a symlink out of the home succeeded")
	}
	if err := mkdirIn(home, ".gemini/sub"); err == nil {
		t.Error("a mkdir through a symlink out of the home succeeded")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the daemon wrote outside the home: %v", entries)
	}
	// Inside the home, writes work as before.
	if err := writeJSON(home, "new/settings.json", map[string]any{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(home, "new/settings.json")); err != nil || len(b) == 0 {
		t.Errorf("settings.json: %q, %v", b, err)
	}
}

// TestSessionHomesAreTheAdaptersOwn: a sandboxed session's home is never
// at a path another local user can name in advance. One who made the
// directory first (or a symlink there) could swap a session's home for a
// link to anywhere: the daemon's writes into the home, and the commit of
// what the sandbox wrote there (as root), would follow it, and the user
// would read every session's home. Without a data dir each adapter keeps
// its homes in a directory of its own.
func TestSessionHomesAreTheAdaptersOwn(t *testing.T) {
	tmp, outside := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	const id = "ses_trap"
	bin := func(string) func() (string, string, error) {
		return func() (string, string, error) { return "/bin/true", "1.0", nil }
	}
	// Codex keeps its homes under /var/tmp, which no test may fill with
	// traps; its homes are made the same way.
	build := func() map[string]agent.Adapter {
		all := Agents(Config{Binary: bin})
		delete(all, NameCodex)
		mine, err := FromConfig(Custom{Name: "mine", Command: "/bin/true"}, "", Options{})
		if err != nil {
			t.Fatal(err)
		}
		all["mine"] = mine
		return all
	}
	for name := range build() {
		// The trap: the shared directory a home used to be made in,
		// pointing at a directory its maker reads.
		if err := os.Symlink(outside, filepath.Join(tmp, "agentbox-"+name+"-sessions")); err != nil {
			t.Fatal(err)
		}
	}
	first, second := build(), build()
	for name, a := range first {
		_, write := a.(agent.SandboxNeeder).SandboxPaths(agent.Config{SessionID: id})
		_, again := second[name].(agent.SandboxNeeder).SandboxPaths(agent.Config{SessionID: id})
		if len(write) != 1 || len(again) != 1 {
			t.Fatalf("%s: write paths %v and %v, want the session's home", name, write, again)
		}
		if write[0] == again[0] {
			t.Errorf("%s: two adapters give session %s the same home %s: a path known in advance", name, id, write[0])
		}
		if real, err := filepath.EvalSymlinks(write[0]); err != nil || real != write[0] {
			t.Errorf("%s: the session's home %s leads to %s (%v)", name, write[0], real, err)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("a session's home was made in a directory another user controls: %v", entries)
	}
}

// TestRemoveStateLeavesNoHome: purging a session removes its home whatever
// the agent left in it (a symlink where the adapter writes its settings),
// and removing the state of a session that has none makes nothing.
func TestRemoveStateLeavesNoHome(t *testing.T) {
	data, outside := t.TempDir(), t.TempDir()
	a := Gemini(Config{DataDir: data, Binary: func(string) func() (string, string, error) {
		return func() (string, string, error) { return "/bin/true", "1.0", nil }
	}})
	_, write := a.(agent.SandboxNeeder).SandboxPaths(agent.Config{SessionID: "ses_a"})
	if len(write) != 1 {
		t.Fatalf("write paths %v", write)
	}
	home := write[0]
	if err := os.RemoveAll(filepath.Join(home, ".gemini")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(home, ".gemini")); err != nil {
		t.Fatal(err)
	}
	if err := a.(agent.SandboxNeeder).RemoveState("ses_a"); err != nil {
		t.Errorf("RemoveState: %v", err)
	}
	if _, err := os.Lstat(home); !os.IsNotExist(err) {
		t.Errorf("the home %s is still there after RemoveState (%v)", home, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("RemoveState wrote through the agent's symlink: %v", entries)
	}
	if err := a.(agent.SandboxNeeder).RemoveState("ses_none"); err != nil {
		t.Errorf("RemoveState of a session without a home: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(home), "ses_none")); !os.IsNotExist(err) {
		t.Errorf("RemoveState made a home (%v)", err)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "../x", "/"} {
		if err := a.(agent.SandboxNeeder).RemoveState(bad); err == nil {
			t.Errorf("RemoveState(%q) was accepted", bad)
		}
	}
}
