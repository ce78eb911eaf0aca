package python

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/golden"
)

// sdkDir is sdks/python, from this package's directory.
var sdkDir = filepath.Join("..", "..", "..", "sdks", "python")

// TestGenerated: the committed generated modules of the Python SDK are
// what the generator makes of api/openapi.json and the event schema.
// After changing either: go test ./internal/sdkgen/python -run TestGenerated -update
func TestGenerated(t *testing.T) {
	files, err := Generate(api.OpenAPI(), event.JSONSchema())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{TypesModule, EventsModule} {
		got, ok := files[path]
		if !ok {
			t.Fatalf("no %s generated", path)
		}
		golden.Check(t, filepath.Join(sdkDir, filepath.FromSlash(path)), got)
	}
}

// TestGenerateShapes: the generator's mapping from schema to Python, one
// case per construct, including a key that is a Python keyword (the
// functional TypedDict form) and an unresolved reference (an error).
func TestGenerateShapes(t *testing.T) {
	cases := []struct {
		name    string
		schemas string
		want    []string
		wantErr string
	}{
		{"required and optional", `{"A":{"type":"object","required":["x"],"properties":{"x":{"type":"string"},"y":{"type":"integer"}}}}`,
			[]string{"class A(TypedDict):\n    x: str\n    y: NotRequired[int]\n"}, ""},
		{"nullable array of refs", `{"A":{"type":"object","required":["l"],"properties":{"l":{"type":["array","null"],"items":{"$ref":"#/components/schemas/B"}}}},"B":{"type":"object"}}`,
			[]string{"    l: 'list[B] | None'\n"}, ""},
		{"enum and map", `{"A":{"type":"object","required":["s","m"],"properties":{"s":{"type":"string","enum":["a","b\""]},"m":{"type":"object","additionalProperties":{"type":"string"}}}}}`,
			[]string{`    s: Literal["a", "b\""]` + "\n", "    m: dict[str, str]\n"}, ""},
		{"any", `{"A":{"type":"object","required":["v"],"properties":{"v":{}}}}`, []string{"    v: Any\n"}, ""},
		{"keyword key", `{"Move":{"type":"object","required":["from"],"properties":{"from":{"type":"string"},"to":{"type":"string"}}}}`,
			[]string{"Move = TypedDict(\n    \"Move\",\n    {\n        \"from\": str,\n        \"to\": NotRequired[str],\n    },\n)\n"}, ""},
		{"inline object", `{"A":{"type":"object","required":["o"],"properties":{"o":{"type":"object","required":["n"],"properties":{"n":{"type":"number"}}}}}}`,
			[]string{"    o: 'AO'\n", "class AO(TypedDict):\n    n: float\n"}, ""},
		{"docstring quotes", `{"A":{"type":"object","description":"Say \"\"\"hi\\ \"","properties":{}}}`,
			[]string{`    """Say \"\"\"hi\\ " """` + "\n"}, ""},
		{"unresolved ref", `{"A":{"type":"object","properties":{"b":{"$ref":"#/components/schemas/Nope"}}}}`, nil, "unresolved $ref"},
		{"unknown type", `{"A":{"type":"object","properties":{"b":{"type":"tuple"}}}}`, nil, "unknown type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := apiTypes([]byte(`{"components":{"schemas":` + tc.schemas + `}}`))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(got), w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
		})
	}
}
