package yamldoc

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Value converts n into the values encoding/json decodes into an any
// (numbers as json.Number): map[string]any, []any, string, json.Number,
// bool or nil. Infinity and NaN, which JSON has no form for, are an
// *Error at their place. A nil n is nil.
func Value(n *Node) (any, error) {
	if n == nil {
		return nil, nil
	}
	switch n.Kind {
	case Mapping:
		m := make(map[string]any, len(n.Pairs))
		for _, kv := range n.Pairs {
			v, err := Value(kv.Value)
			if err != nil {
				return nil, err
			}
			m[kv.Key.Text] = v
		}
		return m, nil
	case Sequence:
		s := make([]any, len(n.Items))
		for i, it := range n.Items {
			v, err := Value(it)
			if err != nil {
				return nil, err
			}
			s[i] = v
		}
		return s, nil
	}
	switch n.Tag {
	case Null:
		return nil, nil
	case Bool:
		return n.Text == "true", nil
	case Int:
		return json.Number(n.Text), nil
	case Float:
		if IsInfOrNaN(n) {
			return nil, &Error{Line: n.Line, Column: n.Col, Message: "infinity and NaN are not allowed"}
		}
		return json.Number(n.Text), nil
	}
	return n.Text, nil
}

// IsInfOrNaN reports a float scalar that is infinite or not a number.
func IsInfOrNaN(n *Node) bool {
	return n.Kind == Scalar && n.Tag == Float && (n.Text == "+Inf" || n.Text == "-Inf" || n.Text == "NaN")
}

// Decode parses data within l and stores it in v (a pointer) as
// encoding/json would store the same document written in JSON, with three
// differences: a mapping key that is not a field of the struct it goes to
// (by its json name, exactly) is an error; a number or boolean where a
// string goes is the string as written (args: [--port, 8080]); and every
// error has a line and column. An empty document leaves v as it is.
func Decode(data []byte, v any, l Limits) error {
	n, err := Parse(data, l)
	if err != nil || n == nil {
		return err
	}
	return DecodeNode(n, v)
}

// DecodeNode stores n in v as Decode does.
func DecodeNode(n *Node, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return errors.New("yamldoc: Decode needs a non-nil pointer")
	}
	tree, err := typed(n, rv.Type().Elem(), "")
	if err != nil {
		return err
	}
	js, err := json.Marshal(tree)
	if err != nil {
		return &Error{Line: n.Line, Column: n.Col, Message: err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return locate(n, err)
	}
	return nil
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// typed is Value(n) shaped for a Go value of type t: it refuses, at its
// place, a key that names no field of the struct its mapping decodes
// into, and turns a number or boolean where t takes a string into the
// string as written.
func typed(n *Node, t reflect.Type, path string) (any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pt := reflect.PointerTo(t)
	if pt.Implements(jsonUnmarshaler) {
		return Value(n)
	}
	if !fits(n, t) && !pt.Implements(textUnmarshaler) {
		where := ""
		if path != "" {
			where = path + ": "
		}
		return nil, &Error{Line: n.Line, Column: n.Col, Message: fmt.Sprintf("%swant %s, not %s", where, t, n)}
	}
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch {
	case n.Kind == Scalar && (t.Kind() == reflect.String || pt.Implements(textUnmarshaler)):
		if n.Tag == Int || n.Tag == Float || n.Tag == Bool {
			if n.raw != "" {
				return n.raw, nil
			}
			return n.Text, nil
		}
	case n.Kind == Mapping && t.Kind() == reflect.Struct:
		m := make(map[string]any, len(n.Pairs))
		for _, kv := range n.Pairs {
			f, ok := field(t, kv.Key.Text)
			if !ok {
				return nil, &Error{Line: kv.Key.Line, Column: kv.Key.Col, Message: fmt.Sprintf("unknown field %q (known: %s)", kv.Key.Text, strings.Join(fieldNames(t), ", "))}
			}
			v, err := typed(kv.Value, f.Type, join(kv.Key.Text))
			if err != nil {
				return nil, err
			}
			m[kv.Key.Text] = v
		}
		return m, nil
	case n.Kind == Mapping && t.Kind() == reflect.Map:
		m := make(map[string]any, len(n.Pairs))
		for _, kv := range n.Pairs {
			v, err := typed(kv.Value, t.Elem(), join(kv.Key.Text))
			if err != nil {
				return nil, err
			}
			m[kv.Key.Text] = v
		}
		return m, nil
	case n.Kind == Sequence && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		s := make([]any, len(n.Items))
		for i, it := range n.Items {
			v, err := typed(it, t.Elem(), path+"["+strconv.Itoa(i)+"]")
			if err != nil {
				return nil, err
			}
			s[i] = v
		}
		return s, nil
	}
	return Value(n)
}

// fits reports whether n can be decoded into a t: null always, a
// number only into a number, a collection only into its kind.
func fits(n *Node, t reflect.Type) bool {
	if n.Kind == Scalar && n.Tag == Null || t.Kind() == reflect.Interface {
		return true
	}
	switch t.Kind() {
	case reflect.Bool:
		return n.Kind == Scalar && n.Tag == Bool
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return n.Kind == Scalar && n.Tag == Int
	case reflect.Float32, reflect.Float64:
		return n.Kind == Scalar && (n.Tag == Int || n.Tag == Float)
	case reflect.String:
		return n.Kind == Scalar
	case reflect.Struct, reflect.Map:
		return n.Kind == Mapping
	case reflect.Slice, reflect.Array:
		return n.Kind == Sequence
	}
	return true
}

// field finds the exported field of t whose json name is name.
func field(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.IsExported() && jsonName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && jsonName(f) != "-" {
			names = append(names, jsonName(f))
		}
	}
	return names
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "" {
		return f.Name
	}
	return name
}

// locate puts a JSON decoding error at the place of the value it names.
func locate(n *Node, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		at := n
		for _, seg := range strings.Split(te.Field, ".") {
			if seg == "" || at.Kind != Mapping {
				break
			}
			found := false
			for _, kv := range at.Pairs {
				if kv.Key.Text == seg {
					at, found = kv.Value, true
					break
				}
			}
			if !found {
				break
			}
		}
		what := te.Field
		if what != "" {
			what += ": "
		}
		return &Error{Line: at.Line, Column: at.Col, Message: fmt.Sprintf("%swant %s, not %s", what, te.Type, at)}
	}
	return &Error{Line: n.Line, Column: n.Col, Message: strings.TrimPrefix(err.Error(), "json: ")}
}
