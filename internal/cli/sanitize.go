package cli

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/event"
)

// Everything a session shows (agent text, command and tool output, file
// names, permission titles, questions, error messages) comes from the agent
// or from code it ran: it is hostile, and a terminal obeys the control
// sequences in it (cursor moves, line erase, OSC 52 clipboard writes, title
// changes, C1 CSI). This file is where that text is made inert before the
// renderer adds its own colour codes, which are then the only control
// sequences that reach a terminal:
//
//   - decodeForTerminal is how the renderer and the prompts of run read an
//     event: every string of the envelope and of the payload passes through
//     termSafe, whatever field it is in.
//   - the stop functions of a follower get the event as decodeForTerminal
//     returns it, so what they put in an error is inert too.
//   - errText is how an error is printed (Execute, the follower's notes): an
//     error may quote the agent (a failed turn's message) or the daemon.
//   - exec passes its output through termSafe when it goes to a terminal.
//   - jsonTerminal escapes what JSON leaves raw (DEL, C1, bidi controls) in
//     JSON written to a terminal (--json).

// termSafe returns s with every character that can steer a terminal made
// visible: C0 controls other than newline and tab as \xNN (ESC included, so
// no escape sequence survives), DEL as \x7f, C1 controls (U+0080-U+009F) and
// the bidirectional controls that reorder a line as \uNNNN, and bytes that
// are not UTF-8 as \xNN. A CR right before a LF is dropped: it moves
// nothing the LF does not.
func termSafe(s string) string {
	i := 0
	for i < len(s) && safeByte(s[i]) {
		i++
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		if c := s[i]; safeByte(c) {
			b.WriteByte(c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
			size = 1
		case r == '\r' && i+1 < len(s) && s[i+1] == '\n':
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case isC1(r) || isBidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// errText returns err's message made inert by termSafe.
func errText(err error) string { return termSafe(err.Error()) }

// safeByte reports whether c is printable ASCII, a newline or a tab.
func safeByte(c byte) bool {
	return c >= 0x20 && c < 0x7f || c == '\n' || c == '\t'
}

func isC1(r rune) bool { return r >= 0x80 && r <= 0x9f }

// isBidiControl reports the characters that reorder the text around them
// (Unicode's Bidi_Control property): with them a line can display
// differently from what it says.
func isBidiControl(r rune) bool {
	switch {
	case r == 0x061c, r == 0x200e, r == 0x200f:
		return true
	case r >= 0x202a && r <= 0x202e:
		return true
	case r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}

// decodeForTerminal decodes ev's payload and returns it and the envelope
// with every string passed through termSafe, in whatever field it is, so
// that a field added to the schema later is covered too. It is the only way
// the renderer and the prompts read an event.
func decodeForTerminal(ev event.Event) (event.Event, event.Payload, error) {
	p, err := ev.Decode()
	ev.Data, ev.Raw = nil, nil
	sanitizeValue(reflect.ValueOf(&ev).Elem())
	if err != nil {
		return ev, nil, fmt.Errorf("%s", termSafe(err.Error()))
	}
	sanitizeValue(reflect.ValueOf(p))
	return ev, p, nil
}

// sanitizeValue applies termSafe to every string and byte slice reachable
// from v (structs, pointers, slices, arrays, interfaces), in place.
func sanitizeValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			sanitizeValue(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				sanitizeValue(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if v.CanSet() && !v.IsNil() {
				v.SetBytes([]byte(termSafe(string(v.Bytes()))))
			}
			return
		}
		fallthrough
	case reflect.Array:
		for i := range v.Len() {
			sanitizeValue(v.Index(i))
		}
	case reflect.Map:
		// No payload has a map today; rebuild one if it ever does.
		if v.IsNil() || !v.CanSet() {
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			k := reflect.New(v.Type().Key()).Elem()
			k.Set(it.Key())
			sanitizeValue(k)
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(it.Value())
			sanitizeValue(e)
			m.SetMapIndex(k, e)
		}
		v.Set(m)
	case reflect.String:
		if v.CanSet() {
			v.SetString(termSafe(v.String()))
		}
	}
}

// jsonTerminal returns w, or, when w is a terminal, a writer that rewrites
// the characters JSON encoders leave raw but a terminal obeys (DEL, C1
// controls, bidi controls) as \uNNNN escapes. The JSON means the same: such
// characters only ever appear inside JSON strings. Each Write must hold
// whole JSON texts, as json.Encoder's do.
func (a *app) jsonTerminal(w io.Writer) io.Writer {
	if !a.env.isTerminal(w) {
		return w
	}
	return jsonEscaper{w}
}

type jsonEscaper struct{ w io.Writer }

func (j jsonEscaper) Write(p []byte) (int, error) {
	if _, err := j.w.Write(escapeJSONControls(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// escapeJSONControls rewrites DEL, C1 and bidi controls in JSON text as
// \uNNNN; bytes that are not UTF-8 become U+FFFD, as a JSON decoder would
// read them.
func escapeJSONControls(p []byte) []byte {
	var out bytes.Buffer
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			out.WriteString(`\ufffd`)
			size = 1
		case r == 0x7f || isC1(r) || isBidiControl(r):
			fmt.Fprintf(&out, `\u%04x`, r)
		default:
			out.Write(p[i : i+size])
		}
		i += size
	}
	return out.Bytes()
}
