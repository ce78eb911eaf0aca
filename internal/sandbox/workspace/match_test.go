package workspace

import (
	"math/rand/v2"
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestMatch(t *testing.T) {
	protected := []string{
		"**/CLAUDE.md", ".claude/**", "**/.git/hooks/**", "**/.git/config",
		".cursorrules", "docs/*.secret", "build/", "a/**/z", "[Mm]akefile.lock",
	}
	tests := []struct {
		rel     string
		pattern string // "" = not protected
	}{
		{"CLAUDE.md", "**/CLAUDE.md"},
		{"claude.md", "**/CLAUDE.md"}, // case-insensitive
		{"sub/CLAUDE.md", "**/CLAUDE.md"},
		{"a/b/c/CLAUDE.md", "**/CLAUDE.md"},
		{"CLAUDE.md.bak", ""},
		{"xCLAUDE.md", ""},
		{".claude", ".claude/**"}, // the directory itself
		{".claude/settings.json", ".claude/**"},
		{".claude/a/b/c", ".claude/**"},
		{"sub/.claude/settings.json", ""}, // .claude/** is anchored
		{".claude-other", ""},
		{".git/hooks/post-checkout", "**/.git/hooks/**"},
		{".git/hooks", "**/.git/hooks/**"},
		{"vendor/x/.git/hooks/pre-commit", "**/.git/hooks/**"},
		{".git/config", "**/.git/config"},
		{".git/HEAD", ""},
		{".git", ""},
		{".cursorrules", ".cursorrules"},
		{"sub/.cursorrules", ""},
		{"docs/a.secret", "docs/*.secret"},
		{"docs/x/a.secret", ""},
		{"build", "build/"},
		{"build/out/bin", "build/"},
		{"a/z", "a/**/z"},
		{"a/b/c/z", "a/**/z"},
		{"a/b/c/z/y", ""},
		{"makefile.lock", "[Mm]akefile.lock"},
		{"./CLAUDE.md", "**/CLAUDE.md"},
		{"x/../CLAUDE.md", "**/CLAUDE.md"},
		{"../CLAUDE.md", OutsidePattern},
		{"..", OutsidePattern},
		{"/etc/passwd", OutsidePattern},
		{"src/main.go", ""},
		{".", ""},
		// Unicode and Windows spellings of the same names.
		{"ＣＬＡＵＤＥ.md", "**/CLAUDE.md"},
		{"sub/CLA\u200bUDE.md", "**/CLAUDE.md"},
		{"CLAUDE.md.", "**/CLAUDE.md"},
		{"CLAUDE.md ", "**/CLAUDE.md"},
		{".Ｃlaude/settings.json", ".claude/**"},
		{".\u200bclaude", ".claude/**"},
		{".GIT/HOOKS/pre-commit", "**/.git/hooks/**"},
		{"x/.g\u200dit/config", "**/.git/config"},
		{"x/\uff0egit/config", "**/.git/config"},
		{"MAKEFILE.LOCK", "[Mm]akefile.lock"},
		{"CLAUDE\u0301.md", ""}, // a visible accent is another name
	}
	for _, tt := range tests {
		pat, ok := Match(protected, tt.rel)
		if ok != (tt.pattern != "") || pat != tt.pattern {
			t.Errorf("Match(%q) = %q, %v; want %q", tt.rel, pat, ok, tt.pattern)
		}
	}
}

func TestValidatePattern(t *testing.T) {
	good := []string{"CLAUDE.md", "**/x", "a/**", "a/**/b", "dir/", "*.md", "[ab]c", "a/**/**/b"}
	for _, p := range good {
		if err := ValidatePattern(p); err != nil {
			t.Errorf("ValidatePattern(%q) = %v, want nil", p, err)
		}
	}
	bad := []string{"", "/abs", "a//b", "a/../b", "./a", "a**", "**x/y", "[", "a/[b", "a\x00b", "x.", "a /b", "**/name."}
	for _, p := range bad {
		if err := ValidatePattern(p); err == nil {
			t.Errorf("ValidatePattern(%q) = nil, want an error", p)
		}
	}
	// Invalid patterns never match, even "everything"-looking ones.
	if _, ok := Match([]string{"/**"}, "x"); ok {
		t.Error("an invalid pattern matched")
	}
}

func TestMatchHostilePatternIsFast(t *testing.T) {
	pat := strings.Repeat("*/**/", 200) + "x"
	rel := strings.Repeat("a/", 400) + "y"
	// With naive recursion this takes longer than the test timeout.
	if _, ok := Match([]string{pat}, rel); ok {
		t.Fatal("matched")
	}
}

// naiveMatch is an independent, obviously correct (and exponential)
// reference for matchSegments.
func naiveMatch(pat, segs []string) bool {
	if len(pat) == 0 {
		return len(segs) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(segs); i++ {
			if naiveMatch(pat[1:], segs[i:]) {
				return true
			}
		}
		return false
	}
	if len(segs) == 0 {
		return false
	}
	ok, _ := path.Match(pat[0], segs[0])
	return ok && naiveMatch(pat[1:], segs[1:])
}

func TestMatchAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	patAtoms := []string{"**", "*", "a", "b", "?", "a*", "[ab]"}
	segAtoms := []string{"a", "b", "ab", "ba", "c"}
	for i := 0; i < 20000; i++ {
		pat := make([]string, 1+r.IntN(5))
		for j := range pat {
			pat[j] = patAtoms[r.IntN(len(patAtoms))]
		}
		segs := make([]string, r.IntN(6))
		for j := range segs {
			segs[j] = segAtoms[r.IntN(len(segAtoms))]
		}
		p := strings.Join(pat, "/")
		rel := strings.Join(segs, "/")
		psegs, err := splitPattern(p)
		if err != nil {
			t.Fatalf("splitPattern(%q): %v", p, err)
		}
		_, got := Match([]string{p}, rel)
		want := naiveMatch(psegs, segs)
		if got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", p, rel, got, want)
		}
	}
}

func FuzzMatch(f *testing.F) {
	f.Add("**/CLAUDE.md", "sub/CLAUDE.md")
	f.Add(".claude/**", ".claude")
	f.Add("a/**/b", "a/x/y/b")
	f.Add("[", "x")
	f.Add("dir/", "dir/x")
	f.Add("*", "../x")
	f.Fuzz(func(t *testing.T, pattern, rel string) {
		pat, ok := Match([]string{pattern}, rel)
		if ok && pat != pattern && pat != OutsidePattern {
			t.Fatalf("returned pattern %q not in the list", pat)
		}
		// Case never matters (for ASCII paths; other scripts' case rules
		// are not symmetric).
		if isASCII(rel) {
			if _, up := Match([]string{pattern}, strings.ToUpper(rel)); up != ok {
				t.Fatalf("upper-casing %q changed the result", rel)
			}
		}
		// Invisible code points and fullwidth forms change nothing.
		// (Within the segments of a clean path: a segment of nothing but
		// invisible code points is a directory of its own.)
		if clean := path.Clean(rel); utf8.ValidString(rel) && !strings.Contains(rel, "..") && !strings.HasPrefix(clean, "/") && clean != "." {
			if _, z := Match([]string{pattern}, strings.ReplaceAll(clean, "/", "\u200b/")+"\u200b"); z != ok {
				t.Fatalf("zero-width spaces in %q changed the result", clean)
			}
		}
		// Anything leaving the workspace is protected.
		if strings.HasPrefix(rel, "/") {
			if _, ok := Match(nil, rel); !ok {
				t.Fatalf("absolute %q not protected", rel)
			}
		}
		// "dir/**" protects every path below dir.
		if ValidatePattern(pattern) == nil && !strings.HasSuffix(pattern, "/") && !strings.ContainsAny(pattern, "*?[\\") {
			if _, ok := Match([]string{pattern + "/**"}, pattern+"/"+"x"); !ok {
				t.Fatalf("%q/** does not protect %q/x", pattern, pattern)
			}
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
