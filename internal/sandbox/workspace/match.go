// Package workspace applies what a sandbox wrote in its overlay upper
// directory back onto the host workspace, dropping (and reporting) every
// change to a protected path, without ever following a symlink on the host.
//
// It also owns the protected-path pattern language (Match), so the policy
// package and the copy-back agree on what a pattern means.
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
// short for "/**". Matching ignores ASCII case: a protected name must not be
// reachable through "claude.md" on a case-insensitive tool or filesystem,
// and dropping a harmless look-alike is the safe mistake.
//
// Invalid patterns never match; ValidatePattern reports them.
func Match(protected []string, relPath string) (pattern string, ok bool) {
	p, inside := cleanRel(relPath)
	if !inside {
		return OutsidePattern, true
	}
	var segs []string
	if p != "" {
		segs = strings.Split(strings.ToLower(p), "/")
	}
	for _, pat := range protected {
		psegs, err := splitPattern(pat)
		if err != nil {
			continue
		}
		if matchSegments(psegs, segs) {
			return pat, true
		}
	}
	return "", false
}

// ValidatePattern reports why pattern is not a valid protected pattern.
func ValidatePattern(pattern string) error {
	_, err := splitPattern(pattern)
	return err
}

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

// splitPattern lower-cases and splits a pattern into segments, collapsing
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
	p := strings.ToLower(pattern)
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
		default:
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
	ok, err := path.Match(pat, seg)
	return err == nil && ok
}
