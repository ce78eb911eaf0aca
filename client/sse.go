package client

import (
	"bytes"
	"fmt"
	"io"
	"time"
	"unicode/utf8"
)

// This file is a parser for text/event-stream as the WHATWG HTML standard
// defines it ("Server-sent events", §9.2.6 "Interpreting an event stream"):
//
//   - the stream is UTF-8; one leading BOM is dropped and invalid bytes become
//     U+FFFD (one per maximal invalid subpart, as the Encoding standard says);
//   - lines end with CRLF, LF or CR, and a CR at the end of a read is a whole
//     line ending: the parser never waits for the next byte to dispatch;
//   - a line starting with ':' is a comment; "field: value" drops one space
//     after the colon; a line without a colon is a field with an empty value;
//   - "data" lines append to the data buffer with a LF, "event" sets the type,
//     "id" sets the last event ID unless the value holds NUL, "retry" with
//     only ASCII digits sets the reconnection time, other fields are ignored;
//   - an empty line dispatches the event, unless the data buffer is empty,
//     and an event not terminated by an empty line before EOF is discarded.

const (
	// sseMaxLine bounds one line (field name, colon and value). Events carry
	// whole tool outputs and diffs on one line, so it is generous.
	sseMaxLine = 64 << 20
	// sseMaxData bounds the data of one event across all its data lines.
	sseMaxData = 64 << 20
	// sseInitialBuf is the read buffer's starting size; it grows as lines do.
	sseInitialBuf = 32 << 10
)

// errSSETooLong reports a line or event larger than the parser accepts.
var errSSETooLong = fmt.Errorf("event stream: line or event too long (%w)", ErrTooLarge)

// sseMessage is one dispatched event.
type sseMessage struct {
	// ID is the stream's last event ID when the event was dispatched; it
	// carries over from earlier events when this one had no id field.
	ID string
	// Event is the event type; "message" when the event did not name one.
	Event string
	// Data is the event's data lines joined with LF.
	Data string
}

// sseParser reads events from a text/event-stream. It is not safe for
// concurrent use.
type sseParser struct {
	r       io.Reader
	maxLine int
	maxData int

	buf        []byte
	start, end int   // unread bytes are buf[start:end]
	scanned    int   // bytes of buf[start:end] already searched for a line end
	rerr       error // sticky error from r
	skipLF     bool  // the last line ended with CR: a LF right after belongs to it
	bomChecked bool

	data      []byte // data buffer, each line followed by LF
	eventType string
	lastID    string
	retry     time.Duration
	retrySet  bool
}

func newSSEParser(r io.Reader) *sseParser {
	return &sseParser{r: r, maxLine: sseMaxLine, maxData: sseMaxData}
}

// newSSEParser returns a parser of r bounded by the client's
// Limits.Event: one line and one event's data.
func (c *Client) newSSEParser(r io.Reader) *sseParser {
	p := newSSEParser(r)
	if c.limits.Event > 0 {
		// A line is "data: " and the event; the data buffer holds the
		// event and a LF.
		p.maxLine = int(min(c.limits.Event+int64(len("data: ")), sseMaxLine))
		p.maxData = int(min(c.limits.Event+1, sseMaxData))
	}
	return p
}

// Retry returns the last reconnection time the stream asked for, if any.
func (p *sseParser) Retry() (time.Duration, bool) { return p.retry, p.retrySet }

// Next returns the next dispatched event. At the end of the stream it returns
// io.EOF (or the reader's error); an incomplete event is then discarded.
func (p *sseParser) Next() (sseMessage, error) {
	for {
		line, err := p.readLine()
		if err != nil {
			p.data, p.eventType = p.data[:0], ""
			return sseMessage{}, err
		}
		if len(line) == 0 {
			if msg, ok := p.dispatch(); ok {
				return msg, nil
			}
			continue
		}
		if err := p.field(line); err != nil {
			return sseMessage{}, err
		}
	}
}

// field processes one non-empty line.
func (p *sseParser) field(line []byte) error {
	if line[0] == ':' {
		return nil // comment
	}
	line = validUTF8(line)
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "event":
		p.eventType = string(value)
	case "data":
		if len(p.data)+len(value)+1 > p.maxData {
			return errSSETooLong
		}
		p.data = append(p.data, value...)
		p.data = append(p.data, '\n')
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			p.lastID = string(value)
		}
	case "retry":
		if ms, ok := parseDigits(value); ok {
			p.retry, p.retrySet = time.Duration(ms)*time.Millisecond, true
		}
	}
	return nil
}

// dispatch ends the current event; ok is false when there is nothing to
// dispatch (empty data buffer).
func (p *sseParser) dispatch() (sseMessage, bool) {
	if len(p.data) == 0 {
		p.eventType = ""
		return sseMessage{}, false
	}
	msg := sseMessage{ID: p.lastID, Event: p.eventType, Data: string(p.data[:len(p.data)-1])}
	if msg.Event == "" {
		msg.Event = "message"
	}
	p.eventType = ""
	if cap(p.data) > 1<<20 {
		p.data = nil // do not keep a huge buffer alive after one big event
	} else {
		p.data = p.data[:0]
	}
	return msg, true
}

// parseDigits parses a non-empty run of ASCII digits as milliseconds,
// saturating instead of overflowing.
func parseDigits(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	const limit = int64(time.Duration(1<<63-1) / time.Millisecond)
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < limit {
			n = min(n*10+int64(c-'0'), limit)
		}
	}
	return n, true
}

// readLine returns the next line without its terminator. The slice is valid
// until the next call.
func (p *sseParser) readLine() ([]byte, error) {
	for {
		if p.skipLF && p.start < p.end {
			if p.buf[p.start] == '\n' {
				p.start++
			}
			p.skipLF = false
		}
		if !p.bomChecked && (p.end-p.start >= 3 || p.rerr != nil || !bytes.HasPrefix(bom, p.buf[p.start:p.end])) {
			p.bomChecked = true
			if bytes.HasPrefix(p.buf[p.start:p.end], bom) {
				p.start += len(bom)
			}
		}
		if p.bomChecked && !p.skipLF {
			unread := p.buf[p.start:p.end]
			if i := bytes.IndexAny(unread[p.scanned:], "\r\n"); i >= 0 {
				i += p.scanned
				line := unread[:i]
				p.skipLF = unread[i] == '\r'
				p.start += i + 1
				p.scanned = 0
				return line, nil
			}
			p.scanned = len(unread)
			if p.scanned > p.maxLine {
				return nil, errSSETooLong
			}
		}
		if p.rerr != nil {
			return nil, p.rerr
		}
		p.fill()
	}
}

var bom = []byte("\xEF\xBB\xBF")

// fill reads more bytes, compacting or growing the buffer first.
func (p *sseParser) fill() {
	if p.start > 0 && p.start == p.end {
		p.start, p.end = 0, 0
	}
	if p.end == len(p.buf) {
		if p.start > 0 {
			p.end = copy(p.buf, p.buf[p.start:p.end])
			p.start = 0
		}
		if p.end == len(p.buf) {
			n := max(2*len(p.buf), sseInitialBuf)
			n = min(n, p.maxLine+2) // room for the longest line and its CRLF
			if n <= len(p.buf) {
				n = len(p.buf) + 1
			}
			nb := make([]byte, n)
			copy(nb, p.buf[:p.end])
			p.buf = nb
		}
	}
	n, err := p.r.Read(p.buf[p.end:])
	p.end += n
	if err != nil {
		p.rerr = err
	}
}

// validUTF8 returns b with every maximal invalid subpart replaced by U+FFFD,
// which is what a WHATWG UTF-8 decoder produces. b itself is returned when it
// is valid, which is the common case.
func validUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			out = append(out, b[i:i+n]...)
			i += n
			continue
		}
		out = append(out, "\uFFFD"...)
		i += invalidPrefixLen(b[i:])
	}
	return out
}

// invalidPrefixLen returns the length of the maximal subpart at the start of
// b: the longest prefix that could begin a valid sequence, and at least 1.
func invalidPrefixLen(b []byte) int {
	lo, hi := byte(0x80), byte(0xBF)
	var need int
	switch c := b[0]; {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for n <= need && n < len(b) && b[n] >= lo && b[n] <= hi {
		n++
		lo, hi = 0x80, 0xBF
	}
	return n
}
