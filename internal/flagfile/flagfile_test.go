package flagfile

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse("f.yaml", []byte("# c\nlisten: 127.0.0.1:1\n\nn: 3\nd: 1.5\nb: true\nq: \"a,b\"\nblock: |\n  x\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{{"listen", "127.0.0.1:1", 2}, {"n", "3", 4}, {"d", "1.5", 5}, {"b", "true", 6}, {"q", "a,b", 7}, {"block", "x\n", 8}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if got, err := Parse("f.yaml", []byte("")); err != nil || len(got) != 0 {
		t.Errorf("empty file: %v %v", got, err)
	}
	for _, bad := range []string{"a: [1, 2]\n", "a: {b: c}\n", "a:\n", "- a\n", "a: b\n---\nc: d\n", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["} {
		if _, err := Parse("f.yaml", []byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "f.yaml") {
			t.Errorf("Parse(%q) = %v, want an error naming the file", bad, err)
		}
	}
}

// FuzzParse: whatever the file, Parse returns entries with a key and a
// line, or an error naming the file; it never panics.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"listen: x\n", "a: [1]\n", "a: &x 1\nb: *x\n", "!!map {a: b}", "a: |\n  x\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := Parse("f", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, e := range es {
			if e.Key == "" || e.Line < 1 {
				t.Fatalf("entry %+v", e)
			}
		}
	})
}
