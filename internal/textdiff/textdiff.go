// Package textdiff makes unified diffs of text files, for file_change items.
//
// The output has the form of diff -u (and git diff): "--- a/path" and
// "+++ b/path" headers, /dev/null for a created file, three lines of
// context, "@@ -l,n +l,n @@" hunk headers that leave out ",1", and the
// "\ No newline at end of file" marker after a last line without one.
package textdiff

import (
	"fmt"
	"strings"
)

// Context is the number of unchanged lines shown around each change.
const Context = 3

// maxCells bounds the longest-common-subsequence table (4 bytes a cell);
// beyond it the changed middle of the file is shown as removed and added
// whole, which is correct if not minimal.
const maxCells = 1 << 22

// Unified returns the diff from old to new of the file at path, or "" when
// nothing changed. created means the file did not exist before (old is
// then empty): the diff comes from /dev/null, and an empty new file is its
// headers alone.
func Unified(path, old, new string, created bool) string {
	if old == new && !created {
		return ""
	}
	var sb strings.Builder
	Header(&sb, path, created)
	ops := diffLines(Lines(old), Lines(new))
	// A hunk spans from Context lines before a change to Context lines
	// after the last change that is no more than 2*Context unchanged
	// lines from the one before it.
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start, end := max(i-Context, 0), i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*Context {
				end = min(end+Context, len(ops))
				break
			}
			end = run
		}
		writeHunk(&sb, ops, start, end)
		i = end
	}
	return sb.String()
}

// Header writes the --- and +++ lines of path's diff; a created file comes
// from /dev/null.
func Header(sb *strings.Builder, path string, created bool) {
	if created {
		sb.WriteString("--- /dev/null\n")
	} else {
		fmt.Fprintf(sb, "--- a/%s\n", path)
	}
	fmt.Fprintf(sb, "+++ b/%s\n", path)
}

// Range formats one side of a hunk header, n lines after the first before
// lines of the file, as diff -u does: "l,n" with l 1-based, "l" alone for
// one line, and "before,0" (the line before it) for none.
func Range(before, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", max(before, 0))
	case 1:
		return fmt.Sprintf("%d", before+1)
	}
	return fmt.Sprintf("%d,%d", before+1, n)
}

// Lines splits s into lines that keep their "\n"; the last one may lack
// it. The empty text has no lines.
func Lines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// WriteLine writes one line of a hunk: kind (' ', '-' or '+') and line,
// which ends with "\n" or else is the file's last line and is followed by
// the "\ No newline at end of file" marker.
func WriteLine(sb *strings.Builder, kind byte, line string) {
	sb.WriteByte(kind)
	sb.WriteString(line)
	if !strings.HasSuffix(line, "\n") {
		sb.WriteString("\n\\ No newline at end of file\n")
	}
}

// op is one line of an edit script: ' ' kept, '-' removed, '+' added.
type op struct {
	kind byte
	line string
}

// writeHunk writes ops[start:end] with its @@ header.
func writeHunk(sb *strings.Builder, ops []op, start, end int) {
	oldBefore, newBefore := count(ops[:start])
	oldN, newN := count(ops[start:end])
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", Range(oldBefore, oldN), Range(newBefore, newN))
	for _, o := range ops[start:end] {
		WriteLine(sb, o.kind, o.line)
	}
}

// count returns how many lines of the old and of the new file ops span.
func count(ops []op) (old, new int) {
	for _, o := range ops {
		if o.kind != '+' {
			old++
		}
		if o.kind != '-' {
			new++
		}
	}
	return old, new
}

// diffLines returns an edit script from a to b: the common prefix and
// suffix kept, the middle matched by a longest common subsequence.
func diffLines(a, b []string) []op {
	var pre, suf int
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ops := make([]op, 0, len(a)+len(b)-pre-suf)
	for _, l := range a[:pre] {
		ops = append(ops, op{' ', l})
	}
	ops = appendMiddle(ops, a[pre:len(a)-suf], b[pre:len(b)-suf])
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, op{' ', l})
	}
	return ops
}

// appendMiddle appends the edit script from a to b by the classic
// longest-common-subsequence table. On a tie it removes before it adds, as
// diff does, so that within a run of changes the removed lines come first.
func appendMiddle(ops []op, a, b []string) []op {
	if (len(a)+1)*(len(b)+1) > maxCells {
		for _, l := range a {
			ops = append(ops, op{'-', l})
		}
		for _, l := range b {
			ops = append(ops, op{'+', l})
		}
		return ops
	}
	// lcs[i*w+j] is the length of the LCS of a[i:] and b[j:].
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
			ops = append(ops, op{' ', a[i]})
			i++
			j++
		case lcs[(i+1)*w+j] >= lcs[i*w+j+1]:
			ops = append(ops, op{'-', a[i]})
			i++
		default:
			ops = append(ops, op{'+', b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		ops = append(ops, op{'-', a[i]})
	}
	for ; j < len(b); j++ {
		ops = append(ops, op{'+', b[j]})
	}
	return ops
}
