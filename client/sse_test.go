package client

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// parseAll parses everything r yields; retry is the last retry field seen.
func parseAll(r io.Reader) (msgs []sseMessage, retry time.Duration, err error) {
	p := newSSEParser(r)
	for {
		m, err := p.Next()
		if err != nil {
			retry, _ = p.Retry()
			return msgs, retry, err
		}
		msgs = append(msgs, m)
	}
}

func TestSSEParse(t *testing.T) {
	t.Parallel()
	msg := func(id, ev, data string) sseMessage { return sseMessage{ID: id, Event: ev, Data: data} }
	tests := []struct {
		name  string
		in    string
		want  []sseMessage
		retry time.Duration
	}{
		{name: "empty", in: ""},
		{name: "one event", in: "data: hello\n\n", want: []sseMessage{msg("", "message", "hello")}},
		{
			name: "spec: multi-line data",
			in:   "data: YHOO\ndata: +2\ndata: 10\n\n",
			want: []sseMessage{msg("", "message", "YHOO\n+2\n10")},
		},
		{
			name: "spec: comments, ids and spaces",
			in:   ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
			want: []sseMessage{msg("1", "message", "first event"), msg("", "message", "second event"), msg("", "message", " third event")},
		},
		{
			name: "spec: empty data lines and a trailing partial event",
			in:   "data\n\ndata\ndata\n\ndata:",
			want: []sseMessage{msg("", "message", ""), msg("", "message", "\n")},
		},
		{
			name: "spec: the space after the colon is optional",
			in:   "data:test\n\ndata: test\n\n",
			want: []sseMessage{msg("", "message", "test"), msg("", "message", "test")},
		},
		{
			name: "event type, id and data as the daemon sends them",
			in:   "id: 7\nevent: turn.started\ndata: {\"seq\":7}\n\n",
			want: []sseMessage{msg("7", "turn.started", `{"seq":7}`)},
		},
		{
			name: "event type resets after each event; id carries over",
			in:   "event: a\nid: 3\ndata: 1\n\ndata: 2\n\n",
			want: []sseMessage{msg("3", "a", "1"), msg("3", "message", "2")},
		},
		{
			name: "event type without data is dropped with it",
			in:   "event: ghost\n\ndata: x\n\n",
			want: []sseMessage{msg("", "message", "x")},
		},
		{
			name: "id without data still sets the last event id",
			in:   "id: 42\n\ndata: x\n\n",
			want: []sseMessage{msg("42", "message", "x")},
		},
		{
			name: "id holding NUL is ignored",
			in:   "id: 1\n\nid: a\x00b\ndata: x\n\n",
			want: []sseMessage{msg("1", "message", "x")},
		},
		{name: "CRLF", in: "id: 1\r\ndata: a\r\ndata: b\r\n\r\n", want: []sseMessage{msg("1", "message", "a\nb")}},
		{name: "CR", in: "id: 1\rdata: a\rdata: b\r\r", want: []sseMessage{msg("1", "message", "a\nb")}},
		{name: "mixed endings", in: "data: a\r\ndata: b\rdata: c\n\r\n", want: []sseMessage{msg("", "message", "a\nb\nc")}},
		{name: "CR CR is two lines", in: "data: a\r\rdata: b\n\n", want: []sseMessage{msg("", "message", "a"), msg("", "message", "b")}},
		{name: "BOM is dropped once", in: "\xEF\xBB\xBFdata: a\n\n", want: []sseMessage{msg("", "message", "a")}},
		{name: "second BOM is data", in: "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\ndata: b\n\n", want: []sseMessage{msg("", "message", "b")}},
		{name: "broken BOM spoils the first field", in: "\xEF\xBBdata: a\n\ndata: b\n\n", want: []sseMessage{msg("", "message", "b")}},
		{name: "retry", in: "retry: 1500\n\n", retry: 1500 * time.Millisecond},
		{name: "retry not digits is ignored", in: "retry: 1500\nretry: 2s\nretry: -1\nretry:\n\n", retry: 1500 * time.Millisecond},
		{name: "retry saturates", in: "retry: 99999999999999999999999\n\n", retry: time.Duration(1<<63 - 1).Truncate(time.Millisecond)},
		{name: "unknown fields and field case", in: "foo: bar\nDATA: no\nData: no\ndata: yes\n\n", want: []sseMessage{msg("", "message", "yes")}},
		{name: "field without colon", in: "data\nevent\n\n", want: []sseMessage{msg("", "message", "")}},
		{name: "only one space is stripped", in: "data:   x  \n\n", want: []sseMessage{msg("", "message", "  x  ")}},
		{name: "colons in the value", in: "data: a:b: c\n\n", want: []sseMessage{msg("", "message", "a:b: c")}},
		{name: "comment lines anywhere", in: "data: a\n: ping\n:\ndata: b\n\n: ping\n\n", want: []sseMessage{msg("", "message", "a\nb")}},
		{name: "unterminated event at EOF is discarded", in: "data: a\n\ndata: b\n", want: []sseMessage{msg("", "message", "a")}},
		{name: "unterminated line at EOF is discarded", in: "data: a\n\ndata: b", want: []sseMessage{msg("", "message", "a")}},
		{
			name: "invalid UTF-8 becomes U+FFFD per maximal subpart",
			in:   "data: a\xE2\x82b\xFFc\xF0\x9F\x98\n\n",
			want: []sseMessage{msg("", "message", "a\uFFFDb\uFFFDc\uFFFD")},
		},
		{name: "valid UTF-8 is kept", in: "data: h\u00e9llo \u2603 \U0001F600\n\n", want: []sseMessage{msg("", "message", "h\u00e9llo \u2603 \U0001F600")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Whole, one byte at a time, and in random chunks: always the same.
			readers := map[string]io.Reader{
				"whole":    strings.NewReader(tt.in),
				"bytewise": iotest.OneByteReader(strings.NewReader(tt.in)),
				"halves":   iotest.HalfReader(strings.NewReader(tt.in)),
				"chunked":  &chunkReader{b: []byte(tt.in), rnd: rand.New(rand.NewPCG(1, 2))},
			}
			for name, r := range readers {
				got, retry, err := parseAll(r)
				if !errors.Is(err, io.EOF) {
					t.Errorf("%s: error = %v, want EOF", name, err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("%s: events (-want +got):\n%s", name, diff)
				}
				if retry != tt.retry {
					t.Errorf("%s: retry = %v, want %v", name, retry, tt.retry)
				}
			}
		})
	}
}

func TestSSEReaderError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(boom))
	got, _, err := parseAll(r)
	if !errors.Is(err, boom) {
		t.Fatalf("error = %v, want boom", err)
	}
	if len(got) != 1 || got[0].Data != "a" {
		t.Fatalf("events = %+v, want only a", got)
	}
}

func TestSSECRThenLFAcrossReads(t *testing.T) {
	t.Parallel()
	// The event must be dispatched when the second CR arrives, before the
	// parser knows what follows, and the LF that follows must not count as
	// a line.
	pr, pw := io.Pipe()
	p := newSSEParser(pr)
	go func() {
		_, _ = pw.Write([]byte("data: a\r\r"))
		_, _ = pw.Write([]byte("\ndata: b\n\n"))
		_ = pw.Close()
	}()
	m, err := p.Next()
	if err != nil || m.Data != "a" {
		t.Fatalf("first = %+v, %v", m, err)
	}
	m, err = p.Next()
	if err != nil || m.Data != "b" {
		t.Fatalf("second = %+v, %v", m, err)
	}
}

func TestSSELongLines(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 16<<20)
	in := "id: 1\ndata: " + big + "\ndata: " + big[:10] + "\n\ndata: after\n\n"
	got, _, err := parseAll(&chunkReader{b: []byte(in), rnd: rand.New(rand.NewPCG(3, 4)), max: 1 << 20})
	if !errors.Is(err, io.EOF) {
		t.Fatalf("error = %v", err)
	}
	if len(got) != 2 || got[0].Data != big+"\n"+big[:10] || got[1].Data != "after" {
		t.Fatalf("got %d events, first %d bytes", len(got), len(got[0].Data))
	}

	p := newSSEParser(strings.NewReader("data: " + strings.Repeat("y", 100) + "\n\n"))
	p.maxLine = 50
	if _, err := p.Next(); !errors.Is(err, errSSETooLong) {
		t.Fatalf("over-long line: error = %v, want errSSETooLong", err)
	}
	p = newSSEParser(strings.NewReader(strings.Repeat("data: 0123456789\n", 10) + "\n"))
	p.maxData = 50
	if _, err := p.Next(); !errors.Is(err, errSSETooLong) {
		t.Fatalf("over-long event: error = %v, want errSSETooLong", err)
	}
}

// chunkReader returns b in random pieces of 1..max bytes (max 0: 64).
type chunkReader struct {
	b   []byte
	rnd *rand.Rand
	max int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	m := c.max
	if m == 0 {
		m = 64
	}
	n := min(1+c.rnd.IntN(m), len(c.b), len(p))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// refParse is an independent, deliberately naive reading of the same spec
// over a whole input, used as the oracle of the fuzz test.
func refParse(in []byte) (msgs []sseMessage, retry time.Duration) {
	s := string(validUTF8(in)) // decode the whole stream first, as the spec does
	s = strings.TrimPrefix(s, "\uFEFF")
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	lines := strings.Split(s, "\n")
	lines = lines[:len(lines)-1] // the last piece is not terminated
	var data, typ, id string
	var hasData bool
	for _, line := range lines {
		switch {
		case line == "":
			if hasData {
				if typ == "" {
					typ = "message"
				}
				msgs = append(msgs, sseMessage{ID: id, Event: typ, Data: strings.TrimSuffix(data, "\n")})
			}
			data, typ, hasData = "", "", false
			continue
		case strings.HasPrefix(line, ":"):
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "data":
			data += value + "\n"
			hasData = true
		case "event":
			typ = value
		case "id":
			if !strings.Contains(value, "\x00") {
				id = value
			}
		case "retry":
			if ms, ok := parseDigits([]byte(value)); ok {
				retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return msgs, retry
}

func FuzzSSEParse(f *testing.F) {
	for _, s := range []string{
		"data: YHOO\ndata: +2\ndata: 10\n\n",
		": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
		"data\n\ndata\ndata\n\ndata:",
		"\xEF\xBB\xBFid: 1\r\nevent: x\r\ndata: a\r\rretry: 10\n\n",
		"data: a\xE2\x82b\xFF\n\nid: \x00\n",
		"\r\n\r\r\n\n\r",
	} {
		f.Add([]byte(s), uint64(1))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		whole, retry, err := parseAll(bytes.NewReader(in))
		if !errors.Is(err, io.EOF) {
			t.Fatalf("whole: error = %v", err)
		}
		chunked, retry2, err := parseAll(&chunkReader{b: in, rnd: rand.New(rand.NewPCG(seed, seed>>1)), max: 7})
		if !errors.Is(err, io.EOF) {
			t.Fatalf("chunked: error = %v", err)
		}
		if diff := cmp.Diff(whole, chunked); diff != "" || retry != retry2 {
			t.Fatalf("chunking changed the result (-whole +chunked):\n%s\nretry %v vs %v", diff, retry, retry2)
		}
		want, wantRetry := refParse(in)
		if diff := cmp.Diff(want, whole); diff != "" || retry != wantRetry {
			t.Fatalf("differs from the reference (-ref +got):\n%s\nretry %v vs %v", diff, wantRetry, retry)
		}
	})
}
