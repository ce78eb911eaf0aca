package yamldoc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/goccy/go-yaml"
	goccyparser "github.com/goccy/go-yaml/parser"
	yamlv4 "go.yaml.in/yaml/v4"
)

// The oracle is github.com/goccy/go-yaml, the parser agentbox used before
// this package; it is linked into tests only.

// oracle decodes data as goccy/go-yaml did for agentbox: one document,
// into an any. ok is false when goccy refuses it.
func oracle(data []byte) (v any, ok bool) {
	f, err := goccyparser.ParseBytes(data, 0)
	if err != nil {
		return nil, false
	}
	docs := 0
	for _, d := range f.Docs {
		if d != nil && d.Body != nil {
			docs++
		}
	}
	if docs > 1 {
		return nil, false
	}
	if err := yaml.UnmarshalWithOptions(data, &v, yaml.Strict()); err != nil {
		return nil, false
	}
	return v, true
}

// normal is v as encoding/json reads it back: numbers float64, so both
// parsers' values compare.
func normal(v any) (any, bool) {
	js, err := json.Marshal(stringKeys(v))
	if err != nil {
		return nil, false
	}
	var out any
	if err := json.Unmarshal(js, &out); err != nil {
		return nil, false
	}
	return out, true
}

func sameValue(a, b any) bool {
	na, ok1 := normal(a)
	nb, ok2 := normal(b)
	return ok1 && ok2 && reflect.DeepEqual(na, nb)
}

// referee decodes data with go.yaml.in/yaml/v4 (test-only too), the
// YAML 1.2 parser that settles the inputs goccy and this package disagree
// on accepting: goccy tolerates some invalid YAML, and refuses some valid.
func referee(data []byte) (v any, ok bool) {
	dec := yamlv4.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&v); err != nil && !errors.Is(err, io.EOF) {
		return nil, false
	}
	var more any
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return v, true
}

// stringKeys turns go-yaml v4's map[any]any (a mapping with a key that
// is not a string) into a map[string]any, keys printed.
func stringKeys(v any) any {
	switch v := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[fmt.Sprint(k)] = stringKeys(e)
		}
		return m
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = stringKeys(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = stringKeys(e)
		}
		return s
	}
	return v
}
