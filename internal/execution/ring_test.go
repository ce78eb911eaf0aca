package execution

import (
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestRing(t *testing.T) {
	r := newRing(10)
	r.add(Stdout, []byte("aaaa")) // seq 1
	r.add(Stderr, []byte("bbbb")) // seq 2
	r.add(Stdout, []byte("cccc")) // seq 3: drops seq 1
	r.add(Stdout, nil)            // nothing
	evs, done, _ := r.since(0)
	if done || len(evs) != 3 {
		t.Fatalf("since(0) = %+v, done %v", evs, done)
	}
	if g := evs[0]; g.Type != EventDropped || g.Seq != 1 || *g.Gap != (Gap{FromSeq: 1, ToSeq: 1}) {
		t.Fatalf("gap = %+v", g)
	}
	if evs[1].Seq != 2 || string(evs[1].Data) != "bbbb" || evs[1].Offset != 4 || evs[2].Seq != 3 || evs[2].Offset != 8 {
		t.Fatalf("kept = %+v", evs[1:])
	}
	if evs, _, _ := r.since(2); len(evs) != 1 || evs[0].Seq != 3 {
		t.Fatalf("since(2) = %+v", evs)
	}
	// A chunk larger than the buffer keeps its end and drops everything.
	r.add(Stdout, []byte("0123456789abc")) // seq 4
	evs, _, _ = r.since(0)
	if len(evs) != 2 || evs[0].Gap.ToSeq != 3 || string(evs[1].Data) != "3456789abc" || evs[1].Offset != 15 {
		t.Fatalf("after a huge chunk: %+v", evs)
	}
	r.end(ProcessInfo{ID: "p"})
	r.add(Stdout, []byte("late")) // ignored
	evs, done, _ = r.since(4)
	if !done || len(evs) != 1 || evs[0].Type != EventExit || evs[0].Seq != 5 || evs[0].Exit.LastSeq != 5 {
		t.Fatalf("end = %+v, done %v", evs, done)
	}
	if evs, done, _ := r.since(5); !done || len(evs) != 0 {
		t.Fatalf("past the end = %+v, %v", evs, done)
	}
}

func TestCompleteUTF8(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"a\xe2\x82", 1},     // € missing its last byte
		{"a\xe2", 1},         // € missing two
		{"a€", 4},            // complete
		{"\xf0\x9f\x98", 0},  // an emoji missing one byte
		{"a\xff", 2},         // invalid: passed on
		{"a\x82\x82\x82", 4}, // stray continuation bytes: passed on
	}
	for _, tt := range tests {
		if got := completeUTF8([]byte(tt.in)); got != tt.want {
			t.Errorf("completeUTF8(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for _, name := range []string{"SIGTERM", "TERM", "term", "sigkill", "INT"} {
		if _, err := ParseSignal(name); err != nil {
			t.Errorf("ParseSignal(%q): %v", name, err)
		}
	}
	for _, name := range []string{"", "SIG", "15", "SIGFOO"} {
		if _, err := ParseSignal(name); err == nil {
			t.Errorf("ParseSignal(%q) accepted", name)
		}
	}
}

// FuzzCheckFilePath: an accepted path never leaves the workspace.
func FuzzCheckFilePath(f *testing.F) {
	for _, s := range []string{"a", "a/b/c.txt", "../x", "/etc/passwd", "a/../../b", "a//b", "./a", "a/./b", ".", "..", "a\x00b", "a/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if checkFilePath(name) != nil {
			return
		}
		root := "/ws"
		p := filepath.Join(root, filepath.FromSlash(name))
		if p == root || !strings.HasPrefix(p, root+"/") {
			t.Fatalf("accepted %q, which resolves to %q", name, p)
		}
	})
}

// FuzzProcWriter: however output is split into writes, the chunks put
// together equal it and valid UTF-8 is never split.
func FuzzProcWriter(f *testing.F) {
	f.Add([]byte("héllo wörld €𝄞"), uint8(3))
	f.Add([]byte("\xe2\x82\xac\xff\xfe"), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, step uint8) {
		n := int(step%7) + 1
		r := newRing(1 << 20)
		w := &procWriter{r: r, stream: Stdout}
		for i := 0; i < len(data); i += n {
			_, _ = w.Write(data[i:min(i+n, len(data))])
		}
		w.flush()
		evs, _, _ := r.since(0)
		var got []byte
		for _, ev := range evs {
			if utf8.Valid(data) && !utf8.Valid(ev.Data) {
				t.Fatalf("chunk %q of valid input is not valid UTF-8", ev.Data)
			}
			got = append(got, ev.Data...)
		}
		if string(got) != string(data) {
			t.Fatalf("got %q, want %q", got, data)
		}
	})
}
