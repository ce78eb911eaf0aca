package typescript

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestTypeOf translates each JSON Schema construct the documents use, and
// refuses one it does not know rather than typing it unknown.
func TestTypeOf(t *testing.T) {
	w := refResolver("#/$defs/", map[string]any{"Item": map[string]any{}})
	cases := []struct {
		name, schema, want, err string
	}{
		{name: "string", schema: `{"type":"string","maxLength":3}`, want: "string"},
		{name: "integer", schema: `{"type":"integer","format":"int64"}`, want: "number"},
		{name: "enum", schema: `{"type":"string","enum":["a","b"]}`, want: `"a" | "b"`},
		{name: "const", schema: `{"type":"integer","const":1}`, want: "1"},
		{name: "nullable array", schema: `{"type":["array","null"],"items":{"$ref":"#/$defs/Item"}}`, want: "Item[] | null"},
		{name: "array of union", schema: `{"type":"array","items":{"enum":["x","y"]}}`, want: `("x" | "y")[]`},
		{name: "map", schema: `{"type":"object","additionalProperties":{"type":"string"}}`, want: "Record<string, string>"},
		{name: "any", schema: `{}`, want: "unknown"},
		{name: "object", schema: `{"type":"object","properties":{"b":{"type":"boolean","description":"B."},"a-b":{"type":"string"}},"required":["b"]}`,
			want: "{\n\t\"a-b\"?: string;\n\t/** B. */\n\tb: boolean;\n}"},
		{name: "oneOf", schema: `{"oneOf":[{"$ref":"#/$defs/Item"},{"type":"string"}]}`, want: "Item | string"},
		{name: "unknown ref", schema: `{"$ref":"#/$defs/Nope"}`, err: "unresolvable $ref"},
		{name: "unknown keyword", schema: `{"type":"string","patternProperties":{}}`, err: "unsupported JSON Schema keyword"},
		{name: "unknown type", schema: `{"type":"tuple"}`, err: "unsupported type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s map[string]any
			if err := json.Unmarshal([]byte(tc.schema), &s); err != nil {
				t.Fatal(err)
			}
			got, err := w.typeOf(s, 0)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q, %v; want error %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestDocComment: a description cannot end its comment early.
func TestDocComment(t *testing.T) {
	if got := docComment("a */ b", 1); got != "\t/** a *\\/ b */\n" {
		t.Fatalf("got %q", got)
	}
	if got := docComment("one\ntwo", 0); got != "/**\n * one\n * two\n */\n" {
		t.Fatalf("got %q", got)
	}
}
