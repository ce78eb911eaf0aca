// Package python generates the typed part of the Python SDK (sdks/python):
// TypedDicts and Literal aliases for the API's schemas (components.schemas
// of api/openapi.json) and for the universal events (event/schema/event.v1.json),
// one event TypedDict per event type, discriminated by "type". It reads the
// documents as bytes and imports nothing of agentbox; its test writes the
// modules with -update and fails when the committed ones drift.
package python

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// schema is the subset of JSON Schema (2020-12, as OpenAPI 3.1 uses it)
// the documents use.
type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 typeList           `json:"type"`
	Description          string             `json:"description"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	Items                *schema            `json:"items"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Enum                 []json.RawMessage  `json:"enum"`
	Const                json.RawMessage    `json:"const"`
	AllOf                []*schema          `json:"allOf"`
	If                   *schema            `json:"if"`
	Then                 *schema            `json:"then"`
	Defs                 map[string]*schema `json:"$defs"`
}

// typeList is "type": a name or a list of names.
type typeList []string

func (t *typeList) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '[' {
		var l []string
		if err := json.Unmarshal(b, &l); err != nil {
			return err
		}
		*t = l
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*t = typeList{s}
	return nil
}

// Files are the generated modules, by path relative to sdks/python.
type Files map[string][]byte

// Module paths, relative to sdks/python.
const (
	TypesModule  = "agentbox/types.py"
	EventsModule = "agentbox/events.py"
)

// Generate returns the Python modules for the OpenAPI document and the
// event schema.
func Generate(openapi, eventSchema []byte) (Files, error) {
	types, err := apiTypes(openapi)
	if err != nil {
		return nil, fmt.Errorf("sdkgen/python: api/openapi.json: %w", err)
	}
	events, err := eventTypes(eventSchema)
	if err != nil {
		return nil, fmt.Errorf("sdkgen/python: event schema: %w", err)
	}
	return Files{TypesModule: types, EventsModule: events}, nil
}

func apiTypes(doc []byte) ([]byte, error) {
	var d struct {
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if len(d.Components.Schemas) == 0 {
		return nil, fmt.Errorf("no components.schemas")
	}
	w := newWriter("#/components/schemas/", d.Components.Schemas)
	w.header("api/openapi.json", "Types of the agentbox HTTP API: one TypedDict per schema of api/openapi.json.\n\n"+
		"Responses are plain dicts of these shapes; fields a newer daemon adds are\nkept, never refused.")
	if err := w.defs(); err != nil {
		return nil, err
	}
	return w.finish()
}

func eventTypes(doc []byte) ([]byte, error) {
	var root schema
	if err := json.Unmarshal(doc, &root); err != nil {
		return nil, err
	}
	if len(root.Defs) == 0 || root.Properties == nil {
		return nil, fmt.Errorf("no $defs or envelope properties")
	}
	w := newWriter("#/$defs/", root.Defs)
	w.header("event/schema/event.v1.json", "Universal events of a session's log (schema v1): the envelope, its data per\n"+
		"event type, and AnyEvent, a union discriminated by \"type\".")
	if err := w.defs(); err != nil {
		return nil, err
	}
	// The envelope, generic in its data.
	if err := w.typedDict("Event", &root); err != nil {
		return nil, err
	}
	// One envelope per event type, with its data's schema.
	typeDef, ok := root.Defs["Type"]
	if !ok || len(typeDef.Enum) == 0 {
		return nil, fmt.Errorf("no $defs.Type enum")
	}
	dataOf := map[string]*schema{}
	for _, c := range root.AllOf {
		if c.If == nil || c.Then == nil || c.If.Properties["type"] == nil || c.Then.Properties["data"] == nil {
			return nil, fmt.Errorf("allOf: want if type const, then data")
		}
		var t string
		if err := json.Unmarshal(c.If.Properties["type"].Const, &t); err != nil {
			return nil, fmt.Errorf("allOf: if type: %w", err)
		}
		dataOf[t] = c.Then.Properties["data"]
	}
	var union []string
	for _, raw := range typeDef.Enum {
		var t string
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("$defs.Type: %w", err)
		}
		data, ok := dataOf[t]
		if !ok {
			return nil, fmt.Errorf("event type %q has no data schema", t)
		}
		name := className(t) + "Event"
		env := root
		props := map[string]*schema{}
		for k, v := range root.Properties {
			props[k] = v
		}
		props["type"] = &schema{Const: raw}
		props["data"] = data
		env.Properties = props
		env.Description = fmt.Sprintf("A %q event.", t)
		if err := w.typedDict(name, &env); err != nil {
			return nil, err
		}
		union = append(union, name)
	}
	w.imports["Union"] = true
	w.printf("\n\nAnyEvent = Union[\n")
	for _, n := range union {
		w.printf("    %s,\n", n)
	}
	w.printf("]\n\"\"\"Any event, discriminated by its \"type\".\"\"\"\n")
	w.printf("\nEVENT_TYPES: tuple[Type, ...] = (\n")
	for _, raw := range typeDef.Enum {
		w.printf("    %s,\n", pyString(string(mustString(raw))))
	}
	w.printf(")\n\"\"\"Every event type of schema v1, in the schema's order.\"\"\"\n")
	return w.finish()
}

func mustString(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// writer accumulates one module.
type writer struct {
	refPrefix string
	defsByKey map[string]*schema
	body      bytes.Buffer
	imports   map[string]bool // names from typing
	extra     []string        // classes for inline objects, written after the current one
	usedRef   bool            // the last type names a class of the module
	err       error
}

func newWriter(refPrefix string, defs map[string]*schema) *writer {
	return &writer{refPrefix: refPrefix, defsByKey: defs, imports: map[string]bool{}}
}

func (w *writer) printf(format string, args ...any) { fmt.Fprintf(&w.body, format, args...) }

func (w *writer) header(source, doc string) {
	w.printf("# Code generated by internal/sdkgen/python from %s; DO NOT EDIT.\n", source)
	w.printf("# Regenerate: go test ./internal/sdkgen/python -run TestGenerated -update\n")
	w.printf("%s\n\n", docstring(doc, ""))
	w.printf("%%IMPORTS%%\n")
}

// finish returns the module with its imports.
func (w *writer) finish() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	names := make([]string, 0, len(w.imports))
	for n := range w.imports {
		names = append(names, n)
	}
	sort.Strings(names)
	imp := "from typing import " + strings.Join(names, ", ") + "\n"
	return bytes.Replace(w.body.Bytes(), []byte("%IMPORTS%\n"), []byte(imp), 1), nil
}

// defs writes every definition, sorted by name: string enums as Literal
// aliases, objects as TypedDicts.
func (w *writer) defs() error {
	names := make([]string, 0, len(w.defsByKey))
	for n := range w.defsByKey {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := w.defsByKey[n]
		if !isIdent(n) {
			return fmt.Errorf("definition name %q is not a Python identifier", n)
		}
		if len(s.Properties) == 0 && !slices.Contains(s.Type, "object") {
			w.printf("\n\n%s = %s\n", n, w.typeOf(s, n))
			if s.Description != "" {
				w.printf("%s\n", docstring(s.Description, ""))
			}
			continue
		}
		if err := w.typedDict(n, s); err != nil {
			return err
		}
	}
	return w.err
}

// typedDict writes one TypedDict: the class form, or the functional form
// when a key is not a Python identifier (such as "from").
func (w *writer) typedDict(name string, s *schema) error {
	w.imports["TypedDict"] = true
	keys := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		keys = append(keys, k)
	}
	// Required fields first, in the schema's order, then the others by name.
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	sort.SliceStable(keys, func(i, j int) bool {
		ri, rj := required[keys[i]], required[keys[j]]
		if ri != rj {
			return ri
		}
		if ri {
			return slices.Index(s.Required, keys[i]) < slices.Index(s.Required, keys[j])
		}
		return keys[i] < keys[j]
	})
	classForm := !slices.ContainsFunc(keys, func(k string) bool { return !isIdent(k) })
	var inline []string
	w.extra, inline = nil, w.extra
	if classForm {
		w.printf("\n\nclass %s(TypedDict):\n", name)
		if s.Description != "" {
			w.printf("%s\n", docstring(s.Description, "    "))
		}
		if len(keys) == 0 {
			if s.Description == "" {
				w.printf("    pass\n")
			}
		}
		for _, k := range keys {
			p := s.Properties[k]
			t := w.fieldType(p, name, k, required[k])
			if p.Description != "" {
				for _, line := range strings.Split(wrap(p.Description, 72), "\n") {
					w.printf("    #: %s\n", line)
				}
			}
			w.printf("    %s: %s\n", k, t)
		}
	} else {
		w.printf("\n\n%s = TypedDict(\n    %s,\n    {\n", name, pyString(name))
		for _, k := range keys {
			p := s.Properties[k]
			t := w.fieldType(p, name, k, required[k])
			if p.Description != "" {
				for _, line := range strings.Split(wrap(p.Description, 68), "\n") {
					w.printf("        #: %s\n", line)
				}
			}
			w.printf("        %s: %s,\n", pyString(k), t)
		}
		w.printf("    },\n)\n")
		if s.Description != "" {
			w.printf("%s\n", docstring(s.Description, ""))
		}
	}
	extra := w.extra
	w.extra = inline
	for _, e := range extra {
		w.printf("%s", e)
	}
	return w.err
}

// fieldType is the annotation of one field. One naming a class is a
// string (a forward reference, since classes come in name order), inside
// NotRequired when the field is optional: evaluated at run time, as
// TypedDict does, it then still tells required keys from the others
// (__required_keys__), which validators of TypedDicts rely on.
func (w *writer) fieldType(p *schema, owner, key string, required bool) string {
	w.usedRef = false
	t := w.typeOf(p, owner+className(key))
	if w.usedRef {
		t = quoteAnnotation(t)
	}
	if !required {
		w.imports["NotRequired"] = true
		return "NotRequired[" + t + "]"
	}
	return t
}

// typeOf returns the Python type of s; hint names an inline object.
func (w *writer) typeOf(s *schema, hint string) string {
	if s.Ref != "" {
		name, ok := strings.CutPrefix(s.Ref, w.refPrefix)
		if !ok || w.defsByKey[name] == nil {
			w.fail(fmt.Errorf("unresolved $ref %q", s.Ref))
			return "Any"
		}
		w.usedRef = true
		return name
	}
	if len(s.Const) > 0 {
		w.imports["Literal"] = true
		return "Literal[" + pyLiteral(s.Const) + "]"
	}
	if len(s.Enum) > 0 {
		w.imports["Literal"] = true
		vals := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			vals[i] = pyLiteral(e)
		}
		return "Literal[" + strings.Join(vals, ", ") + "]"
	}
	var alts []string
	nullable := false
	for _, t := range s.Type {
		switch t {
		case "null":
			nullable = true
		case "string":
			alts = append(alts, "str")
		case "integer":
			alts = append(alts, "int")
		case "number":
			alts = append(alts, "float")
		case "boolean":
			alts = append(alts, "bool")
		case "array":
			item := "Any"
			if s.Items != nil {
				item = w.typeOf(s.Items, hint+"Item")
			} else {
				w.imports["Any"] = true
			}
			alts = append(alts, "list["+item+"]")
		case "object":
			alts = append(alts, w.objectType(s, hint))
		default:
			w.fail(fmt.Errorf("%s: unknown type %q", hint, t))
		}
	}
	if len(alts) == 0 {
		w.imports["Any"] = true
		return "Any"
	}
	if nullable {
		alts = append(alts, "None")
	}
	return strings.Join(alts, " | ")
}

// objectType is the type of an object schema: a TypedDict (written after
// the current one) when it has properties, else a dict.
func (w *writer) objectType(s *schema, hint string) string {
	if len(s.Properties) > 0 {
		outer := w.body
		w.body = bytes.Buffer{}
		saved := w.extra
		w.extra = nil
		_ = w.typedDict(hint, s)
		cls := w.body.String()
		w.body, w.extra = outer, append(saved, cls)
		w.usedRef = true
		return hint
	}
	ap := strings.TrimSpace(string(s.AdditionalProperties))
	switch ap {
	case "", "true", "false", "{}":
		w.imports["Any"] = true
		return "dict[str, Any]"
	}
	var v schema
	if err := json.Unmarshal(s.AdditionalProperties, &v); err != nil {
		w.fail(fmt.Errorf("%s: additionalProperties: %w", hint, err))
		return "dict[str, Any]"
	}
	return "dict[str, " + w.typeOf(&v, hint+"Value") + "]"
}

func (w *writer) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// pyLiteral renders a JSON scalar as a Python literal.
func pyLiteral(raw json.RawMessage) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "None"
	}
	switch x := v.(type) {
	case string:
		return pyString(x)
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case nil:
		return "None"
	}
	return pyString(string(raw))
}

// quoteAnnotation makes t a string annotation: in single quotes, which
// the Literal values' double quotes need not escape, unless t holds one.
func quoteAnnotation(t string) string {
	if strings.ContainsAny(t, `'\`) {
		return pyString(t)
	}
	return "'" + t + "'"
}

// pyString is a double-quoted Python string literal of s.
func pyString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// docstring is a triple-quoted docstring of text, indented.
func docstring(text, indent string) string {
	text = strings.TrimSpace(text)
	text = strings.ReplaceAll(text, `\`, `\\`)
	text = strings.ReplaceAll(text, `"""`, `\"\"\"`)
	text = strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\n' {
			return ' '
		}
		return r
	}, text)
	lines := strings.Split(wrapParagraphs(text, 76-len(indent)), "\n")
	if last := lines[len(lines)-1]; strings.HasSuffix(last, `"`) {
		lines[len(lines)-1] = last + " " // a quote right before the closing ones would end the string
	}
	if len(lines) == 1 {
		return indent + `"""` + lines[0] + `"""`
	}
	var b strings.Builder
	b.WriteString(indent + `"""` + lines[0] + "\n")
	for _, l := range lines[1:] {
		if l == "" {
			b.WriteString("\n")
			continue
		}
		b.WriteString(indent + l + "\n")
	}
	b.WriteString(indent + `"""`)
	return b.String()
}

// wrapParagraphs wraps each line of text (its existing line breaks kept).
func wrapParagraphs(text string, width int) string {
	parts := strings.Split(text, "\n")
	for i, p := range parts {
		parts[i] = wrap(p, width)
	}
	return strings.Join(parts, "\n")
}

// wrap folds text at spaces so that lines stay within width where a word
// allows; existing line breaks become spaces.
func wrap(text string, width int) string {
	words := strings.Fields(text)
	var b strings.Builder
	n := 0
	for _, wd := range words {
		if n > 0 && n+1+len(wd) > width {
			b.WriteByte('\n')
			n = 0
		} else if n > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(wd)
		n += len(wd)
	}
	return b.String()
}

// className turns "session.started" or "exit_code" into "SessionStarted",
// "ExitCode".
func className(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pyKeywords are Python's reserved words, which cannot name a class field.
var pyKeywords = []string{
	"False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
	"def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
	"is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield",
}

// isIdent reports whether s can be a Python attribute name in a class body.
func isIdent(s string) bool {
	if s == "" || slices.Contains(pyKeywords, s) {
		return false
	}
	for i, r := range s {
		ok := r == '_' || unicode.IsLetter(r) || i > 0 && unicode.IsDigit(r)
		if r > unicode.MaxASCII || !ok {
			return false
		}
	}
	return true
}
