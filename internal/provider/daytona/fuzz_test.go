package daytona

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/provider"
)

// FuzzErrorAnswer: any error answer (NestJS's {statusCode, message,
// error}, a list of messages, or not JSON) maps to an error whose text is
// bounded and printable, with the status's sentinel.
func FuzzErrorAnswer(f *testing.F) {
	f.Add(429, []byte(`{"statusCode":429,"message":"Total CPU quota exceeded","error":"Too Many Requests"}`))
	f.Add(400, []byte(`{"statusCode":400,"message":["cpu must be an integer","memory must be a number"]}`))
	f.Add(502, []byte("<html>bad gateway</html>"))
	f.Add(403, []byte(`{"message":"\u0000\u001b[31m"}`))
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
		if status >= 500 && !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("%d: %v", status, err)
		}
	})
}
