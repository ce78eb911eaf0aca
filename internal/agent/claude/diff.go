package claude

import (
	"fmt"
	"strings"
)

// Unified diffs for file_change items, built from what the CLI reports:
// the structured patch of an Edit or an overwriting Write, the content of a
// new file, or (when the CLI reported no patch, e.g. for a declined edit)
// the edit's old and new strings.

// hunk is one hunk of the CLI's structuredPatch: lines start with ' ', '-'
// or '+'.
type hunk struct {
	OldStart int      `json:"oldStart"`
	OldLines int      `json:"oldLines"`
	NewStart int      `json:"newStart"`
	NewLines int      `json:"newLines"`
	Lines    []string `json:"lines"`
}

// diffHeader writes the --- / +++ lines; a new file comes from /dev/null.
func diffHeader(sb *strings.Builder, path string, created bool) {
	if created {
		sb.WriteString("--- /dev/null\n")
	} else {
		fmt.Fprintf(sb, "--- a/%s\n", path)
	}
	fmt.Fprintf(sb, "+++ b/%s\n", path)
}

// hunkRange formats one side of a hunk header as diff -u does: "start,n",
// "start" alone for one line, and the line before for none.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprintf("%d", start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// patchDiff renders the CLI's structured patch.
func patchDiff(path string, hunks []hunk) string {
	if len(hunks) == 0 {
		return ""
	}
	var sb strings.Builder
	diffHeader(&sb, path, false)
	for _, h := range hunks {
		oldStart, newStart := h.OldStart, h.NewStart
		if h.OldLines == 0 && oldStart > 0 {
			oldStart-- // an empty side names the line before it
		}
		if h.NewLines == 0 && newStart > 0 {
			newStart--
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(oldStart, h.OldLines), hunkRange(newStart, h.NewLines))
		for _, l := range h.Lines {
			sb.WriteString(l)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// splitLines splits s into lines without their "\n", and says whether the
// last one ended with one.
func splitLines(s string) (lines []string, eol bool) {
	if s == "" {
		return nil, true
	}
	eol = strings.HasSuffix(s, "\n")
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n"), eol
}

// writeLines writes lines with a prefix, and the "no newline" marker after
// the last one when it had none.
func writeLines(sb *strings.Builder, prefix byte, lines []string, eol bool) {
	for i, l := range lines {
		sb.WriteByte(prefix)
		sb.WriteString(l)
		sb.WriteByte('\n')
		if i == len(lines)-1 && !eol {
			sb.WriteString("\\ No newline at end of file\n")
		}
	}
}

// newFileDiff is the diff that creates path with content.
func newFileDiff(path, content string) string {
	var sb strings.Builder
	diffHeader(&sb, path, true)
	lines, eol := splitLines(content)
	if len(lines) == 0 {
		return sb.String()
	}
	fmt.Fprintf(&sb, "@@ -0,0 +%s @@\n", hunkRange(1, len(lines)))
	writeLines(&sb, '+', lines, eol)
	return sb.String()
}

// replaceDiff is one hunk replacing old with new. When the whole original
// file is known the hunk is placed at old's first line in it; otherwise
// the position is unknown and the hunk says line 1.
func replaceDiff(path string, pairs [][2]string, original *string) string {
	var sb strings.Builder
	diffHeader(&sb, path, false)
	for _, p := range pairs {
		start := 1
		if original != nil {
			if i := strings.Index(*original, p[0]); i >= 0 {
				start = strings.Count((*original)[:i], "\n") + 1
			}
		}
		ol, oeol := splitLines(p[0])
		nl, neol := splitLines(p[1])
		if p[0] != "" && !strings.HasSuffix(p[0], "\n") {
			oeol = true // a fragment of a line, not the end of the file
		}
		if p[1] != "" && !strings.HasSuffix(p[1], "\n") {
			neol = true
		}
		os, ns := start, start
		if len(ol) == 0 {
			os--
		}
		if len(nl) == 0 {
			ns--
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", hunkRange(os, len(ol)), hunkRange(ns, len(nl)))
		writeLines(&sb, '-', ol, oeol)
		writeLines(&sb, '+', nl, neol)
	}
	return sb.String()
}
