package policy

import (
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/yamldoc"
)

// MaxSize is the largest policy document Parse reads. Policies come in
// HTTP requests too; nothing legitimate comes near it.
const MaxSize = 1 << 20

// Limits bound a policy document as it is parsed (see package yamldoc):
// its size, its nesting, its number of values and the length of its keys.
// A policy is a few levels deep and a few thousand values at most.
var Limits = yamldoc.Limits{Bytes: MaxSize, Depth: 32, Nodes: 1 << 14, KeyBytes: 1 << 10}

// maxErrors caps the problems Parse reports for one document.
const maxErrors = 50

// Schema is the JSON Schema (draft 2020-12) of a policy document, also
// published as docs/policy.v1.json for editors.
//
//go:embed policy.v1.json
var Schema []byte

// FieldError is one problem in a policy document.
type FieldError struct {
	File   string
	Line   int // 1-based; 0 when the problem has no place in the text
	Column int
	// Field is the path of the value, e.g. "resources.memory" or
	// "filesystem.protected[2]"; empty for syntax errors.
	Field   string
	Message string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Errors is every problem found in one document, in text order; Error
// prints one per line.
type Errors []*FieldError

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Parse reads a policy in YAML or JSON (JSON is read as the YAML it is),
// in the strict subset of package yamldoc: a document over Limits, and
// anchors, aliases, tags, merge keys, duplicate keys and multiple
// documents are refused. The
// document is then checked against Schema and decoded strictly (unknown
// fields are errors), and finally checked for what a schema cannot say
// (sizes in range, absolute clean paths, valid patterns and network rules).
// Every problem is reported (up to 50), as an Errors value whose lines
// read "file:line:col: field.path: message".
func Parse(filename string, data []byte) (*Policy, error) {
	d := &doc{file: filename, root: &posNode{}}
	body, err := yamldoc.Parse(data, Limits) // MaxSize too: Limits.Bytes
	if err != nil {
		return nil, Errors{d.yamlError(err)}
	}
	if body == nil {
		return nil, Errors{{File: filename, Line: 1, Column: 1, Message: "empty policy (it needs at least \"version: 1\")"}}
	}

	value := d.value(body, d.root, nil)
	if len(d.errs) > 0 {
		return nil, d.sorted()
	}
	if errs := compiledSchema().validate(value); len(errs) > 0 {
		d.schemaErrors(errs)
		return nil, d.sorted()
	}

	// Ranges the schema cannot express, checked here so the error has a
	// place (the decoder's would not).
	for _, f := range []string{"memory", "disk", "output", "timeout"} {
		v, ok := lookup(value, "resources", f)
		if !ok {
			continue
		}
		var err error
		if f == "timeout" {
			_, err = ParseDuration(fmt.Sprint(v))
		} else {
			_, err = ParseByteSize(fmt.Sprint(v))
		}
		if err != nil {
			d.add(d.atPath([]string{"resources", f}, err.Error()))
		}
	}
	if len(d.errs) > 0 {
		return nil, d.sorted()
	}

	var p Policy
	if err := yamldoc.DecodeNode(body, &p); err != nil {
		return nil, Errors{d.yamlError(err)}
	}
	for _, pr := range p.problems() {
		fe := d.atPath(pr.path, pr.msg)
		if n := d.node(pr.path); n != nil && n.hasKey && pr.key {
			fe.Line, fe.Column = n.key.line, n.key.col
		}
		d.add(fe)
	}
	if len(d.errs) > 0 {
		return nil, d.sorted()
	}
	return &p, nil
}

// lookup returns the value at path in a converted document.
func lookup(v any, path ...string) (any, bool) {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[p]; !ok {
			return nil, false
		}
	}
	return v, true
}

var compiledSchema = sync.OnceValue(func() *schemaNode {
	n, err := compileSchema(Schema)
	if err != nil {
		panic("policy: embedded schema: " + err.Error())
	}
	return n
})

// pos is a place in the source text.
type pos struct{ line, col int }

// doc converts a YAML AST into the plain JSON values the schema validator
// reads, remembering where each value (and each mapping key) was, in a tree
// of the same shape, to put line numbers on errors found later. Its memory
// is proportional to the document's: no node holds its whole path.
type doc struct {
	file    string
	root    *posNode
	errs    Errors
	dropped int // problems past maxErrors
}

// posNode is where a value of the document is.
type posNode struct {
	at     pos
	key    pos // the place of its key, when it is a mapping's value
	hasKey bool
	fields map[string]*posNode
	items  []*posNode
}

// node returns the place of the value at path, or nil.
func (d *doc) node(path []string) *posNode {
	n := d.root
	for _, p := range path {
		if n = n.child(p); n == nil {
			return nil
		}
	}
	return n
}

func (n *posNode) child(p string) *posNode {
	if c, ok := n.fields[p]; ok {
		return c
	}
	if i, err := strconv.Atoi(p); err == nil && i >= 0 && i < len(n.items) && n.fields == nil {
		return n.items[i]
	}
	return nil
}

// add records a problem, up to maxErrors.
func (d *doc) add(fe *FieldError) {
	if len(d.errs) >= maxErrors {
		d.dropped++
		return
	}
	d.errs = append(d.errs, fe)
}

// valuePath is a value's path as a linked list: building one per value costs
// the same whatever the depth, and the string form is made only for an
// error.
type valuePath struct {
	parent *valuePath
	seg    string
}

func (p *valuePath) with(seg string) *valuePath { return &valuePath{parent: p, seg: seg} }

func (p *valuePath) segments() []string {
	var out []string
	for ; p != nil; p = p.parent {
		out = append(out, p.seg)
	}
	slices.Reverse(out)
	return out
}

// maxSegment bounds each part of a field path in messages: a key can be
// as long as the document.
const maxSegment = 64

// fieldPath prints a path as "filesystem.protected[2]" or `env.set."A B"`.
func fieldPath(path []string) string {
	var b strings.Builder
	for i, p := range path {
		if r := []rune(p); len(r) > maxSegment {
			p = string(r[:maxSegment]) + "…"
		}
		if _, err := strconv.Atoi(p); err == nil && i > 0 {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		if p == "" || strings.ContainsAny(p, ".[]\" \t") {
			p = strconv.Quote(p)
		}
		b.WriteString(p)
	}
	return b.String()
}

func nodePos(n *yamldoc.Node) pos {
	if n == nil {
		return pos{}
	}
	return pos{n.Line, n.Col}
}

func (d *doc) at(n *yamldoc.Node, field, msg string) *FieldError {
	p := nodePos(n)
	return &FieldError{File: d.file, Line: p.line, Column: p.col, Field: field, Message: msg}
}

// atPath places an error at the value at path, or at the nearest enclosing
// value the text has (a missing field is reported at its parent's key).
func (d *doc) atPath(path []string, msg string) *FieldError {
	n, i := d.root, 0
	for ; i < len(path); i++ {
		c := n.child(path[i])
		if c == nil {
			break
		}
		n = c
	}
	p := n.at
	if i < len(path) && n.hasKey {
		p = n.key
	}
	return &FieldError{File: d.file, Line: p.line, Column: p.col, Field: fieldPath(path), Message: msg}
}

func (d *doc) sorted() Errors {
	sort.SliceStable(d.errs, func(i, j int) bool {
		a, b := d.errs[i], d.errs[j]
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
	if d.dropped > 0 {
		return append(d.errs, &FieldError{File: d.file, Message: fmt.Sprintf("and %d more problems", d.dropped)})
	}
	return d.errs
}

// yamlError turns a yamldoc error into a FieldError at its place.
func (d *doc) yamlError(err error) *FieldError {
	var ye *yamldoc.Error
	if errors.As(err, &ye) {
		return &FieldError{File: d.file, Line: ye.Line, Column: ye.Column, Field: fieldPath(ye.Path), Message: ye.Message}
	}
	return &FieldError{File: d.file, Message: err.Error()}
}

// value converts n into a JSON value: map[string]any, []any, string,
// json.Number, bool or nil, and records where it and its children are in
// pn.
func (d *doc) value(n *yamldoc.Node, pn *posNode, p *valuePath) any {
	pn.at = nodePos(n)
	switch n.Kind {
	case yamldoc.Mapping:
		m := make(map[string]any, len(n.Pairs))
		pn.fields = make(map[string]*posNode, len(n.Pairs))
		for _, kv := range n.Pairs {
			d.mapValue(m, kv, pn, p)
		}
		return m
	case yamldoc.Sequence:
		s := make([]any, 0, len(n.Items))
		pn.items = make([]*posNode, len(n.Items))
		for i, v := range n.Items {
			pn.items[i] = &posNode{}
			s = append(s, d.value(v, pn.items[i], p.with(strconv.Itoa(i))))
		}
		return s
	}
	if yamldoc.IsInfOrNaN(n) {
		d.add(d.at(n, fieldPath(p.segments()), "infinity and NaN are not allowed"))
		return nil
	}
	v, err := yamldoc.Value(n)
	if err != nil {
		d.add(d.at(n, fieldPath(p.segments()), err.Error()))
	}
	return v
}

func (d *doc) mapValue(m map[string]any, kv yamldoc.Pair, pn *posNode, p *valuePath) {
	if kv.Key.Tag != yamldoc.Str {
		d.add(d.at(kv.Key, fieldPath(p.segments()), "mapping keys must be plain strings"))
		return
	}
	key := kv.Key.Text
	child := p.with(key)
	cn := &posNode{key: nodePos(kv.Key), hasKey: true}
	pn.fields[key] = cn
	m[key] = d.value(kv.Value, cn, child)
}

// schemaErrors reports schema validation errors at their places.
func (d *doc) schemaErrors(errs []schemaError) {
	for _, e := range errs {
		path := e.path
		switch e.keyword {
		case "additionalProperties":
			for _, name := range e.names {
				child := append(slices.Clip(path), name)
				msg := "unknown field"
				if allowed := fieldsAt(path); len(allowed) > 0 {
					msg += " (known: " + strings.Join(allowed, ", ") + ")"
				}
				fe := d.atPath(child, msg)
				if n := d.node(child); n != nil && n.hasKey {
					fe.Line, fe.Column = n.key.line, n.key.col
				}
				d.add(fe)
			}
		case "required":
			for _, name := range e.names {
				d.add(d.atPath(append(slices.Clip(path), name), "required field is missing"))
			}
		case "pattern":
			msg := e.msg
			if def, ok := strings.CutPrefix(e.schemaLoc, "/$defs/"); ok && patternMessages[def] != "" {
				msg = fmt.Sprintf("%q %s", e.got, patternMessages[def])
			}
			d.add(d.atPath(path, msg))
		default:
			d.add(d.atPath(path, e.msg))
		}
	}
}

// patternMessages explain the schema's patterns in words.
var patternMessages = map[string]string{
	"size":     "is not a size: use bytes or a number with Ki, Mi, Gi, Ti, K, M or G (e.g. 512Mi)",
	"duration": "is not a duration: use e.g. 500ms, 30s, 10m, 1h30m",
	"path":     "is not an absolute path",
	"rule":     "is not a network rule: use host[:port], *.domain[:port] or a CIDR",
	"syscall":  "is not a syscall name",
	"envName":  "is not an environment variable name",
}

// fieldsAt lists the YAML field names of the Policy struct at path, for
// "unknown field" messages.
func fieldsAt(path []string) []string {
	t := reflect.TypeFor[Policy]()
	for _, p := range path {
		found := false
		for i := range t.NumField() {
			if yamlName(t.Field(i)) == p {
				t, found = t.Field(i).Type, true
				break
			}
		}
		if !found || t.Kind() != reflect.Struct {
			return nil
		}
	}
	var names []string
	for i := range t.NumField() {
		names = append(names, yamlName(t.Field(i)))
	}
	return names
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}
