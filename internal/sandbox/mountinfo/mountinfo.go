// Package mountinfo reads the mount table of this process's mount
// namespace (/proc/self/mountinfo), for the code that finds cgroup
// hierarchies and the mounts a dead sandbox left behind.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Mount is one line of mountinfo.
type Mount struct {
	// Point is where it is mounted, unescaped.
	Point string
	// FSType is the file system type, e.g. "cgroup2", "overlay".
	FSType string
	// SuperOptions are the per-superblock options, e.g. the v1 cgroup
	// controllers ("rw", "memory").
	SuperOptions []string
}

// Read parses /proc/self/mountinfo.
func Read() ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return Parse(b), nil
}

// Parse parses mountinfo lines: "id parent maj:min root mountpoint opts
// [optional...] - fstype source superopts". Lines of another shape are
// skipped.
func Parse(b []byte) []Mount {
	var out []Mount
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 {
			continue
		}
		m := Mount{Point: unescape(f[4]), FSType: g[0]}
		if len(g) > 2 {
			m.SuperOptions = strings.Split(g[2], ",")
		}
		out = append(out, m)
	}
	return out
}

// Under lists the mount points at or below dir, deepest first, each once.
func Under(dir string) ([]string, error) {
	ms, err := Read()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ms {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out), nil
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
