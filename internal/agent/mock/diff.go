package mock

import (
	"fmt"
	"slices"
	"strings"
)

// diffContext is the number of unchanged lines around each change, as in
// diff -u.
const diffContext = 3

// maxDiffCells bounds the longest-common-subsequence table; beyond it the
// changed middle of the file is shown as removed and added whole.
const maxDiffCells = 4_000_000

// unifiedDiff returns the unified diff from old to new of the file at path,
// in the form of diff -u (a/ and b/ prefixes, /dev/null for a new file), or
// "" when nothing changed.
func unifiedDiff(path, old, new string, created bool) string {
	if old == new && !created {
		return ""
	}
	a, b := splitLines(old), splitLines(new)
	ops := diffLines(a, b)

	var sb strings.Builder
	if created {
		sb.WriteString("--- /dev/null\n")
	} else {
		fmt.Fprintf(&sb, "--- a/%s\n", path)
	}
	fmt.Fprintf(&sb, "+++ b/%s\n", path)
	if old == new {
		return sb.String() // an empty new file: headers only
	}

	// Walk the script hunk by hunk: a hunk spans from diffContext lines
	// before a change to diffContext lines after the last change that is
	// no further than 2*diffContext lines from the previous one.
	for i := 0; i < len(ops); {
		if ops[i].op == ' ' {
			i++
			continue
		}
		start := max(0, i-diffContext)
		end := i
		for j := i; j < len(ops); j++ {
			if ops[j].op != ' ' {
				end = j + 1
			} else if j-end >= 2*diffContext {
				break
			}
		}
		end = min(len(ops), end+diffContext)
		writeHunk(&sb, ops, start, end)
		i = end
	}
	return sb.String()
}

type diffOp struct {
	op   byte // ' ', '-' or '+'
	line string
}

// writeHunk writes ops[start:end] with its @@ header.
func writeHunk(sb *strings.Builder, ops []diffOp, start, end int) {
	var oldStart, newStart int // lines before the hunk
	for _, o := range ops[:start] {
		if o.op != '+' {
			oldStart++
		}
		if o.op != '-' {
			newStart++
		}
	}
	var oldN, newN int
	for _, o := range ops[start:end] {
		if o.op != '+' {
			oldN++
		}
		if o.op != '-' {
			newN++
		}
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", hunkRange(oldStart, oldN), hunkRange(newStart, newN))
	for _, o := range ops[start:end] {
		sb.WriteByte(o.op)
		sb.WriteString(o.line)
		if !strings.HasSuffix(o.line, "\n") {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

// hunkRange formats a range as diff -u does: "start,count", "start" alone
// for one line, and the line before it for none.
func hunkRange(before, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", before)
	case 1:
		return fmt.Sprintf("%d", before+1)
	}
	return fmt.Sprintf("%d,%d", before+1, n)
}

// splitLines splits s into lines that keep their "\n"; the last one may
// lack it.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// diffLines returns an edit script from a to b: the common prefix and suffix
// as context and a longest common subsequence of the middle.
func diffLines(a, b []string) []diffOp {
	var pre, suf int
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops := make([]diffOp, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		ops = append(ops, diffOp{' ', l})
	}
	ops = append(ops, diffMiddle(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

func diffMiddle(a, b []string) []diffOp {
	var ops []diffOp
	if len(a)*len(b) > maxDiffCells {
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	// lcs[i][j] is the length of the LCS of a[i:] and b[j:].
	w := len(b) + 1
	lcs := make([]int32, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i++
			j++
		case lcs[(i+1)*w+j] > lcs[i*w+j+1]:
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default: // on a tie, keep the earlier match of a, as diff does
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		ops = append(ops, diffOp{'-', a[i]})
	}
	for ; j < len(b); j++ {
		ops = append(ops, diffOp{'+', b[j]})
	}
	// Within each run of changes, show the removed lines first.
	for k := 0; k < len(ops); {
		if ops[k].op == ' ' {
			k++
			continue
		}
		e := k
		for e < len(ops) && ops[e].op != ' ' {
			e++
		}
		slices.SortStableFunc(ops[k:e], func(x, y diffOp) int { return int(y.op) - int(x.op) }) // '-' (45) before '+' (43)
		k = e
	}
	return ops
}
