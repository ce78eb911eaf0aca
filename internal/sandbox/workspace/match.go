// Package workspace applies what a sandbox wrote in its overlay upper
// directory back onto the host workspace: the checked commit every file a
// sandbox writes passes before it reaches the host. It drops (and reports)
// changes to protected paths and to what git would execute, holds changes
// to hidden paths for review, bounds what one commit may write, and never
// follows a symlink on the host.
//
// It also owns the protected-path pattern language (Match, Matcher) and the
// name folding (Fold) every comparison uses, so the policy package and the
// copy-back agree on what a pattern means.
package workspace

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// OutsidePattern is the pseudo-pattern Match reports for a path that is
// absolute or climbs out of the workspace with "..": such a path is never
// writable, whatever the list says.
const OutsidePattern = "<outside the workspace>"

// Match reports the first pattern in protected that matches relPath, a
// slash-separated path relative to the workspace root.
//
// Patterns are anchored at the workspace root and matched segment by
// segment: "*", "?" and "[...]" work as in path.Match inside one segment,
// and a "**" segment matches zero or more whole segments. So "**/CLAUDE.md"
// matches CLAUDE.md at any depth including the root, and ".claude/**"
// matches .claude itself and everything below it (replacing the directory
// is as much a change to it as editing a file in it). A trailing "/" is
// short for "/**".
//
// Both the path and the patterns are compared folded (see Fold): case,
// Unicode compatibility forms, invisible code points and trailing dots do
// not matter, so a protected name is not reachable through "claude.md",
// "ＣＬＡＵＤＥ.md" or "CLAUDE\u200b.md" on a host or tool that takes them
// for the same file. Dropping a harmless look-alike is the safe mistake.
//
// Invalid patterns never match; ValidatePattern reports them. Match
// compiles the patterns on every call; NewMatcher compiles them once.
func Match(protected []string, relPath string) (pattern string, ok bool) {
	return NewMatcher(protected).Match(relPath)
}

// ValidatePattern reports why pattern is not a valid protected pattern.
func ValidatePattern(pattern string) error {
	_, err := splitPattern(pattern)
	return err
}

// Matcher is a compiled list of patterns.
type Matcher struct {
	pats []compiled
	// Index of the two common shapes, by their folded literal:
	// "**/NAME" matches when the last segment is NAME, "**/DIR/**" when
	// any segment is DIR. The value is the pattern's index in pats.
	byLast, byAny map[string][]int
	general       []int // every other pattern's index
}

type compiled struct {
	pattern, rule string
	segs          []string
}

// NewMatcher compiles patterns; invalid ones are left out (they never
// match). Each match is reported with the rule "protected:<pattern>".
func NewMatcher(patterns []string) *Matcher {
	m := &Matcher{}
	for _, p := range patterns {
		m.Add(p, "protected:"+p)
	}
	return m
}

// Add appends one pattern, reported with rule when it matches; it reports
// whether the pattern is valid (an invalid one is not added).
func (m *Matcher) Add(pattern, rule string) bool {
	segs, err := splitPattern(pattern)
	if err != nil {
		return false
	}
	if m.byLast == nil {
		m.byLast, m.byAny = map[string][]int{}, map[string][]int{}
	}
	i := len(m.pats)
	m.pats = append(m.pats, compiled{pattern: pattern, rule: rule, segs: segs})
	switch {
	case len(segs) == 2 && segs[0] == "**" && literal(segs[1]):
		m.byLast[segs[1]] = append(m.byLast[segs[1]], i)
	case len(segs) == 3 && segs[0] == "**" && segs[2] == "**" && literal(segs[1]):
		m.byAny[segs[1]] = append(m.byAny[segs[1]], i)
	default:
		m.general = append(m.general, i)
	}
	return true
}

// Match is the package-level Match on the compiled patterns: it returns
// the first matching pattern.
func (m *Matcher) Match(relPath string) (pattern string, ok bool) {
	p, inside := cleanRel(relPath)
	if !inside {
		return OutsidePattern, true
	}
	i, ok := m.matchFolded(foldPath(p))
	if !ok {
		return "", false
	}
	return m.pats[i].pattern, true
}

// rule returns the rule of the first pattern matching folded segments.
func (m *Matcher) rule(segs []string) (string, bool) {
	i, ok := m.matchFolded(segs)
	if !ok {
		return "", false
	}
	return m.pats[i].rule, true
}

// matchFolded returns the index of the first pattern matching the folded
// segments of a clean relative path.
func (m *Matcher) matchFolded(segs []string) (int, bool) {
	if m == nil || len(m.pats) == 0 {
		return 0, false
	}
	best := len(m.pats)
	if len(segs) > 0 {
		if is, ok := m.byLast[segs[len(segs)-1]]; ok {
			best = min(best, is[0])
		}
		for _, s := range segs {
			if is, ok := m.byAny[s]; ok {
				best = min(best, is[0])
			}
		}
	}
	for _, i := range m.general {
		if i >= best {
			break
		}
		if matchSegments(m.pats[i].segs, segs) {
			best = i
			break
		}
	}
	return best, best < len(m.pats)
}

// literal reports whether a (folded) pattern segment has no wildcard.
func literal(seg string) bool { return !strings.ContainsAny(seg, "*?[\\") }

// cleanRel cleans a relative path; inside is false when it is absolute or
// leaves the workspace. The root itself is "".
func cleanRel(rel string) (p string, inside bool) {
	if strings.HasPrefix(rel, "/") {
		return "", false
	}
	p = path.Clean(rel)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	if p == "." {
		p = ""
	}
	return p, true
}

var errEmptyPattern = errors.New("empty pattern")

// splitPattern folds and splits a pattern into segments, collapsing
// repeated "**" (they mean the same and would only cost time).
func splitPattern(pattern string) ([]string, error) {
	if pattern == "" {
		return nil, errEmptyPattern
	}
	if strings.HasPrefix(pattern, "/") {
		return nil, fmt.Errorf("pattern %q: patterns are relative to the workspace; drop the leading /", pattern)
	}
	if strings.ContainsRune(pattern, 0) {
		return nil, fmt.Errorf("pattern %q contains a NUL byte", pattern)
	}
	p := pattern
	if strings.HasSuffix(p, "/") {
		p += "**"
	}
	raw := strings.Split(p, "/")
	segs := make([]string, 0, len(raw))
	for _, s := range raw {
		switch {
		case s == "":
			return nil, fmt.Errorf("pattern %q has an empty path segment", pattern)
		case s == "." || s == "..":
			return nil, fmt.Errorf("pattern %q: %q segments are not allowed", pattern, s)
		case s == "**":
			if len(segs) > 0 && segs[len(segs)-1] == "**" {
				continue
			}
		case strings.Contains(s, "**"):
			return nil, fmt.Errorf("pattern %q: ** must be a whole path segment", pattern)
		case strings.HasSuffix(s, ".") || strings.HasSuffix(s, " "):
			// Names are compared without trailing dots and spaces
			// (Fold), so such a segment could only mislead.
			return nil, fmt.Errorf("pattern %q: segment %q ends with a dot or a space, which names are compared without", pattern, s)
		default:
			s = Fold(s)
			if _, err := path.Match(s, ""); err != nil {
				return nil, fmt.Errorf("pattern %q: bad segment %q: %w", pattern, s, err)
			}
		}
		segs = append(segs, s)
	}
	return segs, nil
}

// matchSegments matches path segments against pattern segments where "**"
// stands for any number of segments. It is the classic wildcard algorithm
// with one backtrack point, so a hostile pattern costs O(len(pat)·len(path))
// rather than exponential time.
func matchSegments(pat, segs []string) bool {
	pi, si := 0, 0
	starPi, starSi := -1, 0
	for si < len(segs) {
		switch {
		case pi < len(pat) && pat[pi] == "**":
			starPi, starSi = pi, si
			pi++
		case pi < len(pat) && segMatch(pat[pi], segs[si]):
			pi++
			si++
		case starPi >= 0:
			starSi++
			pi, si = starPi+1, starSi
		default:
			return false
		}
	}
	for pi < len(pat) && pat[pi] == "**" {
		pi++
	}
	return pi == len(pat)
}

func segMatch(pat, seg string) bool {
	if literal(pat) {
		return pat == seg
	}
	ok, err := path.Match(pat, seg)
	return err == nil && ok
}
