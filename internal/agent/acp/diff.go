package acp

import (
	"fmt"
	"strings"
)

// Unified diffs for file_change items, built from an ACP diff's old and new
// text (ACP sends whole texts, not patches).

// maxDiffCells bounds the line-matching table; beyond it the diff is one
// hunk replacing everything, which is correct if not minimal.
const maxDiffCells = 4 << 20

// unifiedDiff renders the change of one file as a unified diff with three
// lines of context. created means the file did not exist (old is empty).
func unifiedDiff(path, old, new string, created bool) string {
	a, b := splitLines(old), splitLines(new)
	ops := diffLines(a, b)
	var sb strings.Builder
	if created {
		sb.WriteString("--- /dev/null\n")
	} else {
		fmt.Fprintf(&sb, "--- a/%s\n", path)
	}
	fmt.Fprintf(&sb, "+++ b/%s\n", path)
	const ctx = 3
	changed := false
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		changed = true
		// A hunk: from ctx lines before the first change to ctx lines
		// after the last change that is within 2*ctx of the next.
		start := max(i-ctx, 0)
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
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, len(ops))
				break
			}
			end = run
		}
		writeHunk(&sb, ops, start, end)
		i = end
	}
	if !changed {
		return ""
	}
	return sb.String()
}

type diffOp struct {
	kind       byte // ' ', '-', '+'
	line       string
	aIdx, bIdx int // 0-based line numbers in old and new
}

func writeHunk(sb *strings.Builder, ops []diffOp, start, end int) {
	var oldN, newN int
	oldStart, newStart := -1, -1
	for _, op := range ops[start:end] {
		if op.kind != '+' {
			oldN++
			if oldStart < 0 {
				oldStart = op.aIdx
			}
		}
		if op.kind != '-' {
			newN++
			if newStart < 0 {
				newStart = op.bIdx
			}
		}
	}
	// Where a side is empty, diff -u names the line before it.
	if oldStart < 0 {
		oldStart = ops[start].aIdx - 1
	}
	if newStart < 0 {
		newStart = ops[start].bIdx - 1
	}
	fmt.Fprintf(sb, "@@ -%s +%s @@\n", hunkRange(oldStart+1, oldN), hunkRange(newStart+1, newN))
	for _, op := range ops[start:end] {
		sb.WriteByte(op.kind)
		sb.WriteString(op.line)
		if !strings.HasSuffix(op.line, "\n") {
			sb.WriteString("\n\\ No newline at end of file\n")
		}
	}
}

func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", max(start, 0))
	case 1:
		return fmt.Sprintf("%d", start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// splitLines splits s into lines that keep their "\n".
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// diffLines matches a against b with a longest common subsequence over the
// lines between their common prefix and suffix.
func diffLines(a, b []string) []diffOp {
	var ops []diffOp
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		ops = append(ops, diffOp{' ', a[pre], pre, pre})
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if len(ma)*len(mb) > maxDiffCells {
		for i, l := range ma {
			ops = append(ops, diffOp{'-', l, pre + i, pre})
		}
		for j, l := range mb {
			ops = append(ops, diffOp{'+', l, pre + len(ma), pre + j})
		}
	} else {
		// lcs[i][j]: length of the LCS of ma[i:] and mb[j:].
		w := len(mb) + 1
		lcs := make([]int32, (len(ma)+1)*w)
		for i := len(ma) - 1; i >= 0; i-- {
			for j := len(mb) - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
				} else {
					lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(ma) || j < len(mb) {
			switch {
			case i < len(ma) && j < len(mb) && ma[i] == mb[j]:
				ops = append(ops, diffOp{' ', ma[i], pre + i, pre + j})
				i++
				j++
			case i < len(ma) && (j == len(mb) || lcs[(i+1)*w+j] >= lcs[i*w+j+1]):
				ops = append(ops, diffOp{'-', ma[i], pre + i, pre + j})
				i++
			default:
				ops = append(ops, diffOp{'+', mb[j], pre + i, pre + j})
				j++
			}
		}
	}
	for k := suf; k > 0; k-- {
		ia, ib := len(a)-k, len(b)-k
		ops = append(ops, diffOp{' ', a[ia], ia, ib})
	}
	return ops
}
