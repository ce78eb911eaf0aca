package workspace

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFold(t *testing.T) {
	tests := []struct{ in, want string }{
		{"CLAUDE.md", "claude.md"},
		{".GIT", ".git"},
		{".Git", ".git"},
		{"ＣＬＡＵＤＥ.md", "claude.md"},         // fullwidth letters (NFKC)
		{"．git", ".git"},                   // fullwidth full stop
		{"\u2024git", ".git"},              // one dot leader
		{".g\u200bit", ".git"},             // zero-width space
		{".gi\u200dt", ".git"},             // zero-width joiner
		{"\ufeff.git", ".git"},             // BOM
		{".git\u034f", ".git"},             // combining grapheme joiner
		{".git\U000E0041", ".git"},         // tag character
		{"CLA\u00adUDE.md", "claude.md"},   // soft hyphen
		{".git.", ".git"},                  // Windows drops trailing dots
		{".git ", ".git"},                  // and spaces
		{".git. . ", ".git"},               //
		{".", "."},                         // kept: nothing would be left
		{"..", ".."},                       //
		{"\u212Aey", "key"},                // Kelvin sign
		{".ſsh", ".ssh"},                   // long s
		{"gıt", "git"},                     // dotless i
		{"GİT", "git"},                     // dotted capital I
		{"straße", "strasse"},              // full folding of ß
		{"ΣΊΣΥΦΟΣ", "σίσυφοσ"},             // final sigma folds with sigma
		{"ﬁle", "file"},                    // ligature
		{"e\u0301", "\u00e9"},              // composed (NFC part of NFKC)
		{"src", "src"},                     //
		{"\xff.git", "\ufffd.git"},         // invalid UTF-8 stays invalid, never a letter
		{"\u200b", ""},                     // nothing visible at all
		{".\u200b.", ".."},                 // an invisible char cannot make ".." a name
		{".\u0130", ".i"},                  //
		{"AGENTS.MD", "agents.md"},         //
		{".ＣＬＡＵＤＥ", ".claude"},             //
		{".c\u0338laude", ".c\u0338laude"}, // a combining mark is visible: a different name
	}
	for _, tt := range tests {
		if got := Fold(tt.in); got != tt.want {
			t.Errorf("Fold(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func FuzzFold(f *testing.F) {
	for _, s := range []string{".git", "ＣＬＡＵＤＥ.md", ".g\u200bit", "straße", "ΣΊΣΥΦΟΣ", "\xff", "e\u0301", "ǅ", "ﬃ", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a := Fold(s)
		if b := Fold(a); b != a {
			t.Fatalf("Fold is not idempotent: Fold(%q) = %q, Fold(%q) = %q", s, a, a, b)
		}
		if strings.Contains(a, "/") != strings.Contains(s, "/") && !strings.ContainsRune(s, '／') {
			// NFKC maps the fullwidth solidus to "/"; nothing else may
			// create or remove a path separator.
			t.Fatalf("Fold(%q) = %q changed the separators", s, a)
		}
		if utf8.ValidString(s) && !utf8.ValidString(a) {
			t.Fatalf("Fold(%q) = %q is not valid UTF-8", s, a)
		}
		// Case never matters.
		if Fold(strings.ToUpper(s)) != Fold(strings.ToLower(s)) && ascii(s) {
			t.Fatalf("ASCII case changes Fold(%q)", s)
		}
		// An invisible code point anywhere changes nothing.
		for _, i := range []int{0, len(s) / 2, len(s)} {
			if !utf8.ValidString(s[:i]) {
				continue
			}
			if got := Fold(s[:i] + "\u200b" + s[i:]); got != a {
				t.Fatalf("Fold(%q with a zero-width space at %d) = %q, want %q", s, i, got, a)
			}
		}
	})
}
