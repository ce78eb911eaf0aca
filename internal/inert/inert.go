// Package inert is the one classification of the characters that change
// how a terminal or a text view shows the text around them, or hide
// themselves, and the visible escapes they are written as. Text from an
// agent or a sandbox (session events in the CLI, JSON on a terminal, the
// names a sandboxed process gives itself) is made inert with it.
package inert

import (
	"fmt"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Unsafe reports whether r steers a terminal or changes how a text view
// shows what surrounds it, or hides itself: C0 controls (newline and tab
// included: callers that keep them say so), DEL, C1 controls, formatting
// characters (Unicode's Cf: bidi controls, zero-width characters, the
// BOM), line and paragraph separators, surrogates, and unassigned or
// private-use code points, which a font may draw as anything.
func Unsafe(r rune) bool {
	switch {
	case r < 0x20 || r == 0x7f:
		return true
	case r < 0x7f:
		return false
	case r >= 0x80 && r < 0xa0:
		return true
	case unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp, unicode.Co, unicode.Cs):
		return true
	case !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs):
		return true // unassigned
	}
	return false
}

// Escape returns the visible form of r: \xNN below U+0080 (ESC is \x1b),
// \uNNNN in the Basic Multilingual Plane, \UNNNNNNNN above it.
func Escape(r rune) string {
	switch {
	case r < 0x80:
		return fmt.Sprintf(`\x%02x`, r)
	case r <= 0xffff:
		return fmt.Sprintf(`\u%04x`, r)
	}
	return fmt.Sprintf(`\U%08x`, r)
}

// EscapeByte returns the visible form of a byte that is not UTF-8: \xNN.
func EscapeByte(b byte) string { return fmt.Sprintf(`\x%02x`, b) }

// EscapeJSON returns r as a JSON string escape, \uNNNN, or a surrogate pair
// of them above the Basic Multilingual Plane: inside a JSON string it means
// r itself.
func EscapeJSON(r rune) string {
	if r > 0xffff {
		hi, lo := utf16.EncodeRune(r)
		return EscapeJSON(hi) + EscapeJSON(lo)
	}
	return fmt.Sprintf(`\u%04x`, r)
}

// String returns s with every unsafe rune that keep does not allow (keep
// may be nil) written by Escape, and every byte that is not UTF-8 by
// EscapeByte. The result is valid UTF-8 and String of it changes nothing.
func String(s string, keep func(rune) bool) string {
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf && !escaped(rune(s[i]), keep) {
		i++
	}
	if i == len(s) {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:i]...)
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b = append(b, EscapeByte(s[i])...)
			size = 1
		case escaped(r, keep):
			b = append(b, Escape(r)...)
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return string(b)
}

// escaped reports whether String escapes r: unsafe, and not kept.
func escaped(r rune, keep func(rune) bool) bool {
	return Unsafe(r) && (keep == nil || !keep(r))
}
