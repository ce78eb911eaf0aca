package fakellm

import (
	"maps"
	"math"
	"slices"
	"strings"
)

// Bounds of fillSchema: the depth of the recursion (recursive $refs) and
// the number of values built (nested arrays and objects).
const (
	maxSchemaDepth  = 12
	maxSchemaValues = 10000
)

// fillSchema returns a small value valid for a JSON schema, as simple as
// the schema allows: the const or first enum value, the first non-null
// alternative of anyOf/oneOf, every property of an object, empty arrays
// (or minItems elements), integers and numbers at least 1 and within
// minimum/maximum, false, and "fake" for strings. Gemini's upper-case type
// names (OBJECT, STRING, …) and local $refs (#/$defs/…, #/definitions/…)
// are understood.
func fillSchema(schema map[string]any) any {
	f := filler{root: schema, budget: maxSchemaValues}
	return f.fill(schema, 0)
}

type filler struct {
	root   map[string]any
	budget int
}

func (f *filler) fill(s map[string]any, depth int) any {
	f.budget--
	if s == nil || depth > maxSchemaDepth || f.budget < 0 {
		return "fake"
	}
	if ref := str(s["$ref"]); ref != "" {
		return f.fill(resolveRef(f.root, ref), depth+1)
	}
	if v, ok := s["const"]; ok {
		return v
	}
	if e := arr(s["enum"]); len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"anyOf", "oneOf"} {
		alts := arr(s[k])
		for _, a := range alts {
			if m := obj(a); m != nil && strings.ToLower(str(m["type"])) != "null" {
				return f.fill(m, depth+1)
			}
		}
		if len(alts) > 0 {
			return nil
		}
	}
	if all := arr(s["allOf"]); len(all) > 0 {
		merged := map[string]any{}
		for _, a := range all {
			maps.Copy(merged, obj(a))
		}
		return f.fill(merged, depth+1)
	}
	typ := ""
	switch t := s["type"].(type) {
	case string:
		typ = strings.ToLower(t)
	case []any:
		for _, x := range t {
			if n := strings.ToLower(str(x)); n != "null" && n != "" {
				typ = n
				break
			}
		}
	}
	if typ == "" {
		switch {
		case s["properties"] != nil:
			typ = "object"
		case s["items"] != nil:
			typ = "array"
		}
	}
	switch typ {
	case "object":
		out := map[string]any{}
		props := obj(s["properties"])
		for _, k := range slices.Sorted(maps.Keys(props)) {
			out[k] = f.fill(obj(props[k]), depth+1)
		}
		return out
	case "array":
		n, _ := s["minItems"].(float64)
		out := []any{}
		for i := 0; i < int(min(n, 16)); i++ {
			out = append(out, f.fill(obj(s["items"]), depth+1))
		}
		return out
	case "integer", "number":
		v := 1.0
		if m, ok := s["minimum"].(float64); ok && m > v {
			v = m
		}
		if m, ok := s["exclusiveMinimum"].(float64); ok && m >= v {
			v = math.Floor(m) + 1
		}
		if m, ok := s["maximum"].(float64); ok && m < v {
			v = m
		}
		if typ == "integer" {
			v = math.Ceil(v)
		}
		return v
	case "boolean":
		return false
	case "null":
		return nil
	case "string":
		return "fake"
	}
	return "fake"
}

// resolveRef returns the schema a local JSON pointer names, nil if none.
func resolveRef(root map[string]any, ref string) map[string]any {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	cur := root
	for seg := range strings.SplitSeq(p, "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		cur = obj(cur[seg])
		if cur == nil {
			return nil
		}
	}
	return cur
}
