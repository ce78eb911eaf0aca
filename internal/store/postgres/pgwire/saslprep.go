package pgwire

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// saslprep prepares a SCRAM password as PostgreSQL does (pg_saslprep,
// RFC 4013): an ASCII password is itself; otherwise non-ASCII spaces
// become spaces, the characters "commonly mapped to nothing" go, the rest
// is normalised to NFKC, and the result is the prepared password unless it
// holds a prohibited character, an unassigned one or a mix of left-to-right
// and right-to-left letters, in which case (as PostgreSQL does when it sets
// such a password) the password is used as it is.
//
// PostgreSQL judges "unassigned" and bidirectional classes by Unicode 3.2's
// tables (RFC 3454), this by the Go runtime's Unicode tables and the RFC's
// right-to-left list: a password mixing characters NFKC changes with ones
// assigned after Unicode 3.2 may be prepared differently and fail to
// authenticate. ASCII passwords, and usual non-ASCII ones, are unaffected.
func saslprep(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		ascii = ascii && s[i] < utf8.RuneSelf
	}
	if ascii || !utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case inRanges(r, nonASCIISpace):
			b.WriteByte(' ')
		case inRanges(r, mappedToNothing):
		default:
			b.WriteRune(r)
		}
	}
	out := norm.NFKC.String(b.String())
	var hasRandAL, hasL bool
	for _, r := range out {
		if inRanges(r, prohibited) || !assigned(r) {
			return s
		}
		if inRanges(r, randAL) {
			hasRandAL = true
		} else if unicode.In(r, unicode.L, unicode.Mc) {
			hasL = true
		}
	}
	if hasRandAL {
		first, _ := utf8.DecodeRuneInString(out)
		last, _ := utf8.DecodeLastRuneInString(out)
		if hasL || !inRanges(first, randAL) || !inRanges(last, randAL) {
			return s
		}
	}
	return out
}

func assigned(r rune) bool {
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
}

func inRanges(r rune, rs [][2]rune) bool {
	for _, x := range rs {
		if r >= x[0] && r <= x[1] {
			return true
		}
	}
	return false
}

// RFC 3454 C.1.2.
var nonASCIISpace = [][2]rune{{0x00A0, 0x00A0}, {0x1680, 0x1680}, {0x2000, 0x200B}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}}

// RFC 3454 B.1.
var mappedToNothing = [][2]rune{{0x00AD, 0x00AD}, {0x034F, 0x034F}, {0x1806, 0x1806}, {0x180B, 0x180D}, {0x200B, 0x200D},
	{0x2060, 0x2060}, {0xFE00, 0xFE0F}, {0xFEFF, 0xFEFF}}

// RFC 3454 C.1.2, C.2.1, C.2.2, C.3 to C.9 (SASLprep's prohibited output).
var prohibited = [][2]rune{
	{0x0000, 0x001F}, {0x007F, 0x009F}, {0x00A0, 0x00A0}, {0x0340, 0x0341}, {0x06DD, 0x06DD}, {0x070F, 0x070F},
	{0x1680, 0x1680}, {0x180E, 0x180E}, {0x2000, 0x200F}, {0x2028, 0x202F}, {0x205F, 0x2063}, {0x206A, 0x206F},
	{0x2FF0, 0x2FFB}, {0x3000, 0x3000}, {0xD800, 0xF8FF}, {0xFDD0, 0xFDEF}, {0xFEFF, 0xFEFF}, {0xFFF9, 0xFFFF},
	{0x1D173, 0x1D17A}, {0x1FFFE, 0x1FFFF}, {0x2FFFE, 0x2FFFF}, {0x3FFFE, 0x3FFFF}, {0x4FFFE, 0x4FFFF},
	{0x5FFFE, 0x5FFFF}, {0x6FFFE, 0x6FFFF}, {0x7FFFE, 0x7FFFF}, {0x8FFFE, 0x8FFFF}, {0x9FFFE, 0x9FFFF},
	{0xAFFFE, 0xAFFFF}, {0xBFFFE, 0xBFFFF}, {0xCFFFE, 0xCFFFF}, {0xDFFFE, 0xDFFFF}, {0xE0001, 0xE0001},
	{0xE0020, 0xE007F}, {0xEFFFE, 0x10FFFF},
}

// RFC 3454 D.1: characters of bidirectional class R or AL.
var randAL = [][2]rune{
	{0x05BE, 0x05BE}, {0x05C0, 0x05C0}, {0x05C3, 0x05C3}, {0x05D0, 0x05EA}, {0x05F0, 0x05F4}, {0x061B, 0x061B},
	{0x061F, 0x061F}, {0x0621, 0x063A}, {0x0640, 0x064A}, {0x066D, 0x066F}, {0x0671, 0x06D5}, {0x06DD, 0x06DD},
	{0x06E5, 0x06E6}, {0x06FA, 0x06FE}, {0x0700, 0x070D}, {0x0710, 0x0710}, {0x0712, 0x072C}, {0x0780, 0x07A5},
	{0x07B1, 0x07B1}, {0x200F, 0x200F}, {0xFB1D, 0xFB1D}, {0xFB1F, 0xFB28}, {0xFB2A, 0xFB36}, {0xFB38, 0xFB3C},
	{0xFB3E, 0xFB3E}, {0xFB40, 0xFB41}, {0xFB43, 0xFB44}, {0xFB46, 0xFBB1}, {0xFBD3, 0xFD3D}, {0xFD50, 0xFD8F},
	{0xFD92, 0xFDC7}, {0xFDF0, 0xFDFC}, {0xFE70, 0xFE74}, {0xFE76, 0xFEFC},
}
