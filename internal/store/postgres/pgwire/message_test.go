package pgwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// msg builds a backend message.
func msg(typ byte, body []byte) []byte {
	b := []byte{typ}
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)+4))
	return append(b, body...)
}

func dataRow(cols ...[]byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(cols)))
	for _, c := range cols {
		if c == nil {
			b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(c)))
		b = append(b, c...)
	}
	return b
}

// parseAny reads every message of in and parses each as the client does,
// checking what it returns against its body.
func parseAny(t *testing.T, in []byte, maxRow int) {
	r := bytes.NewReader(in)
	buf := make([]byte, 0, 64)
	for {
		typ, body, err := readMessage(r, buf, maxRow)
		if err != nil {
			return
		}
		limit := maxMessage
		if typ == 'D' {
			limit = maxRow
		}
		if len(body) > limit {
			t.Fatalf("message %q of %d bytes read, above the bound %d", typ, len(body), limit)
		}
		switch typ {
		case 'D':
			row, err := parseDataRow(body)
			if err != nil {
				continue
			}
			n := 2
			for _, c := range row {
				n += 4 + len(c)
			}
			if n != len(body) {
				t.Fatalf("row columns cover %d bytes of a %d-byte body", n, len(body))
			}
		case 'E', 'N':
			_, _ = parseError(body)
		case 'A':
			_, _ = parseNotification(body)
		case 'C':
			_, _ = parseCommandComplete(body)
		case 'R':
			kind, data, err := parseAuth(body)
			if err == nil && kind == 10 {
				_, _ = parseSASLMechanisms(data)
			}
			if err == nil && (kind == 11 || kind == 12) {
				s := &scram{clientNonce: "abc", firstBare: "n=,r=abc", password: "pw"}
				if _, err := s.final(data); err == nil {
					_ = s.verify(data)
				}
			}
		}
	}
}

// FuzzMessages: no server message, however malformed, panics the parser
// or makes it read past a message or above its bound.
func FuzzMessages(f *testing.F) {
	f.Add(msg('D', dataRow([]byte("abc"), nil, []byte{})))
	f.Add(msg('E', []byte("SERROR\x00C23505\x00Mduplicate key\x00\x00")))
	f.Add(msg('A', append(binary.BigEndian.AppendUint32(nil, 7), "chan\x00payload\x00"...)))
	f.Add(msg('C', []byte("INSERT 0 1\x00")))
	f.Add(msg('R', append(binary.BigEndian.AppendUint32(nil, 10), "SCRAM-SHA-256\x00\x00"...)))
	f.Add(msg('R', append(binary.BigEndian.AppendUint32(nil, 11), "r=abcdef,s=c2FsdA==,i=1"...)))
	f.Add(msg('Z', []byte("I")))
	f.Add([]byte{'D', 0xFF, 0xFF, 0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, in []byte) {
		parseAny(t, in, 1<<16)
	})
}

func TestReadMessageBounds(t *testing.T) {
	tests := []struct {
		name   string
		in     []byte
		maxRow int
		want   error
	}{
		{"row within the bound", msg('D', dataRow(make([]byte, 100))), 200, nil},
		{"row above the bound", msg('D', dataRow(make([]byte, 300))), 200, errProtocol},
		{"other message above 1 MiB", []byte{'E', 0x00, 0x20, 0x00, 0x05}, 1 << 30, errProtocol},
		{"length below 4", []byte{'Z', 0, 0, 0, 3}, 200, errProtocol},
		{"truncated body", msg('C', []byte("SELECT 1\x00"))[:8], 200, io.ErrUnexpectedEOF},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readMessage(bytes.NewReader(tc.in), nil, tc.maxRow)
			if !errors.Is(err, tc.want) && (tc.want != nil || err != nil) {
				t.Fatalf("readMessage: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseDataRow(t *testing.T) {
	tests := []struct {
		name string
		body []byte
		want [][]byte
		ok   bool
	}{
		{"columns and NULL", dataRow([]byte("a"), nil, []byte{}), [][]byte{[]byte("a"), nil, {}}, true},
		{"column past the end", append(binary.BigEndian.AppendUint16(nil, 1), 0, 0, 0, 9, 'x'), nil, false},
		{"negative length", append(binary.BigEndian.AppendUint16(nil, 1), 0xFF, 0xFF, 0xFF, 0xFE), nil, false},
		{"bytes after the columns", append(dataRow([]byte("a")), 'z'), nil, false},
		{"more columns than sent", binary.BigEndian.AppendUint16(nil, 3), nil, false},
		{"too many columns", binary.BigEndian.AppendUint16(nil, maxColumns+1), nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			row, err := parseDataRow(tc.body)
			if (err == nil) != tc.ok {
				t.Fatalf("parseDataRow: %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				return
			}
			if len(row) != len(tc.want) {
				t.Fatalf("%d columns, want %d", len(row), len(tc.want))
			}
			for i := range row {
				if (row[i] == nil) != (tc.want[i] == nil) || !bytes.Equal(row[i], tc.want[i]) {
					t.Errorf("column %d = %q, want %q", i, row[i], tc.want[i])
				}
			}
		})
	}
}

func TestParseError(t *testing.T) {
	e, err := parseError([]byte("SERROR\x00C23505\x00Mduplicate key\x00nsessions_pkey\x00\x00"))
	if err != nil {
		t.Fatal(err)
	}
	if e.Code != "23505" || e.Message != "duplicate key" || e.ConstraintName != "sessions_pkey" || e.Severity != "ERROR" {
		t.Errorf("parsed %+v", e)
	}
	for _, bad := range []string{"SERROR", "SERROR\x00", "SERROR\x00\x00x", ""} {
		if _, err := parseError([]byte(bad)); err == nil {
			t.Errorf("parseError(%q) succeeded", bad)
		}
	}
}

func TestCommandTagRowsAffected(t *testing.T) {
	for tag, want := range map[CommandTag]int64{"INSERT 0 3": 3, "UPDATE 12": 12, "BEGIN": 0, "SELECT x": 0} {
		if got := tag.RowsAffected(); got != want {
			t.Errorf("%q.RowsAffected() = %d, want %d", tag, got, want)
		}
	}
}
