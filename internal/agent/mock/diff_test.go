package mock

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

func TestUnifiedDiff(t *testing.T) {
	cases := []struct {
		name, old, new string
		created        bool
		want           string
	}{
		{"unchanged", "a\n", "a\n", false, ""},
		{"new file", "", "x\ny\n", true, "--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n"},
		{"new empty file", "", "", true, "--- /dev/null\n+++ b/f\n"},
		{"emptied", "x\n", "", false, "--- a/f\n+++ b/f\n@@ -1 +0,0 @@\n-x\n"},
		{"one line", "a\nb\nc\n", "a\nB\nc\n", false, "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"no final newline", "a\nb", "a\nb\n", false, "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"},
		{"insert at top", "b\nc\n", "a\nb\nc\n", false, "--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n+a\n b\n c\n"},
		{
			"two hunks", lines(1, 20), strings.Replace(strings.Replace(lines(1, 20), "2\n", "two\n", 1), "18\n", "eighteen\n", 1), false,
			"--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n",
		},
		{
			"merged hunks", lines(1, 12), strings.Replace(strings.Replace(lines(1, 12), "2\n", "two\n", 1), "9\n", "nine\n", 1), false,
			"--- a/f\n+++ b/f\n@@ -1,12 +1,12 @@\n 1\n-2\n+two\n 3\n 4\n 5\n 6\n 7\n 8\n-9\n+nine\n 10\n 11\n 12\n",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := unifiedDiff("f", c.old, c.new, c.created)
			if got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
		})
	}
}

// TestUnifiedDiffApplies checks that applying each diff between pairs of
// texts to the old text gives the new one.
func TestUnifiedDiffApplies(t *testing.T) {
	texts := []string{"", "a\n", "a", "a\nb\nc\n", "c\nb\na\n", lines(1, 30), lines(5, 40), "x\n" + lines(1, 30) + "y", lines(1, 10) + lines(1, 10)}
	for i, old := range texts {
		for j, new := range texts {
			d := unifiedDiff("f", old, new, false)
			got, err := applyDiff(old, d)
			if err != nil || got != new {
				t.Errorf("texts %d→%d: apply = %q, %v; want %q\ndiff:\n%s", i, j, got, err, new, d)
			}
		}
	}
}

func lines(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// applyDiff applies a unified diff strictly: context and removed lines must
// match exactly.
func applyDiff(old, diff string) (string, error) {
	if diff == "" {
		return old, nil
	}
	src := splitLines(old)
	var out []string
	pos := 0
	dl := strings.SplitAfter(diff, "\n")
	for i := 2; i < len(dl) && dl[i] != ""; i++ {
		h := dl[i]
		if !strings.HasPrefix(h, "@@ -") {
			return "", fmt.Errorf("line %d: want a hunk header, got %q", i, h)
		}
		start, _, _ := strings.Cut(strings.TrimPrefix(h, "@@ -"), " ")
		first, count, found := strings.Cut(start, ",")
		n, _ := strconv.Atoi(first)
		if !found || count != "0" {
			n-- // 1-based, except for an empty range
		}
		out = append(out, src[pos:n]...)
		pos = n
		for i+1 < len(dl) && dl[i+1] != "" && !strings.HasPrefix(dl[i+1], "@@") {
			i++
			l := dl[i]
			body := l[1:]
			if i+1 < len(dl) && strings.HasPrefix(dl[i+1], `\ No newline`) {
				body = strings.TrimSuffix(body, "\n")
				i++
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(src) || src[pos] != body {
					return "", fmt.Errorf("line %d: %q does not match %q", i, l, src[min(pos, len(src)-1)])
				}
				if l[0] == ' ' {
					out = append(out, body)
				}
				pos++
			case '+':
				out = append(out, body)
			default:
				return "", fmt.Errorf("line %d: bad line %q", i, l)
			}
		}
	}
	out = append(out, src[pos:]...)
	return strings.Join(out, ""), nil
}
