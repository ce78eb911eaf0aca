package engine

import (
	"path/filepath"
	"strings"
	"testing"
)

// FuzzWorkspacePath: whatever path a client sends, workspacePath either
// refuses it or returns a local path whose join with the workspace stays
// inside it (symbolic links are os.Root's to refuse, at the read).
func FuzzWorkspacePath(f *testing.F) {
	for _, s := range []string{"a.txt", "../a", "/ws/a", "/ws/../etc/passwd", "/wsx/a", "a/../../b", "", ".", "/", "a\x00b", "//ws//a", "./a/./b/"} {
		f.Add(s)
	}
	const cwd = "/ws"
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := workspacePath(cwd, p)
		if err != nil {
			return
		}
		if !filepath.IsLocal(rel) {
			t.Fatalf("%q -> %q: not local", p, rel)
		}
		if j := filepath.Join(cwd, rel); j != cwd && !strings.HasPrefix(j, cwd+"/") {
			t.Fatalf("%q -> %q: joins to %q, outside %s", p, rel, j, cwd)
		}
	})
}
