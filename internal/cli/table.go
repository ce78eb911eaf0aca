package cli

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// tableWidth is the width the agents table fits: a 100-column terminal
// shows it without wrapping.
const tableWidth = 100

// fit returns s cut to at most n runes, ending in "…" when cut.
func fit(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// wrap breaks s into lines of at most n runes, at spaces where it can and
// inside a word longer than a line where it must.
func wrap(s string, n int) []string {
	var lines []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			lines = append(lines, string(cur))
			cur = cur[:0]
		}
	}
	for _, w := range strings.Fields(s) {
		word := []rune(w)
		for len(word) > n {
			flush()
			lines = append(lines, string(word[:n]))
			word = word[n:]
		}
		switch {
		case len(cur) == 0:
		case len(cur)+1+len(word) <= n:
			cur = append(cur, ' ')
		default:
			flush()
		}
		cur = append(cur, word...)
	}
	flush()
	return lines
}

// agentRow is one line of the agents table; Reason, when set, goes on the
// lines below it.
type agentRow struct {
	Name, Available, Version, Title, Reason string
}

// writeAgentsTable writes rows in columns no wider than tableWidth: a
// version is cut to a bound, the title to what is left, a name too long
// for its column goes on a line of its own (whole, wrapped if it must),
// and a reason wraps, indented, under its row.
func writeAgentsTable(w io.Writer, rows []agentRow) error {
	const gap = 2
	header := agentRow{Name: "NAME", Available: "AVAILABLE", Version: "VERSION", Title: "TITLE"}
	width := func(bound int, get func(agentRow) string) int {
		n := utf8.RuneCountInString(get(header))
		for _, r := range rows {
			n = max(n, utf8.RuneCountInString(get(r)))
		}
		return min(n, bound)
	}
	nameW := width(24, func(r agentRow) string { return r.Name })
	availW := width(9, func(r agentRow) string { return r.Available })
	verW := width(16, func(r agentRow) string { return r.Version })
	titleW := tableWidth - nameW - availW - verW - 3*gap
	const indent = "    "
	var b strings.Builder
	for i, r := range append([]agentRow{header}, rows...) {
		// A name is what a command takes: never cut. One longer than its
		// column has a line of its own, the row's cells under it.
		name := r.Name
		if utf8.RuneCountInString(name) > nameW {
			for _, l := range wrap(name, tableWidth) {
				b.WriteString(l + "\n")
			}
			name = ""
		}
		line := fmt.Sprintf("%-*s  %-*s  %-*s  %s", nameW, name, availW, fit(r.Available, availW),
			verW, fit(r.Version, verW), fit(r.Title, titleW))
		// fmt pads by runes, so multi-byte text keeps its columns.
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
		if i > 0 && r.Reason != "" {
			for _, l := range wrap(r.Reason, tableWidth-len(indent)) {
				b.WriteString(indent + l + "\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
