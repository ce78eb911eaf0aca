package e2b

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/provider"
)

// FuzzProcessStream: what envd's Start stream answers is parsed without
// panic, bounded, and a stream that ends without a start event is an
// error.
func FuzzProcessStream(f *testing.F) {
	var ok bytes.Buffer
	writeFrame(&ok, 0, []byte(`{"event":{"start":{"pid":7}}}`))
	f.Add(ok.Bytes())
	var end bytes.Buffer
	writeFrame(&end, flagEndStream, []byte(`{"error":{"code":"resource_exhausted","message":"too many"}}`))
	f.Add(end.Bytes())
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{1, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for range 64 {
			flags, msg, err := readFrame(r)
			if err != nil {
				return
			}
			if len(msg) > maxFrame {
				t.Fatalf("a frame of %d bytes", len(msg))
			}
			if flags&flagEndStream != 0 {
				if endStreamError(msg) == nil {
					t.Fatal("an end of stream before the start event is no error")
				}
				return
			}
		}
	})
}

// FuzzErrorAnswer: any error answer maps to an error whose text is
// bounded and printable, and 429 is always ErrQuota.
func FuzzErrorAnswer(f *testing.F) {
	f.Add(429, []byte(`{"code":429,"message":"you have reached the maximum number of concurrent E2B sandboxes (20)"}`))
	f.Add(500, []byte("<html>bad gateway</html>"))
	f.Add(401, []byte(`{"message":"\u0000\u001b[31m"}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 400 || status > 599 {
			return
		}
		err := statusError(status, body)
		msg := err.Error()
		if utf8.RuneCountInString(msg) > 400 || strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Fatalf("message %q", msg)
		}
		if status == 429 && !errors.Is(err, provider.ErrQuota) {
			t.Fatalf("429: %v", err)
		}
		_ = connectStatusError(status, body)
	})
}
