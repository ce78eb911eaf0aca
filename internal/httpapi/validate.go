package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/agentbox/agentbox/api"
)

// The request validator. Its schemas are those of the committed contract,
// api/openapi.json (embedded in the binary, served at GET /openapi.json):
// what the document declares is exactly what is enforced. It knows the
// subset of JSON Schema the document uses; a schema with any other keyword
// fails to load (TestSpecSchemasLoad), so a new constraint can never be
// documented and silently not enforced. The messages and locations are
// those the API has always answered with (errors[] of a 422), and the
// differential test (validate_diff_test.go) holds them to huma's, which
// generates the document.

// fieldError is one entry of a problem's errors[]: where (body.agent,
// query.limit, path.id, header.Last-Event-ID), what, and the value found.
type fieldError struct {
	Location string
	Message  string
	Value    any
}

func (e *fieldError) Error() string {
	if e.Location == "" {
		return e.Message
	}
	return e.Message + " (" + e.Location + ")"
}

// Validation messages.
const (
	msgUnexpectedProperty = "unexpected property"
	msgExpectedBoolean    = "expected boolean"
	msgExpectedNumber     = "expected number"
	msgExpectedInteger    = "expected integer"
	msgExpectedString     = "expected string"
	msgExpectedArray      = "expected array"
	msgExpectedObject     = "expected object"
)

// schema is one JSON Schema of the document, as far as the validator
// knows the vocabulary.
type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 json.RawMessage    `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	Required             []string           `json:"required"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Enum                 []any              `json:"enum"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
	MinLength            *int               `json:"minLength"`
	MaxLength            *int               `json:"maxLength"`
	MinItems             *int               `json:"minItems"`
	MaxItems             *int               `json:"maxItems"`
	Pattern              string             `json:"pattern"`
	Format               string             `json:"format"`

	unknown []string // keywords the validator does not know

	// Set by prepare.
	prepared    bool
	typ         string
	nullable    bool
	closed      bool    // additionalProperties: false
	addl        *schema // additionalProperties: a schema
	re          *regexp.Regexp
	props       []string // sorted
	required    map[string]bool
	msgEnum     string
	msgRequired map[string]string
}

// schemaKeywords are the keywords a schema may have: those validated and
// those that only document.
var schemaKeywords = map[string]bool{
	"$ref": true, "type": true, "properties": true, "required": true, "additionalProperties": true,
	"items": true, "enum": true, "minimum": true, "maximum": true, "minLength": true, "maxLength": true,
	"minItems": true, "maxItems": true, "pattern": true, "format": true,
	"description": true, "examples": true, "title": true, "default": true,
}

// Formats the validator accepts: those of numbers, which only document
// the width (the decoder into the Go type enforces it).
var numberFormats = map[string]bool{"int64": true, "int32": true, "double": true, "float": true}

func (s *schema) UnmarshalJSON(b []byte) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	for k := range keys {
		if !schemaKeywords[k] {
			s.unknown = append(s.unknown, k)
		}
	}
	type plain schema
	return json.Unmarshal(b, (*plain)(s))
}

// prepare checks what the validator cannot read from the JSON alone and
// precomputes the messages, for s and every schema it leads to.
func (s *schema) prepare(c *contract) error {
	if s.prepared {
		return nil
	}
	s.prepared = true
	if len(s.unknown) > 0 {
		sort.Strings(s.unknown)
		return fmt.Errorf("schema keyword %q is not supported by the validator", s.unknown[0])
	}
	if s.Ref != "" {
		name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
		target := c.Components.Schemas[name]
		if !ok || target == nil {
			return fmt.Errorf("unresolvable $ref %s", s.Ref)
		}
		if err := target.prepare(c); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	switch {
	case len(s.Type) == 0:
	case s.Type[0] == '"':
		_ = json.Unmarshal(s.Type, &s.typ)
	default:
		var ts []string
		if err := json.Unmarshal(s.Type, &ts); err != nil || len(ts) != 2 || ts[1] != "null" {
			return fmt.Errorf("type %s is not supported", s.Type)
		}
		s.typ, s.nullable = ts[0], true
	}
	switch s.typ {
	case "", "boolean", "integer", "number", "string", "array", "object":
	default:
		return fmt.Errorf("type %q is not supported", s.typ)
	}
	if s.Format != "" && (s.typ != "integer" && s.typ != "number" || !numberFormats[s.Format]) {
		return fmt.Errorf("format %q is not supported", s.Format)
	}
	if s.Pattern != "" {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return err
		}
		s.re = re
	}
	if len(s.Enum) > 0 {
		vals := make([]string, len(s.Enum))
		for i, v := range s.Enum {
			str, ok := v.(string)
			if !ok {
				return fmt.Errorf("enum value %v is not a string", v)
			}
			vals[i] = str
		}
		s.msgEnum = `expected value to be one of "` + strings.Join(vals, ", ") + `"`
	}
	if a := bytes.TrimSpace(s.AdditionalProperties); len(a) > 0 {
		switch string(a) {
		case "false":
			s.closed = true
		case "true":
		default:
			s.addl = new(schema)
			if err := json.Unmarshal(a, s.addl); err != nil {
				return err
			}
		}
	}
	s.required = make(map[string]bool, len(s.Required))
	s.msgRequired = make(map[string]string, len(s.Required))
	for _, name := range s.Required {
		s.required[name] = true
		s.msgRequired[name] = "expected required property " + name + " to be present"
	}
	for name := range s.Properties {
		s.props = append(s.props, name)
	}
	sort.Strings(s.props)
	for _, sub := range s.subschemas() {
		if err := sub.prepare(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *schema) subschemas() []*schema {
	var out []*schema
	for _, name := range s.props {
		out = append(out, s.Properties[name])
	}
	if s.Items != nil {
		out = append(out, s.Items)
	}
	if s.addl != nil {
		out = append(out, s.addl)
	}
	return out
}

// contract is the part of the OpenAPI document the validator reads.
type contract struct {
	Paths      map[string]map[string]*specOperation `json:"paths"`
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

type specOperation struct {
	Parameters []struct {
		Name     string  `json:"name"`
		In       string  `json:"in"`
		Required bool    `json:"required"`
		Schema   *schema `json:"schema"`
	} `json:"parameters"`
	RequestBody *struct {
		Required bool `json:"required"`
		Content  map[string]struct {
			Schema *schema `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
}

// loadContract reads the schemas of requests (parameters, bodies and the
// schemas they refer to) from doc. The schemas of answers only document.
func loadContract(doc []byte) (*contract, error) {
	var c contract
	if err := json.Unmarshal(doc, &c); err != nil {
		return nil, fmt.Errorf("httpapi: the OpenAPI document: %w", err)
	}
	for path, ops := range c.Paths {
		for method, op := range ops {
			for _, p := range op.Parameters {
				if p.Schema == nil {
					return nil, fmt.Errorf("httpapi: %s %s: parameter %s has no schema", method, path, p.Name)
				}
				if err := p.Schema.prepare(&c); err != nil {
					return nil, fmt.Errorf("httpapi: %s %s: parameter %s: %w", method, path, p.Name, err)
				}
			}
			if rb := op.RequestBody; rb != nil {
				for ct, mt := range rb.Content {
					if mt.Schema == nil {
						continue
					}
					if ct != "application/json" {
						// A raw body (a file, a tar stream): bytes the
						// handler reads, which no schema constrains.
						if !rawSchema(mt.Schema) {
							return nil, fmt.Errorf("httpapi: %s %s: body %s: only a binary string is supported", method, path, ct)
						}
						continue
					}
					if err := mt.Schema.prepare(&c); err != nil {
						return nil, fmt.Errorf("httpapi: %s %s: body %s: %w", method, path, ct, err)
					}
				}
			}
		}
	}
	return &c, nil
}

// rawSchema reports whether s is the schema of raw bytes: a string of
// format binary (and its contentMediaType), nothing else.
func rawSchema(s *schema) bool {
	for _, k := range s.unknown {
		if k != "contentMediaType" { // documents the media type again
			return false
		}
	}
	return string(s.Type) == `"string"` && s.Format == "binary" && s.Ref == "" &&
		s.Properties == nil && s.Items == nil && s.Enum == nil && s.Pattern == "" &&
		s.MinLength == nil && s.MaxLength == nil
}

// theContract is the embedded document's, read on first use (no request
// before the first that has parameters or a body needs it, and start-up
// does not). A document that does not load is a build that cannot
// validate: it stops the daemon (TestContractLoads keeps that from being
// released).
var theContract = sync.OnceValue(func() *contract {
	c, err := loadContract(api.OpenAPI())
	if err != nil {
		panic(err)
	}
	return c
})

// operation returns the document's description of method path.
func (c *contract) operation(method, path string) (*specOperation, error) {
	op := c.Paths[path][strings.ToLower(method)]
	if op == nil {
		return nil, fmt.Errorf("httpapi: %s %s is not in the OpenAPI document (regenerate it: go test ./internal/httpapi -run TestOpenAPIUpToDate -update)", method, path)
	}
	return op, nil
}

// resolve follows a $ref to a component schema.
func (c *contract) resolve(s *schema) *schema {
	for s.Ref != "" {
		name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/")
		next := c.Components.Schemas[name]
		if !ok || next == nil {
			panic("httpapi: unresolvable $ref " + s.Ref)
		}
		s = next
	}
	return s
}

// location builds an error's location as the validator descends.
type location struct{ buf []byte }

func (l *location) push(s string) int {
	n := len(l.buf)
	if n > 0 {
		l.buf = append(l.buf, '.')
	}
	l.buf = append(l.buf, s...)
	return n
}

func (l *location) pushIndex(i int) int {
	n := len(l.buf)
	l.buf = append(l.buf, '[')
	l.buf = strconv.AppendInt(l.buf, int64(i), 10)
	l.buf = append(l.buf, ']')
	return n
}

func (l *location) pop(n int) { l.buf = l.buf[:n] }

func (l *location) String() string { return string(l.buf) }

type validation struct {
	c    *contract
	loc  location
	errs []error
}

func (v *validation) add(val any, msg string) {
	v.errs = append(v.errs, &fieldError{Location: v.loc.String(), Message: msg, Value: val})
}

// validate checks val, a value as encoding/json decodes into an any (or a
// parameter's string, int64 or bool), against s.
func (v *validation) validate(s *schema, val any) {
	s = v.c.resolve(s)
	if s.nullable && val == nil {
		return
	}
	switch s.typ {
	case "boolean":
		if _, ok := val.(bool); !ok {
			v.add(val, msgExpectedBoolean)
			return
		}
	case "integer", "number":
		var num float64
		switch n := val.(type) {
		case float64:
			num = n
		case int64:
			num = float64(n)
		default:
			if s.typ == "integer" {
				v.add(val, msgExpectedInteger)
			} else {
				v.add(val, msgExpectedNumber)
			}
			return
		}
		if s.typ == "integer" && num != math.Trunc(num) {
			v.add(val, msgExpectedInteger)
		}
		if s.Minimum != nil && num < *s.Minimum {
			v.add(val, fmt.Sprintf("expected number >= %v", *s.Minimum))
		}
		if s.Maximum != nil && num > *s.Maximum {
			v.add(val, fmt.Sprintf("expected number <= %v", *s.Maximum))
		}
	case "string":
		str, ok := val.(string)
		if !ok {
			v.add(val, msgExpectedString)
			return
		}
		if s.MinLength != nil && utf8.RuneCountInString(str) < *s.MinLength {
			v.add(str, "expected length >= "+strconv.Itoa(*s.MinLength))
		}
		if s.MaxLength != nil && utf8.RuneCountInString(str) > *s.MaxLength {
			v.add(str, "expected length <= "+strconv.Itoa(*s.MaxLength))
		}
		if s.re != nil && !s.re.MatchString(str) {
			v.add(val, "expected string to match pattern "+s.Pattern)
		}
	case "array":
		arr, ok := val.([]any)
		if !ok {
			v.add(val, msgExpectedArray)
			return
		}
		if s.MinItems != nil && len(arr) < *s.MinItems {
			v.add(arr, "expected array length >= "+strconv.Itoa(*s.MinItems))
		}
		if s.MaxItems != nil && len(arr) > *s.MaxItems {
			v.add(arr, "expected array length <= "+strconv.Itoa(*s.MaxItems))
		}
		if s.Items != nil {
			for i, item := range arr {
				n := v.loc.pushIndex(i)
				v.validate(s.Items, item)
				v.loc.pop(n)
			}
		}
	case "object":
		m, ok := val.(map[string]any)
		if !ok {
			v.add(val, msgExpectedObject)
			return
		}
		v.object(s, m)
	}
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, val) {
		v.add(val, s.msgEnum)
	}
}

// object checks an object's properties. Property names match
// case-insensitively when there is no exact match, as encoding/json decodes.
func (v *validation) object(s *schema, m map[string]any) {
	for _, k := range s.props {
		key, ok := k, false
		if _, ok = m[k]; !ok {
			key, ok = foldKey(m, k)
		}
		if !ok {
			if s.required[k] {
				v.add(m, s.msgRequired[k])
			}
			continue
		}
		if m[key] == nil && (!s.required[k] || s.nullable) {
			continue
		}
		n := v.loc.push(k)
		v.validate(s.Properties[k], m[key])
		v.loc.pop(n)
	}
	if !s.closed && s.addl == nil {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if _, ok := s.Properties[k]; ok {
			continue
		}
		if s.closed {
			if hasFold(s.props, k) {
				continue
			}
			n := v.loc.push(k)
			v.add(m, msgUnexpectedProperty)
			v.loc.pop(n)
			continue
		}
		n := v.loc.push(k)
		v.validate(s.addl, m[k])
		v.loc.pop(n)
	}
}

// foldKey finds a key of m equal to k under Unicode case folding; of
// several, the least in byte order.
func foldKey(m map[string]any, k string) (string, bool) {
	found, ok := "", false
	for actual := range m {
		if strings.EqualFold(actual, k) && (!ok || actual < found) {
			found, ok = actual, true
		}
	}
	return found, ok
}

func hasFold(names []string, k string) bool {
	for _, name := range names {
		if strings.EqualFold(name, k) {
			return true
		}
	}
	return false
}
