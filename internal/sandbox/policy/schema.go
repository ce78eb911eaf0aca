package policy

// A JSON Schema (draft 2020-12) validator for exactly the keywords
// policy.v1.json uses. A general validator (santhosh-tekuri/jsonschema)
// compiles every draft's metaschema in its package init, milliseconds and
// megabytes at every start of the binary, for one small schema. Compiling
// a schema that uses any other keyword fails, so the schema cannot grow a
// keyword this file would silently ignore; the tests check every input
// against the general validator too.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// schemaNode is one compiled (sub)schema.
type schemaNode struct {
	loc string // JSON pointer in the schema document, e.g. "/$defs/size"

	types    []string // in canonical order; "integer" also accepts integral numbers
	hasConst bool
	constVal any
	enum     []any
	ref      string      // "#/$defs/name"
	refNode  *schemaNode // resolved ref

	minimum, maximum     *big.Rat
	minLength, maxLength *int
	pattern              *regexp.Regexp
	maxItems             *int
	items                *schemaNode
	maxProperties        *int
	required             []string
	properties           map[string]*schemaNode
	additional           *schemaNode // additionalProperties as a schema
	noAdditional         bool        // additionalProperties: false
}

// schemaError is one failed keyword at one place in the instance.
type schemaError struct {
	path      []string // instance location
	schemaLoc string   // the failing subschema, e.g. "/$defs/size"
	keyword   string
	// names are the unknown properties of additionalProperties, or the
	// missing ones of required.
	names []string
	got   string // the string a pattern did not match
	msg   string // a message for keywords parse.go does not reword
}

// typeOrder is the order type names are printed in.
var typeOrder = []string{"null", "boolean", "number", "integer", "string", "array", "object"}

// ignoredKeywords carry no assertion.
var ignoredKeywords = []string{"$schema", "$id", "$comment", "title", "description", "examples", "default"}

// compileSchema compiles a schema document holding only supported keywords.
func compileSchema(data []byte) (*schemaNode, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("schema is not JSON: %w", err)
	}
	c := &schemaCompiler{defs: map[string]*schemaNode{}}
	rootMap, ok := root.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("schema is not an object")
	}
	if defs, ok := rootMap["$defs"].(map[string]any); ok {
		for name := range defs {
			c.defs["#/$defs/"+name] = &schemaNode{}
		}
		for name, d := range defs {
			if err := c.compile(c.defs["#/$defs/"+name], d, "/$defs/"+name); err != nil {
				return nil, err
			}
		}
	}
	n := &schemaNode{}
	if err := c.compile(n, rootMap, ""); err != nil {
		return nil, err
	}
	for _, r := range c.refs {
		if r.refNode = c.defs[r.ref]; r.refNode == nil {
			return nil, fmt.Errorf("schema %s: $ref %q: no such definition", r.loc, r.ref)
		}
	}
	return n, nil
}

type schemaCompiler struct {
	defs map[string]*schemaNode // by "#/$defs/name"
	refs []*schemaNode          // nodes whose $ref is resolved at the end
}

func (c *schemaCompiler) compile(n *schemaNode, v any, loc string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("schema %s: not an object (boolean schemas are not supported)", loc)
	}
	n.loc = loc
	fail := func(kw, why string) error { return fmt.Errorf("schema %s/%s: %s", loc, kw, why) }
	for kw, val := range m {
		switch kw {
		case "$defs":
			if loc != "" {
				return fail(kw, "only allowed at the root")
			}
		case "type":
			switch t := val.(type) {
			case string:
				n.types = []string{t}
			case []any:
				for _, e := range t {
					s, ok := e.(string)
					if !ok {
						return fail(kw, "not a string")
					}
					n.types = append(n.types, s)
				}
			default:
				return fail(kw, "not a string or a list")
			}
			for _, t := range n.types {
				if !slices.Contains(typeOrder, t) {
					return fail(kw, "unknown type "+t)
				}
			}
			slices.SortFunc(n.types, func(a, b string) int {
				return slices.Index(typeOrder, a) - slices.Index(typeOrder, b)
			})
		case "const":
			n.hasConst, n.constVal = true, val
		case "enum":
			e, ok := val.([]any)
			if !ok || len(e) == 0 {
				return fail(kw, "not a non-empty list")
			}
			n.enum = e
		case "$ref":
			s, ok := val.(string)
			if !ok || !strings.HasPrefix(s, "#/$defs/") {
				return fail(kw, `only local "#/$defs/name" references are supported`)
			}
			n.ref = s
			c.refs = append(c.refs, n)
		case "minimum", "maximum":
			num, ok := val.(json.Number)
			r, okRat := new(big.Rat).SetString(string(num))
			if !ok || !okRat {
				return fail(kw, "not a number")
			}
			if kw == "minimum" {
				n.minimum = r
			} else {
				n.maximum = r
			}
		case "minLength", "maxLength", "maxItems", "maxProperties":
			num, _ := val.(json.Number)
			i, err := strconv.Atoi(string(num))
			if err != nil || i < 0 {
				return fail(kw, "not a non-negative integer")
			}
			switch kw {
			case "minLength":
				n.minLength = &i
			case "maxLength":
				n.maxLength = &i
			case "maxItems":
				n.maxItems = &i
			default:
				n.maxProperties = &i
			}
		case "pattern":
			s, _ := val.(string)
			re, err := regexp.Compile(s)
			if err != nil {
				return fail(kw, err.Error())
			}
			n.pattern = re
		case "required":
			l, ok := val.([]any)
			if !ok {
				return fail(kw, "not a list")
			}
			for _, e := range l {
				s, ok := e.(string)
				if !ok {
					return fail(kw, "not a string")
				}
				n.required = append(n.required, s)
			}
		case "properties":
			props, ok := val.(map[string]any)
			if !ok {
				return fail(kw, "not an object")
			}
			n.properties = map[string]*schemaNode{}
			for name, p := range props {
				sub := &schemaNode{}
				if err := c.compile(sub, p, loc+"/properties/"+name); err != nil {
					return err
				}
				n.properties[name] = sub
			}
		case "additionalProperties":
			if b, ok := val.(bool); ok {
				if b {
					return fail(kw, "true is the default; leave it out")
				}
				n.noAdditional = true
				continue
			}
			n.additional = &schemaNode{}
			if err := c.compile(n.additional, val, loc+"/additionalProperties"); err != nil {
				return err
			}
		case "items":
			n.items = &schemaNode{}
			if err := c.compile(n.items, val, loc+"/items"); err != nil {
				return err
			}
		default:
			if !slices.Contains(ignoredKeywords, kw) {
				return fail(kw, "keyword not supported by this validator (see schema.go)")
			}
		}
	}
	return nil
}

// validate checks v (as converted by doc.value) and returns every error,
// each at its instance location.
func (n *schemaNode) validate(v any) []schemaError {
	var errs []schemaError
	n.walk(v, nil, &errs)
	return errs
}

// walk checks the keywords in the order santhosh-tekuri/jsonschema does, so
// that errors at the same place come out in the same order: a wrong type,
// const or enum stops the node, the rest are all reported.
func (n *schemaNode) walk(v any, path []string, errs *[]schemaError) {
	fail := func(kw, msg string) {
		*errs = append(*errs, schemaError{path: path, schemaLoc: n.loc, keyword: kw, msg: msg})
	}
	if n.types != nil && !hasType(n.types, v) {
		fail("type", sprintf("got %s, want %s", jsonType(v), strings.Join(n.types, " or ")))
		return
	}
	if n.hasConst && !jsonEqual(v, n.constVal) {
		fail("const", sprintf("value must be %s", display(n.constVal)))
		return
	}
	if n.enum != nil && !slices.ContainsFunc(n.enum, func(e any) bool { return jsonEqual(v, e) }) {
		want := make([]string, len(n.enum))
		for i, e := range n.enum {
			want[i] = display(e)
		}
		if len(want) == 1 {
			fail("enum", sprintf("value must be %s", want[0]))
		} else {
			fail("enum", sprintf("value must be one of %s", strings.Join(want, ", ")))
		}
		return
	}
	if n.refNode != nil {
		n.refNode.walk(v, path, errs)
	}
	child := func(name string) []string { return append(slices.Clip(path), name) }
	switch v := v.(type) {
	case map[string]any:
		if n.maxProperties != nil && len(v) > *n.maxProperties {
			fail("maxProperties", sprintf("maxProperties: got %d, want %d", len(v), *n.maxProperties))
		}
		var missing []string
		for _, r := range n.required {
			if _, ok := v[r]; !ok {
				missing = append(missing, r)
			}
		}
		if missing != nil {
			*errs = append(*errs, schemaError{path: path, schemaLoc: n.loc, keyword: "required", names: missing})
		}
		var unknown []string
		for _, name := range slices.Sorted(maps.Keys(v)) {
			switch sub, ok := n.properties[name]; {
			case ok:
				sub.walk(v[name], child(name), errs)
			case n.additional != nil:
				n.additional.walk(v[name], child(name), errs)
			case n.noAdditional:
				unknown = append(unknown, name)
			}
		}
		if unknown != nil {
			*errs = append(*errs, schemaError{path: path, schemaLoc: n.loc, keyword: "additionalProperties", names: unknown})
		}
	case []any:
		if n.maxItems != nil && len(v) > *n.maxItems {
			fail("maxItems", sprintf("maxItems: got %d, want %d", len(v), *n.maxItems))
		}
		if n.items != nil {
			for i, e := range v {
				n.items.walk(e, child(strconv.Itoa(i)), errs)
			}
		}
	case string:
		length := utf8.RuneCountInString(v)
		if n.minLength != nil && length < *n.minLength {
			fail("minLength", sprintf("minLength: got %d, want %d", length, *n.minLength))
		}
		if n.maxLength != nil && length > *n.maxLength {
			fail("maxLength", sprintf("maxLength: got %d, want %d", length, *n.maxLength))
		}
		if n.pattern != nil && !n.pattern.MatchString(v) {
			*errs = append(*errs, schemaError{path: path, schemaLoc: n.loc, keyword: "pattern", got: v,
				msg: sprintf("%s does not match pattern %s", quote(v), quote(n.pattern.String()))})
		}
	case json.Number:
		got, ok := new(big.Rat).SetString(string(v))
		if !ok {
			return
		}
		if n.minimum != nil && got.Cmp(n.minimum) < 0 {
			fail("minimum", sprintf("minimum: got %v, want %v", ratFloat(got), ratFloat(n.minimum)))
		}
		if n.maximum != nil && got.Cmp(n.maximum) > 0 {
			fail("maximum", sprintf("maximum: got %v, want %v", ratFloat(got), ratFloat(n.maximum)))
		}
	}
}

func ratFloat(r *big.Rat) float64 {
	f, _ := r.Float64()
	return f
}

// jsonType names the JSON type of v; numbers are "number", integral or not.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func hasType(types []string, v any) bool {
	t := jsonType(v)
	if slices.Contains(types, t) {
		return true
	}
	if t == "number" && slices.Contains(types, "integer") {
		r, ok := new(big.Rat).SetString(string(v.(json.Number)))
		return ok && r.IsInt()
	}
	return false
}

// jsonEqual compares JSON values, numbers by value (1 equals 1.0).
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		ra, okA := new(big.Rat).SetString(string(a))
		rb, okB := new(big.Rat).SetString(string(b))
		return okA && okB && ra.Cmp(rb) == 0
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !jsonEqual(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		return ok && slices.EqualFunc(a, b, jsonEqual)
	case nil, bool, string:
		return a == b
	}
	return false
}

// display prints a primitive schema value in a message: strings in single
// quotes, the rest as is.
func display(v any) string {
	if s, ok := v.(string); ok {
		return quote(s)
	}
	return fmt.Sprint(v)
}

// quote single-quotes s with Go escapes, except that a double quote is
// left alone and a single quote is escaped.
func quote(s string) string {
	q := strconv.Quote(s)
	q = strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
	return "'" + strings.ReplaceAll(q, `'`, `\'`) + "'"
}
