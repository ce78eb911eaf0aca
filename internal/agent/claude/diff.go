package claude

import (
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/textdiff"
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

// patchDiff renders the CLI's structured patch.
func patchDiff(path string, hunks []hunk) string {
	if len(hunks) == 0 {
		return ""
	}
	var sb strings.Builder
	textdiff.Header(&sb, path, false)
	for _, h := range hunks {
		// The CLI's starts are 1-based; an empty side names the line
		// before it.
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", textdiff.Range(h.OldStart-1, h.OldLines), textdiff.Range(h.NewStart-1, h.NewLines))
		for _, l := range h.Lines {
			sb.WriteString(l)
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

// newFileDiff is the diff that creates path with content.
func newFileDiff(path, content string) string {
	return textdiff.Unified(path, "", content, true)
}

// replaceDiff is one hunk replacing old with new. When the whole original
// file is known the hunk is placed at old's first line in it; otherwise
// the position is unknown and the hunk says line 1.
func replaceDiff(path string, pairs [][2]string, original *string) string {
	var sb strings.Builder
	textdiff.Header(&sb, path, false)
	for _, p := range pairs {
		start := 1
		if original != nil {
			if i := strings.Index(*original, p[0]); i >= 0 {
				start = strings.Count((*original)[:i], "\n") + 1
			}
		}
		ol, nl := textdiff.Lines(fragment(p[0])), textdiff.Lines(fragment(p[1]))
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", textdiff.Range(start-1, len(ol)), textdiff.Range(start-1, len(nl)))
		for _, l := range ol {
			textdiff.WriteLine(&sb, '-', l)
		}
		for _, l := range nl {
			textdiff.WriteLine(&sb, '+', l)
		}
	}
	return sb.String()
}

// fragment ends an edit's string with a newline: it is a fragment of the
// file, not its end, so its last line gets no "no newline" marker.
func fragment(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
