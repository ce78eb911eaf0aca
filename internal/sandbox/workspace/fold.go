package workspace

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Fold returns the form of one path segment (a file name) that every
// comparison in this package uses: protected patterns, ".git" and hidden
// components are all matched on folded names.
//
// A host filesystem, or a tool on it, may take two different byte strings
// for the same name: case-insensitive filesystems (ext4 casefold, APFS,
// NTFS, exFAT, CIFS mounts) fold case, some normalise Unicode, and git
// itself ignores certain code points and trailing dots when it looks for
// ".git" (is_hfs_dotgit, is_ntfs_dotgit in git's path.c). So the fold is
// deliberately wider than any one of them: a harmless look-alike being
// treated as the protected name is the safe mistake. It
//
//   - applies NFKC, so compatibility forms ("ＣＬＡＵＤＥ.md", "ﬁle",
//     "．git", the Kelvin sign) become their plain letters;
//   - drops default-ignorable code points (zero-width spaces and joiners,
//     bidi controls, variation selectors, the BOM, tag characters...),
//     which render as nothing and which HFS+ and git ignore;
//   - folds case: every rune maps through upper then lower case, so the
//     Turkish dotless and dotted i, the long s and final sigma fold with
//     their ASCII or Greek partners, and ß becomes "ss" (full folding);
//   - strips trailing dots and spaces (Windows drops them, so ".git." and
//     ".git " are ".git" there), unless nothing would be left.
//
// Folding is idempotent: Fold(Fold(s)) == Fold(s).
func Fold(seg string) string {
	if ascii(seg) {
		return trimTrailing(strings.ToLower(seg))
	}
	s := seg
	// NFKC and case folding each can undo the other's work on a few
	// code points; iterate to the fixpoint (two rounds suffice for every
	// assigned code point; the bound keeps hostile input cheap).
	for range 4 {
		next := foldOnce(s)
		if next == s {
			break
		}
		s = next
	}
	return trimTrailing(s)
}

func foldOnce(s string) string {
	s = norm.NFKC.String(s)
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == utf8.RuneError || defaultIgnorable(r) {
			// An invalid byte is kept as U+FFFD: a filesystem would
			// refuse or keep it; it never becomes a letter.
			if r == utf8.RuneError {
				b.WriteRune(r)
			}
			continue
		}
		switch r {
		case 'ß', 'ẞ':
			b.WriteString("ss")
			continue
		}
		b.WriteRune(unicode.ToLower(unicode.ToUpper(r)))
	}
	return norm.NFKC.String(b.String())
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// trimTrailing removes trailing dots and spaces, keeping "." and ".."
// (and names made only of dots and spaces) as they are.
func trimTrailing(s string) string {
	t := strings.TrimRight(s, ". ")
	if t == "" {
		return s
	}
	return t
}

// defaultIgnorable reports whether r has the Unicode property
// Default_Ignorable_Code_Point (DerivedCoreProperties.txt, Unicode 15),
// the code points a renderer shows as nothing.
func defaultIgnorable(r rune) bool {
	switch {
	case r < 0xAD:
		return false
	case r == 0xAD, r == 0x34F, r == 0x61C, r == 0x115F, r == 0x1160,
		r == 0x17B4, r == 0x17B5, r == 0x3164, r == 0xFEFF, r == 0xFFA0:
		return true
	case r >= 0x180B && r <= 0x180F,
		r >= 0x200B && r <= 0x200F,
		r >= 0x202A && r <= 0x202E,
		r >= 0x2060 && r <= 0x206F,
		r >= 0xFE00 && r <= 0xFE0F,
		r >= 0xFFF0 && r <= 0xFFF8,
		r >= 0x1BCA0 && r <= 0x1BCA3,
		r >= 0x1D173 && r <= 0x1D17A,
		r >= 0xE0000 && r <= 0xE0FFF:
		return true
	}
	return false
}

// foldPath folds every segment of a clean, slash-separated relative path.
func foldPath(p string) []string {
	if p == "" {
		return nil
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = Fold(s)
	}
	return segs
}

// hidden reports whether a folded segment names a hidden entry.
func hidden(folded string) bool {
	return len(folded) > 1 && folded[0] == '.' && folded != ".."
}
