package sandbox

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/inert"
)

func TestCleanReported(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		limit    int
		want     string
	}{
		{"plain", "curl -s https://example.com/", 1024, "curl -s https://example.com/"},
		{"OSC 52 clipboard write", "curl\x1b]52;c;ZWNobyBwd25lZA==\x07", 1024, `curl\x1b]52;c;ZWNobyBwd25lZA==\x07`},
		{"CSI erase and move", "\x1b[2J\x1b[1;1Hok", 1024, `\x1b[2J\x1b[1;1Hok`},
		{"C1 CSI", "a\u009b31mb", 1024, `a\u009b31mb`},
		{"bidi override", "evil\u202egnp.exe", 1024, `evil\u202egnp.exe`},
		{"bidi isolate and marks", "a\u2066b\u2069\u200fc\u061c", 1024, `a\u2066b\u2069\u200fc\u061c`},
		{"zero-width and BOM", "cu\u200brl\ufeff", 1024, `cu\u200brl\ufeff`},
		{"line separator", "a\u2028b\u2029c", 1024, `a\u2028b\u2029c`},
		{"newline, tab, DEL, NUL", "a\nb\tc\x7fd\x00", 1024, `a\x0ab\x09c\x7fd\x00`},
		{"invalid UTF-8", "a\xffb\xc3", 1024, `a\xffb\xc3`},
		{"private use", "a\ue000b", 1024, `a\ue000b`},
		{"letters of any script stay", "naïve 日本語 ĳ", 1024, "naïve 日本語 ĳ"},
		{"cut with a mark", strings.Repeat("a", 70), 64, strings.Repeat("a", 61) + "…"},
		{"exactly the limit is not cut", strings.Repeat("a", 64), 64, strings.Repeat("a", 64)},
		{"cut at a character boundary", strings.Repeat("日", 30), 64, strings.Repeat("日", 20) + "…"},
		{"an escape is never split", strings.Repeat("\x1b", 30), 16, `\x1b\x1b\x1b…`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CleanReported(tc.in, tc.limit)
			if got != tc.want {
				t.Errorf("CleanReported(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
			}
			checkClean(t, got, tc.limit)
		})
	}
}

func TestNewPeer(t *testing.T) {
	p := NewPeer(-3, "\x1b]0;owned\x07"+strings.Repeat("n", 100), "sh -c \x1b[31m"+strings.Repeat("x", 2000))
	if p.Pid != 0 || len(p.Name) > MaxPeerName || len(p.CommandLine) > MaxPeerCommandLine ||
		!strings.HasPrefix(p.Name, `\x1b]0;owned\x07`) || !strings.HasPrefix(p.CommandLine, `sh -c \x1b[31m`) {
		t.Errorf("NewPeer = %+v", p)
	}
	if p.Sanitized() != p {
		t.Errorf("Sanitized changed a sanitised peer: %+v", p.Sanitized())
	}
}

// checkClean checks what CleanReported promises of its output.
func checkClean(t testing.TB, s string, limit int) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%q is not valid UTF-8", s)
	}
	if len(s) > max(limit, 4) {
		t.Errorf("%q is %d bytes, over %d", s, len(s), limit)
	}
	for _, r := range s {
		if inert.Unsafe(r) {
			t.Errorf("%q holds %U", s, r)
		}
	}
	if again := CleanReported(s, limit); again != s {
		t.Errorf("not idempotent: %q, then %q", s, again)
	}
}

// FuzzCleanReported: whatever a sandbox names itself, the text is valid
// UTF-8, within its limit, free of controls and invisible formatting, and
// cleaning it again changes nothing.
func FuzzCleanReported(f *testing.F) {
	for _, s := range []string{"curl", "\x1b]52;c;aGk=\x07", "\x1b[2J", "\u202e", "\xff\xfe", strings.Repeat("日", 400), "\u009b1m"} {
		f.Add(s, 64)
		f.Add(s, 1024)
	}
	f.Fuzz(func(t *testing.T, s string, limit int) {
		limit = limit%2048 + 1
		if limit < 0 {
			limit = -limit
		}
		checkClean(t, CleanReported(s, limit), limit)
	})
}
