package event_test

// This file generates schema/event.v1.json from the Go types of package
// event: a small reflector over the structs and their json tags, with
// descriptions taken from the doc comments in the package's source and
// enums from the lists in enums.go. TestSchemaUpToDate fails when the
// committed file differs; run it with -update to rewrite it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/golden"
	"github.com/google/go-cmp/cmp"
)

const (
	schemaPath = "schema/event.v1.json"
	schemaID   = "https://github.com/agentbox/agentbox/event/schema/event.v1.json"
)

func TestSchemaUpToDate(t *testing.T) {
	got, err := marshalSchema(generateSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	checkGenerated(t, schemaPath, got)
	if !golden.Update() && !bytes.Equal(event.JSONSchema(), got) {
		t.Errorf("event.JSONSchema() differs from the generated schema")
	}
}

// checkGenerated compares a generated file with the committed one, or
// rewrites it under -update.
func checkGenerated(t *testing.T, path string, got []byte) {
	t.Helper()
	if golden.Update() {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it with: go test ./event -run 'Test(Schema|Docs)UpToDate' -update)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s is out of date; regenerate it with: go test ./event -run 'Test(Schema|Docs)UpToDate' -update\n(-committed +generated):\n%s", path, diff)
	}
}

// TestEnumListsComplete checks that every list in enums.go (and the ones in
// event.go) holds exactly the constants declared for its type.
func TestEnumListsComplete(t *testing.T) {
	docs := parseDocs(t)
	listed := map[string]bool{}
	for typ, list := range enumLists() {
		name := typ.Name()
		listed[name] = true
		if diff := cmp.Diff(docs.constValues[name], list); diff != "" {
			t.Errorf("enum list for %s does not match its constants (-declared +listed):\n%s", name, diff)
		}
	}
	for name := range docs.constValues {
		if !listed[name] {
			t.Errorf("type %s has constants but no enum list in enums.go", name)
		}
	}
}

// strs converts a list of string constants to plain strings.
func strs[T ~string](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

// enumLists maps every named string type of package event to its values.
func enumLists() map[reflect.Type][]string {
	return map[reflect.Type][]string{
		reflect.TypeFor[event.Type]():            strs(event.Types),
		reflect.TypeFor[event.Source]():          strs(event.Sources),
		reflect.TypeFor[event.EndReason]():       strs(event.EndReasons),
		reflect.TypeFor[event.StopReason]():      strs(event.StopReasons),
		reflect.TypeFor[event.ItemKind]():        strs(event.ItemKinds),
		reflect.TypeFor[event.ItemStatus]():      strs(event.ItemStatuses),
		reflect.TypeFor[event.Role]():            strs(event.Roles),
		reflect.TypeFor[event.PartType]():        strs(event.PartTypes),
		reflect.TypeFor[event.FileChangeKind]():  strs(event.FileChangeKinds),
		reflect.TypeFor[event.DeltaField]():      strs(event.DeltaFields),
		reflect.TypeFor[event.PermissionKind]():  strs(event.PermissionKinds),
		reflect.TypeFor[event.OptionKind]():      strs(event.OptionKinds),
		reflect.TypeFor[event.Decision]():        strs(event.Decisions),
		reflect.TypeFor[event.DecidedBy]():       strs(event.Deciders),
		reflect.TypeFor[event.ViolationKind]():   strs(event.ViolationKinds),
		reflect.TypeFor[event.ViolationAction](): strs(event.ViolationActions),
	}
}

// node is one JSON Schema; fields marshal in this order.
type node struct {
	Schema               string   `json:"$schema,omitempty"`
	ID                   string   `json:"$id,omitempty"`
	Ref                  string   `json:"$ref,omitempty"`
	Title                string   `json:"title,omitempty"`
	Description          string   `json:"description,omitempty"`
	Type                 string   `json:"type,omitempty"`
	Format               string   `json:"format,omitempty"`
	Const                any      `json:"const,omitempty"`
	Enum                 []string `json:"enum,omitempty"`
	Minimum              *int     `json:"minimum,omitempty"`
	Items                *node    `json:"items,omitempty"`
	Properties           props    `json:"properties,omitempty"`
	Required             []string `json:"required,omitempty"`
	AdditionalProperties *node    `json:"additionalProperties,omitempty"`
	If                   *node    `json:"if,omitempty"`
	Then                 *node    `json:"then,omitempty"`
	AllOf                []*node  `json:"allOf,omitempty"`
	Defs                 props    `json:"$defs,omitempty"`
}

// props is an ordered JSON object of schemas.
type props []prop

type prop struct {
	Name   string
	Schema *node
}

func (p props) get(name string) *node {
	for _, x := range p {
		if x.Name == name {
			return x.Schema
		}
	}
	return nil
}

func (p props) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, x := range p {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshalCompact(x.Name)
		if err != nil {
			return nil, err
		}
		v, err := marshalCompact(x.Schema)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshalCompact is json.Marshal without HTML escaping, so descriptions
// stay readable.
func marshalCompact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func marshalSchema(root *node) ([]byte, error) {
	b, err := marshalCompact(root)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// generateSchema builds the schema of the envelope with one conditional per
// event type binding "data" to that type's payload.
func generateSchema(t *testing.T) *node {
	t.Helper()
	r := &reflector{docs: parseDocs(t), enums: enumLists(), defs: map[string]*node{}}
	root := r.object(reflect.TypeFor[event.Event]())
	if r.err != nil {
		t.Fatal(r.err)
	}
	root.Schema = "https://json-schema.org/draft/2020-12/schema"
	root.ID = schemaID
	root.Title = fmt.Sprintf("agentbox universal event, schema v%d", event.SchemaVersion)

	one := 1
	set := func(name string, f func(*node)) {
		n := root.Properties.get(name)
		if n == nil {
			t.Fatalf("envelope has no property %q", name)
		}
		f(n)
	}
	for name, desc := range map[string]string{
		"id":                "Unique id of the event, assigned by the store.",
		"seq":               "Position of the event in its session's log: per session, starting at 1, without gaps; assigned by the store.",
		"session_id":        "The session the event belongs to.",
		"time":              "When the event was appended to the log.",
		"schema":            "Version of the universal schema the event follows.",
		"type":              "The event type; it selects the schema of data.",
		"source":            "Who produced the event.",
		"native_session_id": "The agent's own session id, when it has one.",
		"turn_id":           "The turn the event belongs to; absent outside turns.",
	} {
		set(name, func(n *node) { n.Description = desc })
	}
	set("seq", func(n *node) { n.Minimum = &one })
	set("schema", func(n *node) { n.Const = event.SchemaVersion })
	set("data", func(n *node) {
		n.Type = "object"
		n.Description = "The payload, an object whose schema depends on the type."
	})
	set("raw", func(n *node) {
		n.Description = "The agent's original message, kept for debugging and replay when the adapter chooses to; never interpreted by the daemon."
	})

	for _, typ := range event.Types {
		name := reflect.TypeOf(event.NewPayload(typ)).Elem().Name()
		ref := r.ref(reflect.TypeOf(event.NewPayload(typ)).Elem())
		if ref.Ref != "#/$defs/"+name {
			t.Fatalf("payload %s: unexpected ref %q", name, ref.Ref)
		}
		root.AllOf = append(root.AllOf, &node{
			If: &node{
				Properties: props{{"type", &node{Const: string(typ)}}},
				Required:   []string{"type"},
			},
			Then: &node{Properties: props{{"data", ref}}},
		})
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	names := make([]string, 0, len(r.defs))
	for n := range r.defs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		root.Defs = append(root.Defs, prop{n, r.defs[n]})
	}
	return root
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
	pkgPath  = reflect.TypeFor[event.Event]().PkgPath()
)

// reflector turns Go types into schemas; named types of package event
// become $defs.
type reflector struct {
	docs  *goDocs
	enums map[reflect.Type][]string
	defs  map[string]*node
	err   error
}

func (r *reflector) fail(format string, args ...any) *node {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
	return &node{}
}

// ref returns a reference to the $def of a named type, defining it first.
func (r *reflector) ref(t reflect.Type) *node {
	name := t.Name()
	if _, ok := r.defs[name]; !ok {
		r.defs[name] = &node{} // placeholder against recursion
		switch t.Kind() {
		case reflect.Struct:
			r.defs[name] = r.object(t)
		case reflect.String:
			vals, ok := r.enums[t]
			if !ok {
				return r.fail("named string type %s has no enum list (add one to enums.go and to enumLists)", name)
			}
			r.defs[name] = &node{Description: r.docs.enumDescription(name), Type: "string", Enum: vals}
		default:
			return r.fail("cannot define %s of kind %s", name, t.Kind())
		}
	}
	return &node{Ref: "#/$defs/" + name}
}

func (r *reflector) schema(t reflect.Type) *node {
	switch {
	case t == timeType:
		return &node{Type: "string", Format: "date-time"}
	case t == rawType:
		return &node{} // any JSON value
	case t.Kind() == reflect.Pointer:
		// Every pointer field of the package is omitempty, so it is
		// absent rather than null when unset.
		return r.schema(t.Elem())
	case t.PkgPath() == pkgPath && (t.Kind() == reflect.Struct || t.Kind() == reflect.String):
		return r.ref(t)
	}
	switch t.Kind() {
	case reflect.String:
		return &node{Type: "string"}
	case reflect.Bool:
		return &node{Type: "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return &node{Type: "integer"}
	case reflect.Float32, reflect.Float64:
		return &node{Type: "number"}
	case reflect.Slice, reflect.Array:
		return &node{Type: "array", Items: r.schema(t.Elem())}
	case reflect.Map:
		return &node{Type: "object", AdditionalProperties: r.schema(t.Elem())}
	}
	return r.fail("unsupported type %s", t)
}

// object is the schema of a struct: its json fields in declaration order,
// fields without omitempty required.
func (r *reflector) object(t reflect.Type) *node {
	n := &node{Description: r.docs.types[t.Name()], Type: "object"}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		if f.Anonymous {
			return r.fail("%s.%s: embedded fields are not supported", t.Name(), f.Name)
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			return r.fail("%s.%s has no json name", t.Name(), f.Name)
		}
		fs := r.schema(f.Type)
		if t.Name() == "PlanEntry" && f.Name == "Status" {
			fs.Enum = event.PlanStatuses
		}
		if d := r.docs.fields[t.Name()][f.Name]; d != "" {
			fs.Description = d
		}
		n.Properties = append(n.Properties, prop{name, fs})
		if !slices.Contains(strings.Split(opts, ","), "omitempty") {
			n.Required = append(n.Required, name)
		}
	}
	return n
}

// goDocs holds the doc comments of the package's types, fields and
// constants.
type goDocs struct {
	types       map[string]string            // type → doc
	fields      map[string]map[string]string // type → Go field → doc
	constValues map[string][]string          // type → values in declaration order
	constDocs   map[string]map[string]string // type → value → comment
	consts      map[string]string            // constant name → value
}

// itemKindGroup matches the comments in Item that name the kinds using the
// fields below them, such as "tool_call, mcp_tool_call".
var itemKindGroup = regexp.MustCompile(`^[a-z_]+(, [a-z_]+)*$`)

func parseDocs(t *testing.T) *goDocs {
	t.Helper()
	d := &goDocs{types: map[string]string{}, fields: map[string]map[string]string{}, constValues: map[string][]string{}, constDocs: map[string]map[string]string{}, consts: map[string]string{}}
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var decls []*ast.GenDecl
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok {
				decls = append(decls, g)
			}
		}
	}
	// Constants first, so that doc links to them can show their values.
	for _, g := range decls {
		if g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			s := spec.(*ast.ValueSpec)
			if len(s.Names) != 1 || len(s.Values) != 1 {
				continue
			}
			lit, ok := s.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				continue
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			d.consts[s.Names[0].Name] = v
			typ, ok := s.Type.(*ast.Ident)
			if !ok {
				continue
			}
			d.constValues[typ.Name] = append(d.constValues[typ.Name], v)
			if d.constDocs[typ.Name] == nil {
				d.constDocs[typ.Name] = map[string]string{}
			}
			d.constDocs[typ.Name][v] = d.text(s.Comment)
		}
	}
	for _, g := range decls {
		for _, spec := range g.Specs {
			s, ok := spec.(*ast.TypeSpec)
			if !ok {
				continue
			}
			doc := s.Doc
			if doc == nil && len(g.Specs) == 1 {
				doc = g.Doc
			}
			d.types[s.Name.Name] = d.text(doc)
			if st, ok := s.Type.(*ast.StructType); ok {
				d.fields[s.Name.Name] = d.fieldDocs(st)
			}
		}
	}
	return d
}

func (d *goDocs) fieldDocs(st *ast.StructType) map[string]string {
	out := map[string]string{}
	for _, f := range st.Fields.List {
		doc := d.text(f.Doc)
		if itemKindGroup.MatchString(doc) {
			doc = "Used by " + doc + " items."
		}
		if c := d.text(f.Comment); c != "" {
			doc = strings.TrimSpace(doc + " " + c)
		}
		for _, n := range f.Names {
			out[n.Name] = doc
		}
	}
	return out
}

var docLink = regexp.MustCompile(`\[([A-Za-z][A-Za-z0-9_.]*)\]`)

// text flattens a comment to one line; a doc link to a string constant
// becomes its quoted value, other links their bare name.
func (d *goDocs) text(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	s := strings.Join(strings.Fields(g.Text()), " ")
	return docLink.ReplaceAllStringFunc(s, func(m string) string {
		name := m[1 : len(m)-1]
		if v, ok := d.consts[name]; ok {
			return strconv.Quote(v)
		}
		return name
	})
}

// enumDescription is the type's doc plus the meaning of each value that has
// one.
func (d *goDocs) enumDescription(typ string) string {
	desc := d.types[typ]
	var parts []string
	for _, v := range d.constValues[typ] {
		if c := d.constDocs[typ][v]; c != "" {
			parts = append(parts, v+": "+c)
		}
	}
	if len(parts) > 0 {
		desc += " " + strings.Join(parts, "; ") + "."
	}
	return desc
}
