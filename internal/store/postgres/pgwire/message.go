package pgwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Bounds on what the server sends: a message longer than its bound ends
// the connection instead of being read into memory.
const (
	// maxMessage bounds every message but data rows.
	maxMessage = 1 << 20
	// DefaultMaxRow bounds a data row (Config.MaxRow).
	DefaultMaxRow = 256 << 20
	// maxColumns bounds the columns of a row, and maxFields the fields of
	// an error or notice.
	maxColumns = 1600 // PostgreSQL's own limit on a table's columns
	maxFields  = 64
)

// errProtocol marks a message that does not parse: the connection is no
// longer usable.
var errProtocol = errors.New("pgwire: protocol violation")

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// readMessage reads one backend message (its type and body) from r into
// buf's storage when it fits; a data row ('D') may be up to maxRow bytes,
// any other message up to maxMessage. The body of a data row is always a
// new slice, the rows keeping it.
func readMessage(r io.Reader, buf []byte, maxRow int) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	typ := hdr[0]
	n := int64(binary.BigEndian.Uint32(hdr[1:])) - 4
	limit := int64(maxMessage)
	if typ == 'D' {
		limit = int64(maxRow)
	}
	if n < 0 || n > limit {
		return 0, nil, protoErr("message %q of %d bytes (at most %d)", typ, n, limit)
	}
	var body []byte
	if typ != 'D' && int(n) <= cap(buf) {
		body = buf[:n]
	} else {
		body = make([]byte, n)
	}
	if _, err := io.ReadFull(r, body); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return typ, body, nil
}

// parseDataRow splits a data row's body into its columns (nil: NULL),
// which share body's storage.
func parseDataRow(body []byte) ([][]byte, error) {
	if len(body) < 2 {
		return nil, protoErr("short data row")
	}
	n := int(binary.BigEndian.Uint16(body))
	if n > maxColumns {
		return nil, protoErr("data row of %d columns", n)
	}
	body = body[2:]
	row := make([][]byte, n)
	for i := range row {
		if len(body) < 4 {
			return nil, protoErr("short data row")
		}
		l := int32(binary.BigEndian.Uint32(body))
		body = body[4:]
		if l == -1 {
			continue
		}
		if l < 0 || int64(l) > int64(len(body)) {
			return nil, protoErr("data row column of %d bytes", l)
		}
		row[i] = body[:l:l]
		if row[i] == nil {
			row[i] = []byte{}
		}
		body = body[l:]
	}
	if len(body) != 0 {
		return nil, protoErr("%d bytes after a data row's columns", len(body))
	}
	return row, nil
}

// cstring returns the NUL-terminated string at the start of b and the rest.
func cstring(b []byte) (string, []byte, error) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", nil, protoErr("unterminated string")
	}
	return string(b[:i]), b[i+1:], nil
}

// parseError parses an ErrorResponse or NoticeResponse body.
func parseError(body []byte) (*Error, error) {
	e := &Error{}
	for range maxFields {
		if len(body) == 0 {
			return nil, protoErr("unterminated error fields")
		}
		code := body[0]
		if code == 0 {
			if len(body) != 1 {
				return nil, protoErr("bytes after an error's fields")
			}
			return e, nil
		}
		var v string
		var err error
		if v, body, err = cstring(body[1:]); err != nil {
			return nil, err
		}
		switch code {
		case 'S':
			e.Severity = v
		case 'C':
			e.Code = v
		case 'M':
			e.Message = v
		case 'D':
			e.Detail = v
		case 'H':
			e.Hint = v
		case 'W':
			e.Where = v
		case 's':
			e.SchemaName = v
		case 't':
			e.TableName = v
		case 'c':
			e.ColumnName = v
		case 'n':
			e.ConstraintName = v
		}
	}
	return nil, protoErr("error of more than %d fields", maxFields)
}

// Notification is one NOTIFY received.
type Notification struct {
	PID     uint32
	Channel string
	Payload string
}

func parseNotification(body []byte) (*Notification, error) {
	if len(body) < 4 {
		return nil, protoErr("short notification")
	}
	n := &Notification{PID: binary.BigEndian.Uint32(body)}
	var err error
	rest := body[4:]
	if n.Channel, rest, err = cstring(rest); err != nil {
		return nil, err
	}
	if n.Payload, rest, err = cstring(rest); err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, protoErr("bytes after a notification")
	}
	return n, nil
}

// parseCommandComplete returns the command tag.
func parseCommandComplete(body []byte) (CommandTag, error) {
	s, rest, err := cstring(body)
	if err != nil || len(rest) != 0 {
		return "", protoErr("malformed command tag")
	}
	return CommandTag(s), nil
}

// parseAuth returns an Authentication message's kind and data.
func parseAuth(body []byte) (uint32, []byte, error) {
	if len(body) < 4 {
		return 0, nil, protoErr("short authentication message")
	}
	return binary.BigEndian.Uint32(body), body[4:], nil
}

// parseSASLMechanisms lists the mechanisms of an AuthenticationSASL.
func parseSASLMechanisms(b []byte) ([]string, error) {
	var ms []string
	for range 16 {
		if len(b) == 0 {
			return nil, protoErr("unterminated SASL mechanisms")
		}
		if b[0] == 0 {
			return ms, nil
		}
		var m string
		var err error
		if m, b, err = cstring(b); err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return nil, protoErr("too many SASL mechanisms")
}

// Frontend messages are built by appending to a buffer.

// msgStart appends a message header of type typ with a length to fill in
// by msgEnd; it returns where the message starts.
func msgStart(b []byte, typ byte) ([]byte, int) {
	b = append(b, typ)
	return append(b, 0, 0, 0, 0), len(b)
}

func msgEnd(b []byte, start int) ([]byte, error) {
	n := len(b) - start
	if n > math.MaxInt32 {
		return nil, errors.New("pgwire: message too large")
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

func appendCString(b []byte, s string) []byte {
	return append(append(b, s...), 0)
}

// appendParse appends Parse (name, sql, parameter types).
func appendParse(b []byte, name, sql string, oids []uint32) ([]byte, error) {
	if len(oids) > math.MaxUint16 {
		return nil, fmt.Errorf("pgwire: %d parameters (at most %d)", len(oids), math.MaxUint16)
	}
	b, start := msgStart(b, 'P')
	b = appendCString(b, name)
	b = appendCString(b, sql)
	b = binary.BigEndian.AppendUint16(b, uint16(len(oids)))
	for _, o := range oids {
		b = binary.BigEndian.AppendUint32(b, o)
	}
	return msgEnd(b, start)
}

// appendBind appends Bind of the unnamed portal to statement name, every
// parameter and every result column in the binary format.
func appendBind(b []byte, name string, vals [][]byte) ([]byte, error) {
	if len(vals) > math.MaxUint16 {
		return nil, fmt.Errorf("pgwire: %d parameters (at most %d)", len(vals), math.MaxUint16)
	}
	b, start := msgStart(b, 'B')
	b = append(b, 0) // unnamed portal
	b = appendCString(b, name)
	b = binary.BigEndian.AppendUint16(b, 1)
	b = binary.BigEndian.AppendUint16(b, 1) // every parameter binary
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		if v == nil {
			b = binary.BigEndian.AppendUint32(b, math.MaxUint32) // -1: NULL
			continue
		}
		if len(v) > math.MaxInt32 {
			return nil, errors.New("pgwire: parameter too large")
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	b = binary.BigEndian.AppendUint16(b, 1)
	b = binary.BigEndian.AppendUint16(b, 1) // every result column binary
	return msgEnd(b, start)
}

// appendExecute appends Execute of the unnamed portal, all rows.
func appendExecute(b []byte) []byte {
	b, start := msgStart(b, 'E')
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0)
	b, _ = msgEnd(b, start)
	return b
}

func appendSimple(b []byte, typ byte) []byte {
	b, start := msgStart(b, typ)
	b, _ = msgEnd(b, start)
	return b
}

func appendQuery(b []byte, sql string) []byte {
	b, start := msgStart(b, 'Q')
	b = appendCString(b, sql)
	b, _ = msgEnd(b, start)
	return b
}
