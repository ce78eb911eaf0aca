package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/agentbox/agentbox/internal/yamldoc"
)

func TestSchemaCompiles(t *testing.T) {
	if _, err := compileSchema(Schema); err != nil {
		t.Fatalf("the embedded schema uses something schema.go does not implement: %v", err)
	}
}

// The validator must refuse what it does not implement rather than
// ignore it.
func TestSchemaRefusesUnsupported(t *testing.T) {
	for _, src := range []string{
		`{"type": "array", "uniqueItems": true}`,
		`{"type": "array", "minItems": 1}`,
		`{"patternProperties": {"^x": {}}}`,
		`{"exclusiveMinimum": 0}`,
		`{"format": "uri"}`,
		`{"anyOf": [{"type": "string"}]}`,
		`{"properties": {"a": {"oneOf": []}}}`,
		`{"$defs": {"a": {"not": {}}}}`,
		`{"$ref": "other.json#/x"}`,
		`{"$ref": "#/$defs/missing"}`,
		`{"items": true}`,
		`{"type": "thing"}`,
		`{"pattern": "("}`,
		`{"additionalProperties": true}`,
		`[]`,
	} {
		if _, err := compileSchema([]byte(src)); err == nil {
			t.Errorf("compileSchema(%s) succeeded", src)
		}
	}
}

// referenceSchema is the embedded schema compiled by a complete validator.
var referenceSchema = sync.OnceValue(func() *jsonschema.Schema {
	const id = "urn:agentbox:policy:v1"
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema))
	if err != nil {
		panic(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(id, doc); err != nil {
		panic(err)
	}
	return c.MustCompile(id)
})

// referenceErrors flattens the reference validator's error tree into
// "pointer schemaLocation message" lines, one per unknown or missing
// property.
func referenceErrors(v any) []string {
	err := referenceSchema().Validate(v)
	if err == nil {
		return nil
	}
	var lines []string
	var walk func(*jsonschema.ValidationError)
	walk = func(ve *jsonschema.ValidationError) {
		if len(ve.Causes) > 0 {
			for _, c := range ve.Causes {
				walk(c)
			}
			return
		}
		_, loc, _ := strings.Cut(ve.SchemaURL, "#")
		at := pointer(ve.InstanceLocation) + " " + loc + " "
		switch k := ve.ErrorKind.(type) {
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				lines = append(lines, at+"unknown "+strconv.Quote(p))
			}
		case *kind.Required:
			for _, p := range k.Missing {
				lines = append(lines, at+"missing "+strconv.Quote(p))
			}
		default:
			lines = append(lines, at+ve.ErrorKind.LocalizedString(printer))
		}
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{"not a validation error: " + err.Error()}
	}
	walk(ve)
	slices.Sort(lines)
	return lines
}

func ourErrors(v any) []string {
	var lines []string
	for _, e := range compiledSchema().validate(v) {
		at := pointer(e.path) + " " + e.schemaLoc + " "
		switch e.keyword {
		case "additionalProperties":
			for _, p := range e.names {
				lines = append(lines, at+"unknown "+strconv.Quote(p))
			}
		case "required":
			for _, p := range e.names {
				lines = append(lines, at+"missing "+strconv.Quote(p))
			}
		default:
			lines = append(lines, at+e.msg)
		}
	}
	slices.Sort(lines)
	return lines
}

// instance converts a policy document the way Parse does before
// validation; ok is false when Parse would stop earlier.
func instance(data []byte) (v any, ok bool) {
	body, err := yamldoc.Parse(data, Limits)
	if err != nil || body == nil {
		return nil, false
	}
	d := &doc{file: "f.yaml", root: &posNode{}}
	v = d.value(body, d.root, nil)
	return v, len(d.errs) == 0
}

// pointer prints a path as a JSON pointer.
func pointer(path []string) string {
	var b strings.Builder
	for _, p := range path {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(p, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// schemaCorpus is every policy input the package's tests use, plus
// documents aimed at each keyword's edges.
func schemaCorpus(t testing.TB) [][]byte {
	var corpus [][]byte
	files, _ := filepath.Glob("testdata/*.*")
	presets, _ := filepath.Glob("presets/*.yaml")
	fuzz, _ := filepath.Glob("testdata/fuzz/*/*")
	for _, file := range slices.Concat(files, presets) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		corpus = append(corpus, data)
	}
	for _, file := range fuzz {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// go test fuzz v1, then []byte("...")
		for line := range strings.Lines(string(data)) {
			if q, ok := strings.CutPrefix(strings.TrimSpace(line), "[]byte("); ok {
				if s, err := strconv.Unquote(strings.TrimSuffix(q, ")")); err == nil {
					corpus = append(corpus, []byte(s))
				}
			}
		}
	}
	docs := []string{
		// TestParseErrors and FuzzParse inputs.
		"version: 1\nisolation: docker\nresources:\n  memory: 12Qi\n  cpus: -1\nfilesystem:\n  write: [relative]\n",
		"isolation: process\n", "version: 2\n", "version: 1\nisolaton: gvisor\n",
		"version: 1\nresources:\n  memory: 1Gi\n  bogus: 3\n", "version: 1\nresources:\n  memory: 99999999999Ti\n",
		"version: 1\nresources:\n  timeout: 5 minutes\n", "version: 1\nresources:\n",
		"version: 1\nfilesystem:\n  protected: [/abs, 'a**']\n  write: [/, /proc/x, /a/../b]\nnetwork:\n  deny: [10.0.0.1/8, 'x:0']\n",
		"{\"version\": 1,\n \"env\": {\"set\": {\"1X\": \"v\", \"N\": 1}, \"pass\": [\"A-B\"]}}",
		"version: 1\nresources: {memory: 1Gi}\n", "{\"version\": 1, \"env\": {\"set\": {\"\": \"\"}}}",
		"version: 1\nfilesystem: {protected: ['**/**/x', 'a/']}\n",
		// Types, const and enum.
		"version: 1.0\n", "version: '1'\n", "version: true\n", "version: null\n", "version: [1]\n", "version: {a: 1}\n",
		"version: 1e0\n", "version: 10e-1\n", "[1, 2]\n", "just a string\n", "3\n", "null\n",
		"version: 1\nisolation: 1\n", "version: 1\nisolation: GVISOR\n", "version: 1\nnetwork: {default: allow, mode: bridge}\n",
		"version: 1\nallow_degraded: 'yes'\n", "version: 1\nsyscalls: {profile: [strict]}\n",
		// Numbers.
		"version: 1\nresources: {cpus: 1025, pids: 4194305}\n", "version: 1\nresources: {cpus: 1024, pids: 4194304}\n",
		"version: 1\nresources: {pids: 1.5, cpus: '2'}\n", "version: 1\nresources: {pids: 2.0, cpus: 0}\n",
		"version: 1\nresources: {memory: -1, disk: 1.5, output: 1e3}\n", "version: 1\nresources: {memory: 1.5Gi, disk: 12345678901234567890}\n",
		"version: 1\nresources: {pids: -12345678, cpus: -0.0001}\n", "version: 1\nresources: {timeout: 30}\n",
		// Strings, patterns, arrays, objects.
		"version: 1\nnetwork: {allow: ['', ' x', 'a b', \"\\u00a0\"], deny: [1, null]}\n",
		"version: 1\nnetwork: {allow: ['" + strings.Repeat("a", 301) + "']}\n",
		"version: 1\nfilesystem: {protected: ['', '" + strings.Repeat("é", 257) + "', 3]}\n",
		"version: 1\nfilesystem: {read: ['/" + strings.Repeat("x", 4096) + "', 'rel', {}], write: /single}\n",
		"version: 1\nfilesystem: {protected: [" + strings.Repeat("a, ", 257) + "]}\n",
		"version: 1\nnetwork: {deny: [" + strings.Repeat("x, ", 1025) + "]}\n",
		"version: 1\nsyscalls: {deny: [ptrace, PTRACE, '" + strings.Repeat("a", 65) + "', 'a\"b', \"it's\"]}\n",
		"version: 1\nenv: {pass: [A, 1A, 'A B', '" + strings.Repeat("A", 257) + "'], set: {A: '" + strings.Repeat("v", 65537) + "', B: [x]}}\n",
		"version: 1\nenv: {set: {" + envSet(257) + "}}\n",
		"version: 1\nenv: {bogus: 1, set: x}\nsyscalls: {a: 1, b: 2}\nx: 1\ny: 2\n",
		"version: 1\nfilesystem: {workspace: rw, read_outside_workspace: 1, bogus: {}}\n",
		"{\"version\": 1, \"a/b\": 1, \"c~d\": 2, \"\": 3}\n",
	}
	for _, d := range docs {
		corpus = append(corpus, []byte(d))
	}
	return corpus
}

func envSet(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "K%d: v, ", i)
	}
	return b.String()
}

// FuzzSchemaAgreement checks that the validator finds exactly the errors
// a complete JSON Schema implementation finds, at the same places.
func FuzzSchemaAgreement(f *testing.F) {
	for _, data := range schemaCorpus(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, ok := instance(data)
		if !ok {
			return
		}
		if diff := cmp.Diff(referenceErrors(v), ourErrors(v)); diff != "" {
			t.Errorf("validators disagree on\n%s\n(-reference +ours):\n%s", data, diff)
		}
	})
}
