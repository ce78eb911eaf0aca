package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/event"
)

func FuzzParseSeq(f *testing.F) {
	for _, s := range []string{"0", "1", "42", "007", "9223372036854775807", "9223372036854775808", "-1", "+1", " 1", "1 ", "", "abc", "0x1", "１"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSeq(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("parseSeq(%q) = %d", s, n)
		}
		// Accepted values are plain decimal numbers that round-trip.
		if strings.TrimLeft(s, "0") != strings.TrimLeft(strconv.FormatInt(n, 10), "0") {
			t.Fatalf("parseSeq(%q) = %d", s, n)
		}
	})
}

func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer abc", "BEARER a.b-c_d~e+f/g==", "Bearer  abc", "Bearer", "Bearer ", "Basic abc", "Bearer a b", "Bearer ==", "Bearer a=b", "Bearer \x7f", "Bearer é", "Bearerabc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := parseBearer(h)
		if !ok {
			if tok != "" {
				t.Fatalf("parseBearer(%q) rejected but returned %q", h, tok)
			}
			return
		}
		if tok == "" || !validToken(tok) || !strings.HasSuffix(h, tok) {
			t.Fatalf("parseBearer(%q) = %q", h, tok)
		}
		if !strings.EqualFold(h[:7], "bearer ") {
			t.Fatalf("parseBearer(%q) accepted another scheme", h)
		}
	})
}

// FuzzWriteSSE checks that no event content (types and data come from
// agents) can break the SSE framing: one frame, its id equal to seq, and
// data that decodes back to the event.
func FuzzWriteSSE(f *testing.F) {
	f.Add(int64(1), "item.delta", "hello")
	f.Add(int64(7), "x\nid: 9\n\ndata: evil", "line1\nline2\r\n\n")
	f.Add(int64(0), "", "\u2028\x00")
	f.Fuzz(func(t *testing.T, seq int64, typ, text string) {
		ev := event.New(event.SourceAgent, &event.Native{NativeType: text})
		ev.Seq, ev.Type = seq, event.Type(typ)
		var buf bytes.Buffer
		if err := writeSSE(&buf, ev); err != nil {
			t.Fatal(err)
		}
		frame := buf.String()
		if !strings.HasSuffix(frame, "\n\n") || strings.Count(frame, "\n\n") != 1 {
			t.Fatalf("not one frame: %q", frame)
		}
		sc := bufio.NewScanner(strings.NewReader(frame))
		sc.Buffer(nil, 1<<20)
		var id, data string
		ids := 0
		for sc.Scan() {
			name, value, _ := strings.Cut(sc.Text(), ": ")
			switch name {
			case "id":
				id = value
				ids++
			case "data":
				data += value
			}
		}
		if ids != 1 || id != strconv.FormatInt(seq, 10) {
			t.Fatalf("id lines in %q", frame)
		}
		var back event.Event
		if err := json.Unmarshal([]byte(data), &back); err != nil {
			t.Fatalf("data %q: %v", data, err)
		}
		if back.Seq != seq || !bytes.Equal(back.Data, ev.Data) {
			t.Fatalf("round trip: %+v vs %+v", back, ev)
		}
	})
}

// FuzzUTF8Stream: validating a body in pieces (split anywhere, as reads
// split it) agrees with utf8.Valid on the whole.
func FuzzUTF8Stream(f *testing.F) {
	for _, s := range []string{"", "ascii", "héllo ✓ 𝄞", "a\xffb", "\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xef\xbf\xbd", "\xc3"} {
		f.Add([]byte(s), uint8(1), uint8(2))
	}
	f.Fuzz(func(t *testing.T, b []byte, cut1, cut2 uint8) {
		var u utf8Stream
		ok := true
		rest := b
		for _, c := range []int{int(cut1), int(cut2), len(b)} {
			c = min(c, len(rest))
			if !u.write(rest[:c]) {
				ok = false
				break
			}
			rest = rest[c:]
		}
		ok = ok && u.done()
		if ok != utf8.Valid(b) {
			t.Fatalf("stream says %v, utf8.Valid says %v for %q split at %d,%d", ok, utf8.Valid(b), b, cut1, cut2)
		}
	})
}

// FuzzSurrogateScan: on valid JSON, the scan refuses exactly the texts that
// encoding/json would decode with a U+FFFD the text did not spell itself,
// split anywhere as reads split it.
func FuzzSurrogateScan(f *testing.F) {
	for _, s := range []string{`"a"`, `{"k":"\ud800"}`, `["\ud834\udd1e"]`, `"\udc00"`, `"\\ud800"`, `{"\ud83d":1}`, `"\ud83d\n"`, `"\ufffd"`, `"\ud83d\ud83d"`, `"\u00e9"`} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, cut uint8) {
		if !json.Valid(b) || !utf8.Valid(b) || bytes.Contains(b, []byte("\uFFFD")) ||
			bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`)) {
			return
		}
		var s surrogateScan
		c := min(int(cut), len(b))
		ok := s.write(b[:c]) && s.write(b[c:])
		var v any
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if replaced := hasReplacement(v); ok == replaced {
			t.Fatalf("scan ok=%v but decoding replaced=%v for %q", ok, replaced, b)
		}
	})
}

func hasReplacement(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, utf8.RuneError)
	case []any:
		for _, e := range v {
			if hasReplacement(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, utf8.RuneError) || hasReplacement(e) {
				return true
			}
		}
	}
	return false
}
