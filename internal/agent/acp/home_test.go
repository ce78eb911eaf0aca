package acp

import (
	"os"
	"path/filepath"
	"testing"
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
