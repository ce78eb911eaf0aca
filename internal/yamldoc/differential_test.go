package yamldoc

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// Refusals are the documented differences from YAML (and from goccy,
// the oracle): what goccy accepts and this package refuses, by the start
// of the message each refusal gives.
var refusals = []string{
	"YAML anchors",
	"YAML aliases",
	"YAML tags",
	"YAML directives",
	"YAML merge keys",
	"is reserved in YAML",
	"complex mapping keys",
	"a key: value pair inside [...]",
	"want key: value",                     // {a} (a key without a value) in a flow mapping
	"reads as",                            // 0x10: (goccy: the key "16")
	"an empty sequence entry followed by", // goccy and libyaml read the next line as its content
	"a null key",                          // ~: x, null: x
	"key %q given twice",                  // duplicate keys
	"a tab in indentation",                // tabs as indentation
	"a number with a leading zero",        // 010: octal in YAML 1.1
	"not a number in YAML 1.2",            // 0b1, 1_000, 1:30
	"a string in YAML 1.1",                // 1e3: goccy reads a string
	"integer out of range",                // past uint64 (goccy: a string)
	"number out of range",                 // 1e400 (goccy: a string)
	"infinity and NaN are not allowed",    // no JSON form
	"one YAML document only",              // a second document
	"control character",                   // C0/C1 controls, DEL, a BOM inside
	"the document is not UTF-8",           // goccy reads bytes as they come
	"a comment needs a space before its #",
	"a mapping key must fit on one line",
	"a space must follow the colon after a key", // "a":1 in a block mapping
	"more than",                                 // Limits
	"the limit is",
	"escape \\", // a lone UTF-16 surrogate
}

// refused reports whether err is one of the documented refusals.
func refused(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	for _, r := range refusals {
		prefix, _, _ := strings.Cut(r, "%")
		if strings.Contains(e.Message, prefix) {
			return true
		}
	}
	return false
}

// decodeAny is Parse then Value.
func decodeAny(data []byte) (any, error) {
	n, err := Parse(data, Limits{})
	if err != nil {
		return nil, err
	}
	return Value(n)
}

// FuzzDifferential holds the parser to goccy/go-yaml: a document both
// accept decodes to equal values (or, where goccy misreads it, to the
// value the referee, go-yaml v4, reads); a document only goccy accepts is
// one of the documented refusals, or invalid YAML goccy tolerates (the
// referee refuses it too); a document only this package accepts is valid
// YAML goccy refuses, which the referee reads to the same value.
func FuzzDifferential(f *testing.F) {
	for _, s := range seeds(f) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mine, err := decodeAny(data)
		// goccy reads a leading byte order mark as text of the first key.
		want, ok := oracle(bytes.TrimPrefix(data, []byte("\uFEFF")))
		switch {
		case err == nil && ok:
			// Where goccy misreads valid YAML, the referee reads what this
			// package does.
			if ref, valid := referee(data); !sameValue(mine, want) && (!valid || !sameValue(mine, ref)) {
				t.Fatalf("%q:\n mine  %#v\n goccy %#v", data, mine, want)
			}
		case err != nil && ok:
			// A documented refusal, or invalid YAML goccy tolerates
			// (the referee refuses it too).
			if _, valid := referee(data); !refused(err) && valid {
				t.Fatalf("%q: refused (%v), goccy reads %#v", data, err, want)
			}
		case err == nil && !ok:
			// Valid YAML goccy refuses: the referee reads the same.
			if ref, valid := referee(data); !valid || !sameValue(mine, ref) {
				t.Fatalf("%q: goccy refuses it, this package reads %#v (go-yaml v4: %#v, %v)", data, mine, ref, valid)
			}
		}
	})
}
