package inert

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestUnsafe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r    rune
		want bool
	}{
		{'a', false}, {' ', false}, {'~', false}, {'é', false}, {'日', false}, {'✓', false}, {'…', false},
		{'\u00a0', false}, {'\ufffd', false}, {'\U0001f600', false}, // no-break space, replacement character, emoji
		{'\n', true}, {'\t', true}, {'\r', true}, {0x1b, true}, {0, true}, {0x7f, true},
		{0x80, true}, {0x9b, true}, {0x9f, true}, // C1
		{0x202e, true}, {0x2066, true}, {0x200e, true}, {0x061c, true}, // bidi
		{0x200b, true}, {0x200d, true}, {0xfeff, true}, {0x00ad, true}, // zero-width, BOM, soft hyphen
		{0x2028, true}, {0x2029, true}, // line and paragraph separators
		{0xe000, true}, {0xf0000, true}, // private use
		{0xd800, true},  // surrogate
		{0x0378, true},  // unassigned
		{0xe0041, true}, // tag character (Cf)
	}
	for _, tt := range tests {
		if got := Unsafe(tt.r); got != tt.want {
			t.Errorf("Unsafe(%U) = %v, want %v", tt.r, got, tt.want)
		}
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	keepNL := func(r rune) bool { return r == '\n' }
	tests := []struct {
		in   string
		keep func(rune) bool
		want string
	}{
		{"plain", nil, "plain"},
		{"a\nb\tc", nil, `a\x0ab\x09c`},
		{"a\nb\tc", keepNL, `a` + "\n" + `b\x09c`},
		{"\x1b]52;c;aGk=\x07", nil, `\x1b]52;c;aGk=\x07`},
		{"a\u009bb\u202ec\u200bd\u2028e\ufefff", nil, `a\u009bb\u202ec\u200bd\u2028e\ufefff`},
		{"pua \U000f0000 tag \U000e0041", nil, `pua \U000f0000 tag \U000e0041`},
		{"bad \xff\xc3 end", nil, `bad \xff\xc3 end`},
		{"naïve 日本 ✓ \U0001f600", nil, "naïve 日本 ✓ \U0001f600"},
	}
	for _, tt := range tests {
		got := String(tt.in, tt.keep)
		if got != tt.want {
			t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if again := String(got, tt.keep); again != got {
			t.Errorf("String is not idempotent on %q: %q", got, again)
		}
	}
}

func TestEscapeJSON(t *testing.T) {
	t.Parallel()
	for _, r := range []rune{0x7f, 0x9b, 0x202e, 0xfeff, 0xf0000, 0xe0041, 0x10fffd} {
		var got string
		if err := json.Unmarshal([]byte(`"`+EscapeJSON(r)+`"`), &got); err != nil {
			t.Fatalf("%U: %v", r, err)
		}
		if got != string(r) {
			t.Errorf("EscapeJSON(%U) decodes to %q", r, got)
		}
	}
}

// FuzzString: the result is valid UTF-8, holds no unsafe rune but those
// kept, and is left as it is by a second pass.
func FuzzString(f *testing.F) {
	for _, s := range []string{"plain", "\x1b[2J", "\u202e\u200b\u2028", "\xff\xfe", "\r\n\t", "\U000f0000"} {
		f.Add(s)
	}
	keep := func(r rune) bool { return r == '\n' || r == '\t' }
	f.Fuzz(func(t *testing.T, s string) {
		got := String(s, keep)
		if !utf8.ValidString(got) {
			t.Fatalf("%q is not valid UTF-8", got)
		}
		if i := strings.IndexFunc(got, func(r rune) bool { return Unsafe(r) && !keep(r) }); i >= 0 {
			t.Fatalf("%q holds an unsafe rune at %d", got, i)
		}
		if again := String(got, keep); again != got {
			t.Fatalf("not idempotent: %q, then %q", got, again)
		}
	})
}
