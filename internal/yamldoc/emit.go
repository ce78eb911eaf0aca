package yamldoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Marshal writes v as a YAML document in block style: v is first encoded
// with encoding/json (so its json tags, omitempty and MarshalJSON methods
// apply), and the JSON is then written out in the same order, strings
// quoted where a plain scalar would read back differently. Decode reads
// what Marshal writes back to the same value.
func Marshal(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	e := &emitter{dec: dec}
	if err := e.value(0, top); err != nil {
		return nil, fmt.Errorf("yamldoc: %w", err)
	}
	if e.b.Len() == 0 || e.b.Bytes()[e.b.Len()-1] != '\n' {
		e.b.WriteByte('\n')
	}
	return e.b.Bytes(), nil
}

type emitter struct {
	dec *json.Decoder
	b   bytes.Buffer
}

// where a value is written: at the top, after "key:" or after "- ".
type place int

const (
	top place = iota
	afterKey
	afterDash
)

func (e *emitter) value(indent int, at place) error {
	tok, err := e.dec.Token()
	if err != nil {
		return err
	}
	pad := strings.Repeat("  ", indent)
	switch t := tok.(type) {
	case json.Delim:
		if !e.dec.More() { // empty: [] or {}
			if _, err := e.dec.Token(); err != nil {
				return err
			}
			if at != top {
				e.b.WriteByte(' ')
			}
			e.b.WriteString(map[json.Delim]string{'[': "[]", '{': "{}"}[t])
			e.b.WriteByte('\n')
			return nil
		}
		first := true
		for e.dec.More() {
			// The first entry after "- " goes on the dash's line; after
			// "key:" the collection starts on the next line.
			switch {
			case first && at == afterDash:
				e.b.WriteByte(' ')
			case first && at == afterKey:
				e.b.WriteString("\n" + pad)
			default:
				e.b.WriteString(pad)
			}
			first = false
			if t == '[' {
				e.b.WriteString("-")
				if err := e.value(indent+1, afterDash); err != nil {
					return err
				}
				continue
			}
			k, err := e.dec.Token()
			if err != nil {
				return err
			}
			e.b.WriteString(scalarText(k.(string)))
			e.b.WriteByte(':')
			if err := e.value(indent+1, afterKey); err != nil {
				return err
			}
		}
		_, err := e.dec.Token()
		return err
	case string:
		e.space(at)
		e.b.WriteString(scalarText(t))
	case json.Number:
		e.space(at)
		// 1e+21 is a string in YAML 1.1, which Parse refuses: 1.0e+21.
		num := t.String()
		if m, x, ok := strings.Cut(strings.ToLower(num), "e"); ok && !strings.Contains(m, ".") {
			num = m + ".0e" + x
		}
		e.b.WriteString(num)
	case bool:
		e.space(at)
		fmt.Fprint(&e.b, t)
	case nil:
		e.space(at)
		e.b.WriteString("null")
	default:
		return fmt.Errorf("unexpected JSON token %v", tok)
	}
	e.b.WriteByte('\n')
	return nil
}

func (e *emitter) space(at place) {
	if at != top {
		e.b.WriteByte(' ')
	}
}

// scalarText writes s plain when it reads back as the same string, and
// double-quoted otherwise, every character Parse refuses raw (controls,
// a BOM) escaped.
func scalarText(s string) string {
	if plainSafe(s) {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r >= 0x7f && r < 0xa0 || r == '\uFEFF' || r == '\u2028' || r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// plainSafe reports a string that a plain scalar holds as it is: made of
// characters that are never indicators, not starting with one, and
// resolving to a string.
func plainSafe(s string) bool {
	if s == "" || strings.TrimSpace(s) != s {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("_./-+*=@ ()~$^", r):
		default:
			return false
		}
	}
	if c := s[0]; (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '/' && c != '_' {
		return false
	}
	p := &parser{l: Default}
	n := &Node{Text: s}
	ok := true
	func() {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		p.resolve(n)
	}()
	return ok && n.Tag == Str
}
