package procrt

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestLineReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string // "!N": a skipped line of N bytes
	}{
		{"empty", "", nil},
		{"lines", "a\nbb\n", []string{"a", "bb"}},
		{"crlf", "a\r\nb\r\n", []string{"a", "b"}},
		{"last without newline", "a\nb", []string{"a", "b"}},
		{"at the limit", "12345\n", []string{"12345"}},
		{"over the limit", "123456\nok\n", []string{"!7", "ok"}},
		{"over at the end", "ok\n1234567", []string{"ok", "!7"}},
		// Without its newline, one byte over is over too.
		{"one over at the end", "ok\n123456", []string{"ok", "!6"}},
		{"blank kept", "\n\n", []string{"", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lr := NewLineReader(bytes.NewReader([]byte(tc.in)), 5)
			var got []string
			for {
				line, skipped, err := lr.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if skipped > 0 {
					got = append(got, "!"+string(rune('0'+skipped)))
					continue
				}
				got = append(got, string(line))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
			}
		})
	}
}

// FuzzLineReader: every line returned is within the limit and holds no
// newline, and the lines and skipped sizes account for every byte.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("a\nbb\r\n\n"), 3)
	f.Add(bytes.Repeat([]byte("y"), 70000), 100)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		if max <= 0 || max > 1<<20 {
			return
		}
		lr := NewLineReader(bytes.NewReader(data), max)
		var n int64
		for {
			line, skipped, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(line) > max || bytes.IndexByte(line, '\n') >= 0 {
				t.Fatalf("line %q over %d or with a newline", line, max)
			}
			n += skipped
			if skipped == 0 {
				n += int64(len(line))
			}
		}
		if n > int64(len(data)) {
			t.Fatalf("read %d bytes of %d", n, len(data))
		}
	})
}
