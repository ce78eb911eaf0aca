package pi

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around a change.
const diffContext = 3

// maxDiffCells bounds the dynamic-programming table of the line diff;
// larger files are diffed as their whole changed middle replaced.
const maxDiffCells = 1 << 22

// op is one line of an edit script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	line string
}

// unifiedDiff returns a unified diff (diff -u form, a/ and b/ prefixes,
// /dev/null for a created file) from old to nw, or "" when nothing
// changed.
func unifiedDiff(path, old, nw string, created bool) string {
	if old == nw && !created {
		return ""
	}
	var sb strings.Builder
	if created {
		sb.WriteString("--- /dev/null\n")
	} else {
		fmt.Fprintf(&sb, "--- a/%s\n", path)
	}
	fmt.Fprintf(&sb, "+++ b/%s\n", path)
	ops := diffLines(lines(old), lines(nw))
	// Group the script into hunks: a change, diffContext lines around it,
	// merged with the next change when the gap is small.
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max(i-diffContext, 0)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*diffContext {
				end = min(end+diffContext, len(ops))
				break
			}
			end = run
		}
		writeHunk(&sb, ops, start, end)
		i = end
	}
	return sb.String()
}

func writeHunk(sb *strings.Builder, ops []op, start, end int) {
	// Line numbers: count the lines of each side before start.
	a, b := 1, 1
	for _, o := range ops[:start] {
		if o.kind != '+' {
			a++
		}
		if o.kind != '-' {
			b++
		}
	}
	na, nb := 0, 0
	for _, o := range ops[start:end] {
		if o.kind != '+' {
			na++
		}
		if o.kind != '-' {
			nb++
		}
	}
	if na == 0 {
		a--
	}
	if nb == 0 {
		b--
	}
	fmt.Fprintf(sb, "@@ -%d,%d +%d,%d @@\n", a, na, b, nb)
	for _, o := range ops[start:end] {
		sb.WriteByte(o.kind)
		sb.WriteString(strings.TrimSuffix(o.line, "\n"))
		sb.WriteByte('\n')
		if !strings.HasSuffix(o.line, "\n") {
			sb.WriteString("\\ No newline at end of file\n")
		}
	}
}

// lines splits s into lines that keep their newline.
func lines(s string) []string {
	if s == "" {
		return nil
	}
	out := strings.SplitAfter(s, "\n")
	if out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// diffLines returns an edit script from a to b: the common prefix and
// suffix kept, the middle by longest common subsequence (or replaced whole
// when it is too large for the table).
func diffLines(a, b []string) []op {
	var pre, suf int
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []op
	for _, l := range a[:pre] {
		ops = append(ops, op{' ', l})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if (len(ma)+1)*(len(mb)+1) > maxDiffCells {
		for _, l := range ma {
			ops = append(ops, op{'-', l})
		}
		for _, l := range mb {
			ops = append(ops, op{'+', l})
		}
	} else {
		ops = append(ops, lcs(ma, mb)...)
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, op{' ', l})
	}
	return ops
}

// lcs diffs a and b with the classic longest-common-subsequence table.
func lcs(a, b []string) []op {
	n, m := len(a), len(b)
	t := make([]int32, (n+1)*(m+1))
	at := func(i, j int) *int32 { return &t[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				*at(i, j) = *at(i+1, j+1) + 1
			} else {
				*at(i, j) = max(*at(i+1, j), *at(i, j+1))
			}
		}
	}
	var ops []op
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, op{' ', a[i]})
			i++
			j++
		case *at(i+1, j) >= *at(i, j+1):
			ops = append(ops, op{'-', a[i]})
			i++
		default:
			ops = append(ops, op{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, op{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, op{'+', b[j]})
	}
	return ops
}
