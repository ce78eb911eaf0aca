package policy

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

func TestBuiltinProtectedNamesWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range BuiltinProtectedNames() {
		if err := workspace.ValidatePattern(n.Pattern); err != nil {
			t.Errorf("%q: %v", n.Pattern, err)
		}
		if !strings.HasPrefix(n.Pattern, "**/") {
			t.Errorf("%q does not start with **/: a nested project is as dangerous", n.Pattern)
		}
		if n.Tool == "" || n.Why == "" {
			t.Errorf("%q: say which tool reads it and why it is dangerous", n.Pattern)
		}
		if seen[n.Pattern] {
			t.Errorf("%q listed twice", n.Pattern)
		}
		seen[n.Pattern] = true
	}
}

// probePaths returns workspace paths the pattern protects, at the top and
// nested, each spelled as written, in upper case, with an invisible code
// point, with a fullwidth letter, and with a trailing dot: a host that
// folds case or normalises names takes them for the same file.
func probePaths(pattern string) []string {
	body := strings.TrimPrefix(pattern, "**/")
	dir := strings.HasSuffix(body, "/**")
	body = strings.TrimSuffix(body, "/**")
	body = strings.ReplaceAll(body, "**", "m")
	body = strings.ReplaceAll(body, "*", "x")
	segs := strings.Split(body, "/")
	last := len(segs) - 1
	spell := func(f func(string) string) string {
		s := append([]string(nil), segs...)
		s[last] = f(s[last])
		p := strings.Join(s, "/")
		if dir {
			p += "/probe"
		}
		return p
	}
	variants := []string{
		spell(func(s string) string { return s }),
		strings.ToUpper(spell(func(s string) string { return s })),
		spell(func(s string) string { // a zero-width space after the first rune
			_, n := utf8.DecodeRuneInString(s)
			return s[:n] + "\u200b" + s[n:]
		}),
		spell(func(s string) string { // the first ASCII letter fullwidth
			for i, r := range s {
				if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
					return s[:i] + string(r-'!'+'！') + s[i+1:]
				}
			}
			return s
		}),
		spell(func(s string) string { return s + "." }),
	}
	var out []string
	for _, v := range variants {
		out = append(out, v, "deep/er/"+v)
	}
	return out
}

// TestBuiltinProtectedNamesDropped commits a write to every name of the
// built-in list, in every spelling, and checks each is dropped and
// reported under its own rule.
func TestBuiltinProtectedNamesDropped(t *testing.T) {
	ws, upper := t.TempDir(), t.TempDir()
	// The host has the git directories the git patterns point into, so
	// the commit looks inside them rather than refusing a new .git.
	for _, d := range []string{".git", "deep/er/.git"} {
		if err := os.MkdirAll(filepath.Join(ws, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	type probe struct{ path, pattern string }
	var probes []probe
	for _, n := range BuiltinProtectedNames() {
		for _, p := range probePaths(n.Pattern) {
			full := filepath.Join(upper, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte("pwned\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			probes = append(probes, probe{p, n.Pattern})
		}
	}
	spec := sandbox.Spec{Protected: BuiltinProtected(), ReviewExempt: DefaultReviewExempt()}
	vs, err := workspace.Commit(t.Context(), upper, ws, workspace.OptionsFor(spec))
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range probes {
		ok := false
		for _, v := range vs {
			covers := v.Target == pr.path || strings.HasPrefix(pr.path, v.Target+"/")
			named := v.Rule == "protected:"+pr.pattern ||
				// A .git its host does not have is refused as a whole.
				(strings.Contains(pr.pattern, "/.git/") && strings.HasPrefix(v.Rule, "git:"))
			if covers && named {
				ok = true
				break
			}
		}
		if !ok {
			var near []string
			for _, v := range vs {
				if strings.HasPrefix(pr.path, v.Target) {
					near = append(near, v.Target+" "+v.Rule)
				}
			}
			t.Errorf("%s (pattern %s): no violation naming the pattern; nearest: %q", pr.path, pr.pattern, near)
		}
	}
	// Nothing but directories on the way reached the host.
	err = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(ws, p)
			t.Errorf("%s reached the host", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestProtectedNamesDocumented checks that docs/policy.md's table lists
// every built-in pattern.
func TestProtectedNamesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range BuiltinProtectedNames() {
		if !strings.Contains(string(doc), "| `"+n.Pattern+"` |") {
			t.Errorf("docs/policy.md has no table row for %q", n.Pattern)
		}
	}
	for _, p := range DefaultReviewExempt() {
		if !strings.Contains(string(doc), "`"+p+"`") {
			t.Errorf("docs/policy.md does not list the review exemption %q", p)
		}
	}
}
