package textdiff

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestUnified(t *testing.T) {
	cases := []struct {
		name, old, new string
		created        bool
		want           string
	}{
		{"unchanged", "a\n", "a\n", false, ""},
		{"unchanged empty", "", "", false, ""},
		{"new file", "", "x\ny\n", true, "--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+x\n+y\n"},
		{"new one-line file", "", "hi\n", true, "--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+hi\n"},
		{"new file without final newline", "", "hi", true, "--- /dev/null\n+++ b/f\n@@ -0,0 +1 @@\n+hi\n\\ No newline at end of file\n"},
		{"new empty file", "", "", true, "--- /dev/null\n+++ b/f\n"},
		{"emptied", "x\n", "", false, "--- a/f\n+++ b/f\n@@ -1 +0,0 @@\n-x\n"},
		{"deleted all", "x\ny\n", "", false, "--- a/f\n+++ b/f\n@@ -1,2 +0,0 @@\n-x\n-y\n"},
		{"one line", "a\nb\nc\n", "a\nB\nc\n", false, "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"},
		{"final newline added", "a\nb", "a\nb\n", false, "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"},
		{"final newline removed", "a\nb\n", "a\nb", false, "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n+b\n\\ No newline at end of file\n"},
		{"insert at top", "b\nc\n", "a\nb\nc\n", false, "--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n+a\n b\n c\n"},
		{"append", "a\n", "a\nb\n", false, "--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n a\n+b\n"},
		{"swap removes first, as diff does", "x\ny\n", "y\nx\n", false, "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-x\n y\n+x\n"},
		{"middle", numbered(1, 9), strings.Replace(numbered(1, 9), "5\n", "FIVE\n", 1), false,
			"--- a/f\n+++ b/f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+FIVE\n 6\n 7\n 8\n"},
		{"two hunks", numbered(1, 20), replace(numbered(1, 20), "2\n", "two\n", "18\n", "eighteen\n"), false,
			"--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -15,6 +15,6 @@\n 15\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"},
		{"hunks 7 lines apart stay apart", numbered(1, 20), replace(numbered(1, 20), "2\n", "two\n", "10\n", "ten\n"), false,
			"--- a/f\n+++ b/f\n@@ -1,5 +1,5 @@\n 1\n-2\n+two\n 3\n 4\n 5\n@@ -7,7 +7,7 @@\n 7\n 8\n 9\n-10\n+ten\n 11\n 12\n 13\n"},
		{"hunks 6 lines apart merge", numbered(1, 12), replace(numbered(1, 12), "2\n", "two\n", "9\n", "nine\n"), false,
			"--- a/f\n+++ b/f\n@@ -1,12 +1,12 @@\n 1\n-2\n+two\n 3\n 4\n 5\n 6\n 7\n 8\n-9\n+nine\n 10\n 11\n 12\n"},
		{"first and last lines", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\n", "A\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nL\n", false,
			"--- a/f\n+++ b/f\n@@ -1,4 +1,4 @@\n-a\n+A\n b\n c\n d\n@@ -9,4 +9,4 @@\n i\n j\n k\n-l\n+L\n"},
		{"shifted hunks", numbered(1, 12), numbered(0, 11), false,
			"--- a/f\n+++ b/f\n@@ -1,3 +1,4 @@\n+0\n 1\n 2\n 3\n@@ -9,4 +10,3 @@\n 9\n 10\n 11\n-12\n"},
	}
	diff, _ := exec.LookPath("diff")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Unified("f", c.old, c.new, c.created)
			if got != c.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, c.want)
			}
			if diff != "" && c.old != c.new {
				// The same as diff -u says, where it is installed.
				if du := diffU(t, diff, c.old, c.new, c.created); du != c.want {
					t.Errorf("diff -u says:\n%s\nwant:\n%s", du, c.want)
				}
			}
		})
	}
}

// diffU runs diff -u on old and new with Unified's headers.
func diffU(t *testing.T, diff, old, new string, created bool) string {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for p, s := range map[string]string{a: old, b: new} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	label := "a/f"
	if created {
		label = "/dev/null"
	}
	out, err := exec.CommandContext(t.Context(), diff, "-u", "--label", label, "--label", "b/f", a, b).Output()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) { // 1: the files differ
		t.Fatalf("diff -u: %v", err)
	}
	return string(out)
}

func TestRange(t *testing.T) {
	for _, c := range []struct {
		before, n int
		want      string
	}{
		{0, 0, "0,0"}, {-1, 0, "0,0"}, {4, 0, "4,0"}, {0, 1, "1"}, {4, 1, "5"}, {0, 3, "1,3"}, {9, 2, "10,2"},
	} {
		if got := Range(c.before, c.n); got != c.want {
			t.Errorf("Range(%d, %d) = %q, want %q", c.before, c.n, got, c.want)
		}
	}
}

func TestLines(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil}, {"\n", []string{"\n"}}, {"a", []string{"a"}}, {"a\nb", []string{"a\n", "b"}}, {"a\n\nb\n", []string{"a\n", "\n", "b\n"}},
	} {
		if got := Lines(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Lines(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestUnifiedApplies checks that each diff between pairs of texts turns
// the old text into the new one.
func TestUnifiedApplies(t *testing.T) {
	texts := []string{
		"", "a\n", "a", "\n", "a\nb\nc\n", "c\nb\na\n", numbered(1, 30), numbered(5, 40),
		"x\n" + numbered(1, 30) + "y", numbered(1, 10) + numbered(1, 10), replace(numbered(1, 30), "7\n", "", "20\n", "x\ny\n"),
	}
	for i, old := range texts {
		for j, new := range texts {
			for _, created := range []bool{false, old == ""} {
				d := Unified("f", old, new, created)
				if err := checkApplies(old, new, created, d); err != nil {
					t.Errorf("texts %d→%d (created %v): %v\ndiff:\n%s", i, j, created, err, d)
				}
			}
		}
	}
}

// TestUnifiedLarge checks that a change too large for the table is still a
// correct diff.
func TestUnifiedLarge(t *testing.T) {
	old, new := numbered(1, 2500), numbered(2, 2501)
	old, new = "head\n"+old+"tail\n", "head\n"+new+"tail\n"
	d := Unified("f", old, new, false)
	if err := checkApplies(old, new, false, d); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d, "--- a/f\n+++ b/f\n@@ -1,2502 +1,2502 @@\n head\n-1\n-2\n") {
		t.Errorf("want one hunk replacing the middle whole, got:\n%.200s", d)
	}
}

func FuzzUnified(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nB\nc\n", false)
	f.Add("", "x", true)
	f.Add("x\ny", "y\nx\n", false)
	f.Add(numbered(1, 20), replace(numbered(1, 20), "2\n", "two\n", "18\n", "eighteen\n"), false)
	f.Fuzz(func(t *testing.T, old, new string, created bool) {
		if created {
			old = ""
		}
		d := Unified("f", old, new, created)
		if err := checkApplies(old, new, created, d); err != nil {
			t.Fatalf("%v\nold %q\nnew %q\ndiff:\n%s", err, old, new, d)
		}
	})
}

// checkApplies applies diff to old strictly (the headers, each hunk's
// position and counts, context and removed lines must all match) and checks
// that it gives new.
func checkApplies(old, new string, created bool, diff string) error {
	if diff == "" {
		if old != new || created {
			return errors.New("empty diff for a change")
		}
		return nil
	}
	want := "--- a/f\n+++ b/f\n"
	if created {
		want = "--- /dev/null\n+++ b/f\n"
	}
	rest, ok := strings.CutPrefix(diff, want)
	if !ok {
		return fmt.Errorf("headers: want %q", want)
	}
	src, dl := Lines(old), Lines(rest)
	var out []string
	pos := 0
	for i := 0; i < len(dl); {
		var oldStart, oldN, newStart, newN int
		if err := parseHeader(dl[i], &oldStart, &oldN, &newStart, &newN); err != nil {
			return fmt.Errorf("line %d: %w", i, err)
		}
		if oldN > 0 {
			oldStart-- // 1-based, except for an empty range
		}
		if oldStart < pos || oldStart > len(src) {
			return fmt.Errorf("line %d: hunk at %d, after line %d of %d", i, oldStart, pos, len(src))
		}
		if newStart-boolInt(newN > 0) != len(out)+oldStart-pos {
			return fmt.Errorf("line %d: new side starts at %d, want %d", i, newStart, len(out)+oldStart-pos+1)
		}
		out = append(out, src[pos:oldStart]...)
		pos = oldStart
		gotOld, gotNew := 0, 0
		for i++; i < len(dl) && !strings.HasPrefix(dl[i], "@@"); i++ {
			l := dl[i]
			body := l[1:]
			if i+1 < len(dl) && dl[i+1] == "\\ No newline at end of file\n" {
				body = strings.TrimSuffix(body, "\n")
				i++
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(src) || src[pos] != body {
					return fmt.Errorf("line %d: %q is not line %d of the old text", i, l, pos+1)
				}
				if l[0] == ' ' {
					out = append(out, body)
					gotNew++
				}
				pos++
				gotOld++
			case '+':
				out = append(out, body)
				gotNew++
			default:
				return fmt.Errorf("line %d: bad line %q", i, l)
			}
		}
		if gotOld != oldN || gotNew != newN {
			return fmt.Errorf("hunk counts -%d +%d, lines -%d +%d", oldN, newN, gotOld, gotNew)
		}
	}
	out = append(out, src[pos:]...)
	if got := strings.Join(out, ""); got != new {
		return fmt.Errorf("applied, it gives %q, want %q", got, new)
	}
	return nil
}

// parseHeader reads "@@ -l[,n] +l[,n] @@\n".
func parseHeader(h string, oldStart, oldN, newStart, newN *int) error {
	body, okPrefix := strings.CutPrefix(h, "@@ -")
	body, okSuffix := strings.CutSuffix(body, " @@\n")
	if !okPrefix || !okSuffix {
		return fmt.Errorf("want a hunk header, got %q", h)
	}
	o, n, ok := strings.Cut(body, " +")
	if !ok {
		return fmt.Errorf("bad hunk header %q", h)
	}
	if err := parseRange(o, oldStart, oldN); err != nil {
		return fmt.Errorf("hunk header %q: %w", h, err)
	}
	if err := parseRange(n, newStart, newN); err != nil {
		return fmt.Errorf("hunk header %q: %w", h, err)
	}
	return nil
}

func parseRange(s string, start, n *int) error {
	l, c, found := strings.Cut(s, ",")
	var err error
	if *start, err = strconv.Atoi(l); err != nil {
		return err
	}
	*n = 1
	if found {
		if *n, err = strconv.Atoi(c); err != nil {
			return err
		}
		if *n == 1 {
			return errors.New(`",1" where diff -u leaves it out`)
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// numbered returns the lines "from\n" to "to\n".
func numbered(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

// replace replaces the first match of each old, new pair in s.
func replace(s string, pairs ...string) string {
	for i := 0; i+1 < len(pairs); i += 2 {
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}
