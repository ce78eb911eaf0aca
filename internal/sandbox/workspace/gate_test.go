//go:build unix

package workspace

import (
	"os"
	"path/filepath"
	"testing"
)

// TestGate: a change from outside the sandbox is judged by the commit's
// own rules: protected patterns (folded), anything named .git, and the
// paths the host's git configuration runs; hidden paths pass (the API's
// caller is the reviewer).
func TestGate(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "[core]\n\thooksPath = tools/hooks\n"
	if err := os.WriteFile(filepath.Join(ws, ".git", "config"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, ".git", "HEAD"), []byte("ref: refs/heads/main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := Options{Protected: []string{"**/CLAUDE.md"}, gitEnv: &gitEnv{noSystem: true, passwd: os.DevNull}}
	g, err := NewGate(t.Context(), ws, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		rel   string
		isDir bool
		ok    bool
	}{
		{"src/a.go", false, true},
		{".env", false, true},
		{".github/workflows/ci.yml", false, true},
		{"CLAUDE.md", false, false},
		{"docs/claude.MD", false, false},
		{"docs/CLAUDE.md/x", false, false},
		{".git", true, false},
		{".git/config", false, false},
		{"sub/.git/hooks/pre-commit", false, false},
		{"tools/hooks/pre-commit", false, false},
		{"tools/hooks", true, false},
		{"tools/other", false, true},
	} {
		rule, ok := g.Check(tc.rel, tc.isDir)
		if ok != tc.ok {
			t.Errorf("Check(%q) = %q, %v; want ok %v", tc.rel, rule, ok, tc.ok)
		}
		if !ok && rule == "" {
			t.Errorf("Check(%q): refused without a rule", tc.rel)
		}
	}
}
