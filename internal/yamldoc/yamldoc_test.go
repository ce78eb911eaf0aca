package yamldoc

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

var parseTests = []struct{ name, src, want string }{
	{"empty", "", "null"},
	{"comments only", "# a\n\n  # b\n", "null"},
	{"document start", "---\na: 1\n", `{"a":1}`},
	{"document start and end", "--- # c\na: 1\n...\n# after\n", `{"a":1}`},
	{"block mapping", "a: 1\nb: two\nc:\n  d: x\n", `{"a":1,"b":"two","c":{"d":"x"}}`},
	{"block sequence", "- a\n- b\n-\n- - c\n  - d\n", `["a","b",null,["c","d"]]`},
	{"sequence under key, same indent", "a:\n- b\n- c\nd: e\n", `{"a":["b","c"],"d":"e"}`},
	{"sequence under key, indented", "a:\n  - b\n  - c: 1\n    d: 2\n", `{"a":["b",{"c":1,"d":2}]}`},
	{"mapping in sequence entry", "- a: 1\n  b: 2\n- c: 3\n", `[{"a":1,"b":2},{"c":3}]`},
	{"null value", "a:\nb: ~\nc: null\nd: Null\n", `{"a":null,"b":null,"c":null,"d":null}`},
	{"core schema booleans", "a: true\nb: False\nc: TRUE\n", `{"a":true,"b":false,"c":true}`},
	{"1.1 booleans are strings", "a: yes\nb: no\nc: on\nd: off\ne: y\n", `{"a":"yes","b":"no","c":"on","d":"off","e":"y"}`},
	{"integers", "a: 0\nb: -12\nc: +7\nd: 0x1F\ne: 0o17\nf: 18446744073709551615\n", `{"a":0,"b":-12,"c":7,"d":31,"e":15,"f":18446744073709551615}`},
	{"floats", "a: 1.5\nb: .5\nc: -2.\nd: 1.0e3\ne: 6.02E+23\n", `{"a":1.5,"b":0.5,"c":-2,"d":1000,"e":6.02e23}`},
	{"number-like strings", "a: 1.2.3\nb: 0x\nc: 1e\nd: -x\ne: 12Mi\nf: 1m30s\n", `{"a":"1.2.3","b":"0x","c":"1e","d":"-x","e":"12Mi","f":"1m30s"}`},
	{"plain with colons and hashes", "a: 127.0.0.1:7777\nb: x#y\nc: http://h/p # comment\n", `{"a":"127.0.0.1:7777","b":"x#y","c":"http://h/p"}`},
	{"plain multi-line", "a: one\n  two\n\n  three\nb: x\n", `{"a":"one two\nthree","b":"x"}`},
	{"single-quoted", "a: 'it''s # not: a comment'\nb: ''\n", `{"a":"it's # not: a comment","b":""}`},
	{"double-quoted escapes", `a: "t\tn\n q\" b\\ u\u00e9 U\U0001F600 x\x41 s\ud83d\ude00 \/ \e"` + "\n", `{"a":"t\tn\n q\" b\\ ué U😀 xA s😀 / \u001b"}`},
	{"quoted multi-line", "a: \"x\n  y\n\n  z \\\n  w\"\n", `{"a":"x y\nz w"}`},
	{"quoted strings stay strings", "a: 'true'\nb: \"1\"\nc: '~'\n", `{"a":"true","b":"1","c":"~"}`},
	{"quoted keys", "'a b': 1\n\"c\": 2\n", `{"a b":1,"c":2}`},
	{"plain keys are their text", "1: a\ntrue: b\n0.5: c\n", `{"1":"a","true":"b","0.5":"c"}`},
	{"flow sequence", "a: [1, b, 'c', \"d\", [e], {f: g}, ]\n", `{"a":[1,"b","c","d",["e"],{"f":"g"}]}`},
	{"flow mapping", "a: {b: 1, c: , d: [x], 'e': {}}\n", `{"a":{"b":1,"c":null,"d":["x"],"e":{}}}`},
	{"flow across lines", "a: [x,\n  y, # c\n  z]\n", `{"a":["x","y","z"]}`},
	{"flow with URLs", "a: [http://x/y, 'a:b', c:d]\n", `{"a":["http://x/y","a:b","c:d"]}`},
	{"JSON", `{"version": 1, "env": {"set": {"A": "b"}}, "l": [1.5, true, null, "x"]}`, `{"version":1,"env":{"set":{"A":"b"}},"l":[1.5,true,null,"x"]}`},
	{"JSON without spaces", `{"a":1,"b":[2,3],"c":{"d":"e"}}`, `{"a":1,"b":[2,3],"c":{"d":"e"}}`},
	{"top-level scalar", "hello\n", `"hello"`},
	{"literal block", "a: |\n  x\n   y\n\n  z\nb: 1\n", `{"a":"x\n y\n\nz\n","b":1}`},
	{"literal strip and keep", "a: |-\n  x\n\nb: |+\n  y\n\n\nc: 1\n", `{"a":"x","b":"y\n\n\n","c":1}`},
	{"literal indentation indicator", "a: |2\n    x\n  y\n", `{"a":"  x\ny\n"}`},
	{"folded block", "a: >\n  one\n  two\n\n  three\n    more\n  four\n", `{"a":"one two\nthree\n  more\nfour\n"}`},
	{"empty block scalar", "a: |\nb: 1\n", `{"a":"","b":1}`},
	{"tabs as separation", "a:\tb\nc: [d,\te]\n", `{"a":"b","c":["d","e"]}`},
	{"CRLF", "a: 1\r\nb:\r\n  - c\r\n", `{"a":1,"b":["c"]}`},
	{"BOM", "\uFEFFa: 1\n", `{"a":1}`},
	{"dash continuing a plain scalar", "a: b\n  - c\n", `{"a":"b - c"}`},
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeAny([]byte(tt.src))
			if err != nil {
				t.Fatalf("%q: %v", tt.src, err)
			}
			var want any
			if err := json.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if !sameValue(got, want) {
				js, _ := json.Marshal(got)
				t.Errorf("%q\n got  %s\n want %s", tt.src, js, tt.want)
			}
		})
	}
}

var refusalTests = []struct{ name, src, at, msg string }{
	{"anchor", "a: &x 1\n", "1:4", "YAML anchors (&name) are not accepted"},
	{"alias", "a: 1\nb: *a\n", "2:4", "YAML aliases (*name) are not accepted"},
	{"tag", "a: !!str 1\n", "1:4", "YAML tags (!tag) are not accepted"},
	{"tag on a key", "!k a: 1\n", "1:1", "YAML tags (!tag) are not accepted"},
	{"anchor in a flow", "a: [1, &b 2]\n", "1:8", "YAML anchors"},
	{"merge key", "a: {b: 1}\nc:\n  <<: {d: 2}\n", "3:3", "YAML merge keys (<<) are not accepted"},
	{"directive", "%YAML 1.2\n---\na: 1\n", "1:1", "YAML directives (%) are not accepted"},
	{"second document", "a: 1\n---\nb: 2\n", "2:1", "one YAML document only"},
	{"second document after end", "a: 1\n...\n---\nb: 2\n", "3:1", "one YAML document only"},
	{"complex key", "? a\n: b\n", "1:1", "complex mapping keys (? key)"},
	{"collection as key", "[a]: b\n", "1:1", "complex mapping keys (a collection as a key)"},
	{"collection as a flow key", "{[a]: b}\n", "1:2", "complex mapping keys"},
	{"duplicate key", "a: 1\nb: 2\na: 3\n", "3:1", `key "a" given twice (first at 1:1)`},
	{"duplicate key, quoted", "a: 1\n'a': 2\n", "2:1", `key "a" given twice`},
	{"duplicate key in a flow", "{a: 1, a: 2}", "1:8", `key "a" given twice (first at 1:2)`},
	{"number key not as its value", "0x10: a\n", "1:1", "the key 0x10 reads as an integer 16: quote it"},
	{"empty key", "[:]", "1:2", "a null key (nothing before the colon)"},
	{"null key", "~: 1\n", "1:1", `a null key ("~")`},
	{"tab indentation", "a:\n\tb: 1\n", "2:1", "a tab in indentation"},
	{"tab after spaces", "a:\n  \tb: 1\n", "2:3", "a tab in indentation"},
	{"leading zero", "mode: 0755\n", "1:7", "0755: a number with a leading zero"},
	{"binary", "a: 0b101\n", "1:4", "not a number in YAML 1.2"},
	{"digit separators", "a: 1_000\n", "1:4", "not a number in YAML 1.2"},
	{"base 60", "a: 1:30\n", "1:4", "not a number in YAML 1.2"},
	{"integer out of range", "a: 18446744073709551616\n", "1:4", "integer out of range"},
	{"float out of range", "a: 1.0e999\n", "1:4", "number out of range"},
	{"exponent without a dot", "a: 1e3\n", "1:4", "a string in YAML 1.1"},
	{"infinity", "a: [1, .inf]\n", "1:8", "infinity and NaN are not allowed"},
	{"NaN", "a: .NaN\n", "1:4", "infinity and NaN are not allowed"},
	{"pair in a flow sequence", "[a: b]\n", "1:3", "a key: value pair inside [...]"},
	{"key without value in a flow mapping", "{a, b: c}\n", "1:2", "want key: value"},
	{"control character", "a: \x01\n", "1:4", "control character 0x01"},
	{"C1 control", "a: \u0085\n", "1:4", "control character U+0085"},
	{"not UTF-8", "a: \xff\n", "1:4", "the document is not UTF-8"},
	{"reserved", "a: @x\n", "1:4", `'@' is reserved in YAML`},
	{"comment glued to a value", "a: [b]# c\n", "1:7", "a comment needs a space before its #"},
	{"multi-line key", "'a\n b': 1\n", "1:1", "a mapping key must fit on one line"},
	{"colon on the next line", "a:\n  'b'\n  : c\n", "3:3", "a mapping key must fit on one line, with its colon"},
	{"empty entry before a key at its column", "a:\n- \nb: 1\n", "2:1", "an empty sequence entry followed by a line at its dash's column"},
	{"colon glued to a quoted key", "\"a\":1\n", "1:4", "a space must follow the colon"},
	{"lone surrogate", `a: "\ud800"`, "1:5", `escape \uD800 is not a character`},
	{"unknown escape", `a: "\q"`, "1:5", `unknown escape \q`},
	{"short escape", `a: "\x4"`, "1:5", `escape \x needs 2 hexadecimal digits`},
	{"unterminated quote", "a: 'x\n", "1:4", "a quoted string that does not end"},
	{"unclosed flow", "a: [1, 2\n", "1:4", "[ without its closing ]"},
	{"missing comma", "a: [1 2, {b: c d: e}]\n", "1:17", `unexpected ':'`},
	{"empty flow entry", "[a,,b]\n", "1:4", "an empty entry"},
	{"mapping on a key's line", "a: b: c\n", "1:5", "a mapping cannot start on the line of a key"},
	{"sequence on a key's line", "a: - b\n", "1:4", "a block sequence cannot start on the line of its key"},
	{"text after a flow", "a: [b] c\n", "1:8", `unexpected 'c' after the value`},
	{"bad indentation", "a:\n    b: 1\n  c: 2\n", "3:3", "unexpected"},
	{"entry in a mapping", "a: 1\n- b\n", "2:1", "a sequence entry where a key"},
	{"key in a sequence", "- a\nb: 1\n", "2:1", "the document has ended"},
	{"block scalar in a flow", "[|\n x]\n", "1:2", "a block scalar (|) cannot be inside"},
	{"bad block header", "a: |x\n  b\n", "1:5", "a block scalar's header"},
}

func TestRefusals(t *testing.T) {
	for _, tt := range refusalTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeAny([]byte(tt.src))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%q: %v, want an *Error", tt.src, err)
			}
			if at := fmt.Sprintf("%d:%d", e.Line, e.Column); at != tt.at || !strings.Contains(e.Message, tt.msg) {
				t.Errorf("%q: %v, want %s: ...%s...", tt.src, err, tt.at, tt.msg)
			}
		})
	}
}

// TestCommittedDocuments: every YAML document committed in the repository
// reads as goccy/go-yaml read it.
func TestCommittedDocuments(t *testing.T) {
	for name, src := range committed(t) {
		got, err := decodeAny([]byte(src))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		want, ok := oracle([]byte(src))
		if !ok {
			t.Errorf("%s: goccy refuses it", name)
			continue
		}
		if !sameValue(got, want) {
			t.Errorf("%s:\n got  %#v\n want %#v", name, got, want)
		}
	}
}

func TestPositions(t *testing.T) {
	n, err := Parse([]byte("a:\n  b: [x, 'y']\n  c:\n    - é: z\n"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	b := n.Pairs[0].Value
	x := b.Pairs[0].Value.Items
	c := b.Pairs[1].Value.Items[0]
	got := []int{n.Line, n.Col, b.Line, b.Col, x[0].Line, x[0].Col, x[1].Col, c.Line, c.Col, c.Pairs[0].Value.Col}
	if want := []int{1, 1, 2, 3, 2, 7, 10, 4, 7, 10}; !reflect.DeepEqual(got, want) {
		t.Errorf("positions %v, want %v", got, want)
	}
}

func TestDecode(t *testing.T) {
	type entry struct {
		Name string            `json:"name"`
		Args []string          `json:"args"`
		Env  map[string]string `json:"env"`
		On   bool              `json:"on"`
		N    int               `json:"n"`
	}
	type file struct {
		Entries []entry `json:"entries"`
	}
	var f file
	src := "entries:\n  - name: a\n    args: [--port, 8080, true, 1.5]\n    env: {K: 1}\n    on: true\n    n: 0x10\n"
	if err := Decode([]byte(src), &f, Limits{}); err != nil {
		t.Fatal(err)
	}
	want := file{Entries: []entry{{Name: "a", Args: []string{"--port", "8080", "true", "1.5"}, Env: map[string]string{"K": "1"}, On: true, N: 16}}}
	if !reflect.DeepEqual(f, want) {
		t.Errorf("Decode = %+v, want %+v", f, want)
	}
	for _, tt := range []struct{ src, want string }{
		{"entries:\n  - name: a\n    nam: b\n", `3:5: unknown field "nam" (known: name, args, env, on, n)`},
		{"Entries: []\n", `1:1: unknown field "Entries" (known: entries)`},
		{"entries:\n  - on: 'yes'\n", "2:9: entries[0].on: want bool, not a string"},
		{"entries:\n  - n: [1]\n", "2:8: entries[0].n: want int, not a sequence"},
		{"entries:\n  - n: 1.5\n", "2:8: entries[0].n: want int, not a number"},
		{"entries: {a: 1}\n", "1:10: entries: want []yamldoc.entry, not a mapping"},
		{"entries:\n  - env: {A: [x]}\n", "2:14: entries[0].env.A: want string, not a sequence"},
	} {
		var f file
		if err := Decode([]byte(tt.src), &f, Limits{}); err == nil || err.Error() != tt.want {
			t.Errorf("Decode(%q) = %v, want %s", tt.src, err, tt.want)
		}
	}
	// An empty document leaves the value as it is.
	f = file{Entries: []entry{{Name: "kept"}}}
	if err := Decode([]byte("# nothing\n"), &f, Limits{}); err != nil || f.Entries[0].Name != "kept" {
		t.Errorf("empty document: %v %+v", err, f)
	}
}
