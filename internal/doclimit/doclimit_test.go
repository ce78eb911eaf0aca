package doclimit

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/agentbox/agentbox/internal/doclimit/doclimittest"
)

// Bombs: the policy-sized ones every bounded parser is tested with, and
// more, up to the default size limit, whose parse takes gigabytes or
// minutes (go-yaml's cost grows with the square of the nesting depth;
// 16 000 dashes in a flow sequence took 1.4 GiB and 14 s).
func bombs() map[string]string {
	const n = 200_000
	var staircase, keys strings.Builder
	for i := range 1400 {
		staircase.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	keys.WriteString("{")
	for i := range 70_000 {
		keys.WriteString("k" + strconv.Itoa(i) + ": 1, ")
	}
	keys.WriteString("}")
	all := doclimittest.PolicyBombs()
	maps.Copy(all, map[string]string{
		"dashes in a sequence": "[" + strings.Repeat("- ", n/2) + "x]",
		"dashes in a mapping":  "{a: " + strings.Repeat("- ", n/2) + "x}",
		"dash and bracket":     strings.Repeat("- [ ", n/4),
		"block staircase":      staircase.String(),
		"many keys":            keys.String(),
		"many entries":         "[" + strings.Repeat("[],", n/3) + "]",
		"long key, many items": "{" + strings.Repeat("k", n/2) + ": [" + strings.Repeat("a,", n/4) + "]}",
		"long key, some items": "{" + strings.Repeat("k", 900_000) + ": [" + strings.Repeat("a,", 8000) + "]}",
		"long block key":       strings.Repeat("k", 900_000) + ":\n" + strings.Repeat("- a\n", 8000),
		"long keys, nested":    strings.Repeat("{"+strings.Repeat("k", 10_000)+": ", 30) + "[" + strings.Repeat("a,", 8000) + "]",
		"after a policy":       "version: 1\nnetwork:\n  allow: " + strings.Repeat("[", n),
		"after a comment":      "# [\nversion: 1\nx: " + strings.Repeat("[", n),
		"after a quote":        "a: 'it''s'\nb: \"\\\"[\"\nc: " + strings.Repeat("{", n),
		"too big":              strings.Repeat("#", Default.Bytes+1),
		"aliases":              "a: &a [x, x]\nb: [*a, *a]\n",
	})
	return all
}

func TestCheckRefusesBombs(t *testing.T) {
	t.Parallel()
	for name, doc := range bombs() {
		err := Check([]byte(doc), Default)
		var e *Error
		if !errors.As(err, &e) || e.Line < 1 || e.Column < 1 || e.Message == "" {
			t.Errorf("%s: Check = %v, want an *Error with a place", name, err)
		}
	}
}

// TestCheckMemory runs Check over every bomb and measures that it
// allocates next to nothing: the scan holds no more than a column set and
// a stack bounded by the depth limit.
func TestCheckMemory(t *testing.T) {
	var docs [][]byte
	for _, doc := range bombs() {
		docs = append(docs, []byte(doc))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, doc := range docs {
		_ = Check(doc, Default)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("Check allocated %d bytes over %d bombs", grew, len(docs))
	}
}

// TestCheckAccepts keeps every document agentbox ships or documents
// within the limits, and a few that come near them.
func TestCheckAccepts(t *testing.T) {
	t.Parallel()
	var files []string
	for _, glob := range []string{
		"../sandbox/policy/presets/*.yaml", "../sandbox/policy/testdata/*.yaml", "../sandbox/policy/testdata/*.json",
		"../daemon/default-global-policy.yaml", "../sandbox/policy/policy.v1.json", "../../api/openapi.json", "../../event/schema/event.v1.json",
	} {
		m, err := filepath.Glob(glob)
		if err != nil || len(m) == 0 {
			t.Fatalf("%s: %v %v", glob, m, err)
		}
		files = append(files, m...)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(b, Default); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	var allow strings.Builder
	allow.WriteString("version: 1\nnetwork:\n  allow:\n")
	for i := range 1024 {
		allow.WriteString("    - host" + strconv.Itoa(i) + ".example.com:443 # comment [\n")
	}
	deep := strings.Repeat("[", Default.Depth) + strings.Repeat("]", Default.Depth)
	for name, doc := range map[string]string{
		"1024 rules":                 allow.String(),
		"brackets in strings":        `{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "b": ['{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{']}`,
		"brackets in plain scalars":  "a: x[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n",
		"brackets in comments":       strings.Repeat("# [[[[[[[[[[\n", 100),
		"brackets in block scalars":  "a: |\n  " + strings.Repeat("[[[[[[[[[[", 20) + "\n  more\nb: 1\n",
		"as deep as allowed":         deep,
		"dashes in a quoted string":  `a: "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - x"`,
		"pretty JSON":                "{\n  \"a\": {\n    \"b\": [\n      1,\n      2\n    ]\n  }\n}\n",
		"multi-line quoted string":   "a: \"x\n  [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n  y\"\nb: 1\n",
		"multi-line plain scalar":    "a: x\n  [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n",
		"anchors without aliases":    "a: &x 1\nb: &y [1]\n",
		"asterisks in plain scalars": "a: x*y\nb: '*z'\n",
	} {
		if err := Check([]byte(doc), Default); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := Check([]byte("["+deep+"]"), Default); err == nil {
		t.Errorf("one level deeper than the limit is accepted")
	}
}

func TestCheckPlaces(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc  string
		l    Limits
		want string
	}{
		{"a:\n  b: [[[x]]]\n", Limits{Depth: 2}, "2:8: collections are nested more than 2 levels deep"},
		{"a:\n b:\n  c:\n", Limits{Depth: 2}, "3:3: block collections are nested more than 2 levels deep (keys and entries start at 3 different columns)"},
		{"- - x\n", Limits{Depth: 1}, "1:3: block collections are nested more than 1 levels deep (keys and entries start at 2 different columns)"},
		{"[a, b, c]", Limits{Tokens: 4}, "1:6: the document has more than 4 tokens (scalars, brackets, commas, colons, dashes, ...)"},
		{"x: *a", Limits{}, "1:4: YAML aliases (*name) are not accepted"},
		{"abc", Limits{Bytes: 2}, "1:1: the document is 3 bytes; the limit is 2"},
	}
	for _, tt := range tests {
		err := Check([]byte(tt.doc), tt.l)
		if err == nil || err.Error() != tt.want {
			t.Errorf("Check(%q) = %v, want %s", tt.doc, err, tt.want)
		}
	}
}

// BenchmarkCheckBomb is how long refusing the 200 KB bracket bomb takes.
func BenchmarkCheckBomb(b *testing.B) {
	doc := []byte(strings.Repeat("[", 200_000))
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if Check(doc, Default) == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkCheckPolicy is the cost Check adds to a real policy's parse.
func BenchmarkCheckPolicy(b *testing.B) {
	doc, err := os.ReadFile("../sandbox/policy/testdata/full.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if err := Check(doc, Default); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzCheck holds the scan to the parser it protects: whatever Check
// accepts, go-yaml's tokenizer finds no deeper flow nesting, no more block
// columns and no more tokens than the limits, and its parser builds no
// deeper tree than they allow.
func FuzzCheck(f *testing.F) {
	for _, doc := range bombs() {
		if len(doc) > 4096 {
			doc = doc[:4096]
		}
		f.Add([]byte(doc))
	}
	for _, seed := range []string{
		"version: 1\nnetwork: {allow: [a.com, '*.b.com:443'], default: deny}\n",
		"a: 'x\n  [[[[ y'\nb: [\"]]]]\", [[]]]\n",
		"a: foo\n  'x\n  k: [[[[\n  y'\n",
		"a: |\n    [[[[\n  [[[[\nb: [[[[]]]]\n",
		"{a]: [[[[[[[[]]]]]]]]}",
		"[- - - - - - - - - - - x]",
		"- - - - - - - - - - - x\n",
		"? ? ? ? ? ? ? ? ? x",
		"a: &x [[[[[[[ ]]]]]]]\n",
		"%YAML 1.2\n---\na: [[[[[[[[[[]]]]]]]]]]\n...\n",
		"a: \"\\\"\" [[[[[[[[[[[[[]]]]]]]]]]]]]\n",
		"'a\n' [[[[[[[[[[[[[[[\n",
		"!t [[[[[[[[[[[[[[[[[\n",
		"a:\n- b:\n  - c:\n    - d:\n      - e:\n        - f: g\n",
		"k: v # [[[[[[[[\n",
		"k: v#[[[[[[[[[[[\n",
		"a: |2\n    [[[[\n  [[[[\nb: >-\n  [[[\n---\n[[[[\n",
		"a: x\n  - [[[[\n  - [[[[\nb: [[[[\n",
		"a: \"x\n[[[[\" [[[[\n",
		"- !t - !t - !t - x\n",
		"- &a - &b - &c - x\n",
		"{? [a]: b, c: [d: [e: [f]]]}\n",
		"a:\t[[[[\n\tb: [[[[\n",
		"<<: {a: [[[[]]]]}\n",
	} {
		f.Add([]byte(seed))
	}
	l := Limits{Bytes: 1 << 16, Depth: 8, Tokens: 256, Paths: 4096}
	f.Fuzz(func(t *testing.T, data []byte) {
		if Check(data, l) != nil {
			return
		}
		tokens := lexer.Tokenize(string(data))
		if tokens.InvalidToken() != nil {
			return // the parser refuses it before building anything
		}
		if len(tokens) > 2*l.Tokens {
			t.Fatalf("Check accepted %d tokens (limit %d):\n%q", len(tokens), l.Tokens, data)
		}
		if d := flowDepth(tokens); d > l.Depth {
			t.Fatalf("Check accepted flow nesting %d (limit %d):\n%q", d, l.Depth, data)
		}
		if n := blockColumns(tokens); n > l.Depth {
			t.Fatalf("Check accepted %d block columns (limit %d):\n%q", n, l.Depth, data)
		}
		file, err := parser.Parse(tokens, 0)
		if err != nil {
			return
		}
		paths := 0
		for _, doc := range file.Docs {
			if doc == nil || doc.Body == nil {
				continue
			}
			if d := treeDepth(doc.Body); d > 3*l.Depth {
				t.Fatalf("Check accepted a tree %d deep (limit %d):\n%q", d, l.Depth, data)
			}
			ast.Walk(pathSum{&paths}, doc.Body)
		}
		if paths > l.Paths {
			t.Fatalf("Check accepted paths of %d bytes (limit %d):\n%q", paths, l.Paths, data)
		}
	})
}

// flowDepth is the deepest nesting of flow collections in the token
// stream, counting each sequence entry or key indicator inside one.
func flowDepth(tokens token.Tokens) int {
	var stack []int
	depth, entries, deepest := 0, 0, 0
	for _, tk := range tokens {
		switch tk.Type {
		case token.SequenceStartType, token.MappingStartType:
			stack = append(stack, entries)
			depth += 1 + entries
			entries = 0
		case token.SequenceEndType, token.MappingEndType:
			if n := len(stack); n > 0 {
				entries = stack[n-1]
				stack = stack[:n-1]
				depth -= 1 + entries
			}
		case token.CollectEntryType:
			entries = 0
		case token.SequenceEntryType, token.MappingKeyType:
			if len(stack) > 0 {
				entries++
			}
		}
		deepest = max(deepest, depth+entries)
	}
	return deepest
}

// blockColumns counts the distinct columns of block entries, key
// indicators and keys outside flow collections (as the tokenizer counts
// them: a sequence or a mapping is open while its own counter is
// positive).
func blockColumns(tokens token.Tokens) int {
	cols := map[int]bool{}
	seqs, maps := 0, 0
	for i, tk := range tokens {
		switch tk.Type {
		case token.SequenceStartType:
			seqs++
		case token.MappingStartType:
			maps++
		case token.SequenceEndType:
			seqs--
		case token.MappingEndType:
			maps--
		}
		if seqs > 0 || maps > 0 {
			continue
		}
		switch tk.Type {
		case token.SequenceEntryType, token.MappingKeyType:
			cols[tk.Position.Column] = true
		case token.MappingValueType:
			if i > 0 && scalar(tokens[i-1]) {
				cols[tokens[i-1].Position.Column] = true
			}
		}
	}
	return len(cols)
}

// scalar reports a token that can be a mapping key.
func scalar(tk *token.Token) bool {
	switch tk.Type {
	case token.SequenceEntryType, token.MappingKeyType, token.MappingValueType, token.MergeKeyType,
		token.CollectEntryType, token.SequenceStartType, token.SequenceEndType, token.MappingStartType,
		token.MappingEndType, token.CommentType, token.AnchorType, token.AliasType, token.TagType,
		token.LiteralType, token.FoldedType, token.DirectiveType, token.DocumentHeaderType, token.DocumentEndType:
		return false
	}
	return true
}

// pathSum adds up the lengths of the paths go-yaml gives each node.
type pathSum struct{ n *int }

func (p pathSum) Visit(n ast.Node) ast.Visitor {
	*p.n += len(n.GetPath())
	return p
}

// treeDepth is the number of nested collections in n.
func treeDepth(n ast.Node) int {
	switch n := n.(type) {
	case *ast.MappingNode:
		d := 0
		for _, v := range n.Values {
			d = max(d, treeDepth(v))
		}
		return 1 + d
	case *ast.MappingValueNode:
		return 1 + max(treeDepth(n.Key), treeDepth(n.Value))
	case *ast.SequenceNode:
		d := 0
		for _, v := range n.Values {
			d = max(d, treeDepth(v))
		}
		return 1 + d
	case *ast.MappingKeyNode:
		return treeDepth(n.Value)
	case *ast.TagNode:
		return treeDepth(n.Value)
	case *ast.AnchorNode:
		return treeDepth(n.Value)
	}
	return 0
}
