// Package typescript generates the TypeScript SDK's generated part
// (sdks/typescript/src/*.gen.js and *.gen.d.ts) from the API's OpenAPI
// document and the universal event schema: the types of every request,
// answer and event, and the operation table the hand-written client calls
// through. Its tests keep the committed files equal to what it generates
// (-update rewrites them) and run the SDK's own tests, under Node, against
// the real daemon binary.
package typescript

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// schema is the part of JSON Schema (draft 2020-12, as OpenAPI 3.1 uses it)
// that the daemon's documents use. Keywords that only constrain values
// (lengths, bounds, formats) have no TypeScript counterpart and are
// ignored; any other keyword the generator does not know is an error, so
// that a new construct in the documents cannot silently become `unknown`.
type schema map[string]any

// ignored lists the keywords that do not change the TypeScript type.
var ignored = []string{
	"$schema", "$id", "title", "examples", "default", "format",
	"minLength", "maxLength", "minimum", "maximum", "minItems", "maxItems", "pattern",
	"if", "then", "allOf", "$defs", "contentEncoding", "contentMediaType",
	"exclusiveMinimum", "exclusiveMaximum", "uniqueItems", "deprecated", "readOnly", "writeOnly",
}

// known lists the keywords the generator translates, besides ignored ones.
var known = []string{
	"type", "properties", "required", "additionalProperties", "items",
	"$ref", "enum", "const", "oneOf", "anyOf", "description",
}

// typeWriter turns schemas into TypeScript type expressions. refName maps
// a $ref to the name of the declared type it points to.
type typeWriter struct {
	refName func(ref string) (string, error)
}

// check rejects keywords the generator does not understand.
func check(s schema) error {
	for k := range s {
		if !slices.Contains(known, k) && !slices.Contains(ignored, k) {
			return fmt.Errorf("unsupported JSON Schema keyword %q", k)
		}
	}
	return nil
}

// typeOf returns the TypeScript type of s, indented for nesting level
// indent (in tabs) when it spans lines.
func (w typeWriter) typeOf(s schema, indent int) (string, error) {
	if err := check(s); err != nil {
		return "", err
	}
	if ref, ok := s["$ref"].(string); ok {
		return w.refName(ref)
	}
	if c, ok := s["const"]; ok {
		return literal(c)
	}
	if e, ok := s["enum"].([]any); ok {
		lits := make([]string, 0, len(e))
		for _, v := range e {
			l, err := literal(v)
			if err != nil {
				return "", err
			}
			lits = append(lits, l)
		}
		return strings.Join(lits, " | "), nil
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts, ok := s[k].([]any); ok {
			parts := make([]string, 0, len(alts))
			for _, a := range alts {
				as, ok := a.(map[string]any)
				if !ok {
					return "", fmt.Errorf("%s: alternative is not a schema", k)
				}
				t, err := w.typeOf(as, indent)
				if err != nil {
					return "", err
				}
				parts = append(parts, paren(t))
			}
			return strings.Join(parts, " | "), nil
		}
	}
	var types []string
	switch t := s["type"].(type) {
	case nil:
		if _, ok := s["properties"]; ok {
			types = []string{"object"}
		} else {
			return "unknown", nil
		}
	case string:
		types = []string{t}
	case []any:
		for _, v := range t {
			str, ok := v.(string)
			if !ok {
				return "", fmt.Errorf("type list holds %v", v)
			}
			types = append(types, str)
		}
	default:
		return "", fmt.Errorf("type is %T", t)
	}
	parts := make([]string, 0, len(types))
	for _, t := range types {
		var out string
		switch t {
		case "string":
			out = "string"
		case "integer", "number":
			out = "number"
		case "boolean":
			out = "boolean"
		case "null":
			out = "null"
		case "array":
			items, _ := s["items"].(map[string]any)
			it := "unknown"
			if items != nil {
				var err error
				if it, err = w.typeOf(items, indent); err != nil {
					return "", fmt.Errorf("items: %w", err)
				}
			}
			out = paren(it) + "[]"
		case "object":
			var err error
			if out, err = w.objectType(s, indent); err != nil {
				return "", err
			}
		default:
			return "", fmt.Errorf("unsupported type %q", t)
		}
		parts = append(parts, out)
	}
	return strings.Join(parts, " | "), nil
}

// objectType returns an object type literal for s: its properties (the
// ones not in required are optional) and, when additionalProperties is a
// schema, an index signature.
func (w typeWriter) objectType(s schema, indent int) (string, error) {
	props, _ := s["properties"].(map[string]any)
	var extra string
	switch ap := s["additionalProperties"].(type) {
	case map[string]any:
		t, err := w.typeOf(ap, indent+1)
		if err != nil {
			return "", fmt.Errorf("additionalProperties: %w", err)
		}
		extra = t
	case bool, nil:
	default:
		return "", fmt.Errorf("additionalProperties is %T", ap)
	}
	if len(props) == 0 {
		if extra != "" {
			return "Record<string, " + extra + ">", nil
		}
		if s["additionalProperties"] == false {
			return "Record<string, never>", nil
		}
		return "Record<string, unknown>", nil
	}
	body, err := w.members(s, indent+1)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("{\n")
	b.WriteString(body)
	if extra != "" {
		b.WriteString(tabs(indent+1) + "[key: string]: " + extra + ";\n")
	}
	b.WriteString(tabs(indent) + "}")
	return b.String(), nil
}

// members writes the property declarations of object schema s, one per
// line at the given indent, each with its description as a doc comment,
// in name order.
func (w typeWriter) members(s schema, indent int) (string, error) {
	props, _ := s["properties"].(map[string]any)
	req := map[string]bool{}
	if r, ok := s["required"].([]any); ok {
		for _, v := range r {
			if name, ok := v.(string); ok {
				req[name] = true
			}
		}
	}
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		ps, ok := props[name].(map[string]any)
		if !ok {
			return "", fmt.Errorf("property %s is not a schema", name)
		}
		t, err := w.typeOf(ps, indent)
		if err != nil {
			return "", fmt.Errorf("property %s: %w", name, err)
		}
		desc, _ := ps["description"].(string)
		b.WriteString(docComment(desc, indent))
		opt := "?"
		if req[name] {
			opt = ""
		}
		b.WriteString(tabs(indent) + propName(name) + opt + ": " + t + ";\n")
	}
	return b.String(), nil
}

// literal writes a JSON value as a TypeScript literal type.
func literal(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case bool:
		return strconv.FormatBool(x), nil
	case nil:
		return "null", nil
	}
	return "", fmt.Errorf("unsupported literal %v", v)
}

// paren wraps a union or a multi-line type in parentheses where it is the
// operand of [] or of another union.
func paren(t string) string {
	if strings.Contains(t, " | ") && !strings.HasPrefix(t, "(") {
		return "(" + t + ")"
	}
	return t
}

// propName quotes a property name that is not an identifier.
func propName(name string) string {
	if isIdent(name) {
		return name
	}
	return strconv.Quote(name)
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'):
		case i > 0 && r >= '0' && r <= '9':
		default:
			return false
		}
	}
	return true
}

// docComment returns desc as a JSDoc comment at the given indent, or ""
// when there is none. A "*/" inside cannot end the comment early.
func docComment(desc string, indent int) string {
	desc = strings.TrimSpace(desc)
	if desc == "" {
		return ""
	}
	desc = strings.ReplaceAll(desc, "*/", "*\\/")
	lines := strings.Split(desc, "\n")
	if len(lines) == 1 {
		return tabs(indent) + "/** " + lines[0] + " */\n"
	}
	var b strings.Builder
	b.WriteString(tabs(indent) + "/**\n")
	for _, l := range lines {
		b.WriteString(strings.TrimRight(tabs(indent)+" * "+l, " ") + "\n")
	}
	b.WriteString(tabs(indent) + " */\n")
	return b.String()
}

func tabs(n int) string { return strings.Repeat("\t", n) }
