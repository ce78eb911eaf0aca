package yamldoc

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/yamldoc/yamldoctest"
)

// small are the limits the bound tests hold documents to.
var small = Limits{Bytes: 1 << 20, Depth: 16, Nodes: 1 << 10, KeyBytes: 64}

// measure counts the nodes of a parsed tree and its depth in collections.
func measure(n *Node) (nodes, depth int) {
	if n == nil {
		return 0, 0
	}
	nodes = 1
	var kids []*Node
	for _, kv := range n.Pairs {
		nodes++ // the key
		if len(kv.Key.Text) > small.KeyBytes {
			return 1 << 30, 0
		}
		kids = append(kids, kv.Value)
	}
	kids = append(kids, n.Items...)
	for _, k := range kids {
		kn, kd := measure(k)
		nodes += kn
		depth = max(depth, kd)
	}
	if n.Kind != Scalar {
		depth++
	}
	return nodes, depth
}

// FuzzParse: whatever the input, Parse refuses it with an *Error at a
// place in the text, or returns a tree within the limits (nodes, depth,
// key length); and what it accepts, Marshal writes and Decode reads back
// to the same value.
func FuzzParse(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add([]byte(s))
	}
	for _, b := range yamldoctest.PolicyBombs() {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := Parse(data, small)
		if err != nil {
			var e *Error
			lines := strings.Count(string(data), "\n") + strings.Count(string(data), "\r") + 1
			if !errors.As(err, &e) || e.Line < 1 || e.Column < 1 || e.Line > lines || e.Message == "" {
				t.Fatalf("%q: error %#v", data, err)
			}
			return
		}
		if nodes, depth := measure(n); nodes > small.Nodes || depth > small.Depth {
			t.Fatalf("%q: %d nodes, depth %d: over the limits", data, nodes, depth)
		}
		v, err := Value(n)
		if err != nil {
			return // infinity or NaN, which have no JSON form
		}
		out, err := Marshal(v)
		if err != nil {
			t.Fatalf("%q: Marshal: %v", data, err)
		}
		var back any
		if err := Decode(out, &back, Limits{}); err != nil {
			t.Fatalf("%q: Marshal wrote\n%s\nwhich Decode refuses: %v", data, out, err)
		}
		if !sameValue(v, back) {
			t.Fatalf("%q: Marshal wrote\n%s\nwhich reads %#v, not %#v", data, out, back, v)
		}
	})
}

// TestBombs: each bomb is refused at a place, allocating next to nothing.
func TestBombs(t *testing.T) {
	l := Limits{Bytes: 1 << 20, Depth: 32, Nodes: 1 << 14, KeyBytes: 1 << 10} // a policy's
	docs := map[string][]byte{}
	for name, b := range yamldoctest.PolicyBombs() {
		docs[name] = []byte(b)
	}
	errs := make(map[string]error, len(docs))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for name, b := range docs {
		_, errs[name] = Parse(b, l)
	}
	runtime.ReadMemStats(&after)
	for name, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.Line == 0 || !strings.Contains(e.Message, "more than") && !yamldoctest.Invalid[name] {
			t.Errorf("%s: %v", name, err)
		}
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("refusing the bombs allocated %d KiB", grew>>10)
	}
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name, src string
		l         Limits
		msg       string
	}{
		{"bytes", "a: 1\n", Limits{Bytes: 4}, "the document is 5 bytes; the limit is 4"},
		{"flow depth", "[[[1]]]", Limits{Depth: 2}, "collections are nested more than 2 levels deep"},
		{"block depth", "a:\n  b:\n    c: 1\n", Limits{Depth: 2}, "collections are nested more than 2 levels deep"},
		{"nodes", "[1, 2, 3, 4]", Limits{Nodes: 4}, "the document has more than 4 values"},
		{"key", "abcdef: 1\n", Limits{KeyBytes: 5}, "a key of more than 5 bytes"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.src), tt.l)
		if err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.msg)
		}
	}
	// At the limits, the same documents parse.
	for _, tt := range []struct {
		src string
		l   Limits
	}{{"a: 1\n", Limits{Bytes: 5}}, {"[[1]]", Limits{Depth: 2}}, {"[1, 2, 3]", Limits{Nodes: 4}}, {"abcde: 1", Limits{KeyBytes: 5}}} {
		if _, err := Parse([]byte(tt.src), tt.l); err != nil {
			t.Errorf("%q within %+v: %v", tt.src, tt.l, err)
		}
	}
}

// BenchmarkParse parses a megabyte-sized document: the time per byte
// stays flat as documents grow (the parser is linear).
func BenchmarkParse(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 14} {
		var doc strings.Builder
		for i := range size {
			doc.WriteString("k" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + "_" + itoa(i) + ": {a: [1, 'two', \"three\"], b: {c: d}}\n")
		}
		data := []byte(doc.String())
		b.Run(itoa(len(data)), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse(data, Limits{Bytes: 1 << 24, Nodes: 1 << 20}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
