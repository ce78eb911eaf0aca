package cli

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/inert"
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
//   - jsonTerminal escapes what JSON leaves raw (DEL, C1, bidi controls, ...)
//     in JSON written to a terminal (--json).
//
// Which characters are unsafe is decided in one place, package inert, which
// the sandbox's reports of its processes use too.

// termSafe returns s with every character that can steer a terminal or
// hide itself (inert.Unsafe: C0 controls other than newline and tab, DEL,
// C1 controls, bidi and zero-width characters, line separators, private-use
// and unassigned code points) written as a visible escape (\x1b, \u202e),
// and bytes that are not UTF-8 as \xNN. A CR right before a LF is dropped:
// it moves nothing the LF does not.
func termSafe(s string) string {
	return inert.String(strings.ReplaceAll(s, "\r\n", "\n"), keepNewlineTab)
}

// errText returns err's message made inert by termSafe.
func errText(err error) string { return termSafe(err.Error()) }

// keepNewlineTab keeps the two controls a terminal needs for text laid out
// in lines.
func keepNewlineTab(r rune) bool { return r == '\n' || r == '\t' }

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
// the characters JSON encoders leave raw but a terminal obeys or a reader
// cannot see (DEL, C1, bidi and zero-width characters, ...: inert.Unsafe)
// as \uNNNN escapes. The JSON means the same: such
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

// escapeJSONControls rewrites the characters inert.Unsafe names that JSON
// encoders leave raw (all but C0 controls, which a JSON string never holds
// raw and which are only whitespace outside one) as \uNNNN escapes, a
// surrogate pair above U+FFFF; bytes that are not UTF-8 become U+FFFD, as a
// JSON decoder would read them.
func escapeJSONControls(p []byte) []byte {
	var out bytes.Buffer
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRune(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			out.WriteString(`\ufffd`)
			size = 1
		case r >= 0x20 && inert.Unsafe(r):
			out.WriteString(inert.EscapeJSON(r))
		default:
			out.Write(p[i : i+size])
		}
		i += size
	}
	return out.Bytes()
}
