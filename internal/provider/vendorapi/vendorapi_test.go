package vendorapi

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/provider"
)

func TestStatusError(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error
		msg    string
	}{
		{401, `{"code":401,"message":"Invalid API key"}`, provider.ErrCredentials, "Invalid API key"},
		{403, `{"statusCode":403,"message":["cpu too large","memory too large"]}`, provider.ErrCredentials, "cpu too large; memory too large"},
		{429, `{"code":429,"message":"you have reached the maximum number of concurrent E2B sandboxes (20)"}`, provider.ErrQuota, "maximum number of concurrent"},
		{404, `{"message":"sandbox not found"}`, provider.ErrGone, "sandbox not found"},
		{502, `<html>bad gateway</html>`, provider.ErrUnavailable, "<html>bad gateway</html>"},
		{400, `{"message":"template 'x' not found"}`, nil, "template 'x' not found"},
		{500, ``, provider.ErrUnavailable, "(no message)"},
		{429, `{"error":{"code":"too_many_requests","message":"Rate limit exceeded"}}`, provider.ErrQuota, "Rate limit exceeded (too_many_requests)"},
		{404, `{"error":{"message":"Sandbox not found"}}`, provider.ErrGone, "Sandbox not found"},
		{400, `{"statusCode":400,"message":"bad input","error":"Bad Request"}`, nil, "bad input"},
		{400, `{"error":"Bad Request"}`, nil, `{"error":"Bad Request"}`},
	} {
		err := StatusError("vendor", tc.status, []byte(tc.body))
		if tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%d: %v, want %v", tc.status, err, tc.want)
		}
		if tc.want == nil {
			for _, s := range []error{provider.ErrCredentials, provider.ErrQuota, provider.ErrGone, provider.ErrUnavailable} {
				if errors.Is(err, s) {
					t.Errorf("%d: %v is %v", tc.status, err, s)
				}
			}
		}
		if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%d: %v, want the message %q", tc.status, err, tc.msg)
		}
	}
}

// FuzzStatusError: any error answer maps to a bounded, printable text
// with the status's sentinel.
func FuzzStatusError(f *testing.F) {
	f.Add(429, []byte(`{"code":429,"message":"slow down"}`))
	f.Add(400, []byte(`{"statusCode":400,"message":["a","b"]}`))
	f.Add(573, []byte("\xff\xfe\x00\x1b[31m"))
	f.Add(429, []byte(`{"error":{"code":"x\u001b","message":"slow\ndown"}}`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 400 || status > 599 {
			return
		}
		err := StatusError("vendor", status, body)
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

func TestBaseURL(t *testing.T) {
	for _, tc := range []struct{ raw, want, err string }{
		{raw: "", want: "https://api.example.com"},
		{raw: "http://127.0.0.1:8080//", want: "http://127.0.0.1:8080"},
		{raw: "https://self.hosted/api/", want: "https://self.hosted/api"},
		{raw: "ftp://api.example.com", err: `v: API URL "ftp://api.example.com": want http(s)://host`},
		{raw: "https://", err: "want http(s)://host"},
		{raw: "api.example.com", err: "want http(s)://host"},
		{raw: "http://[::1", err: "want http(s)://host"},
	} {
		got, err := BaseURL("v", tc.raw, "https://api.example.com/")
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("BaseURL(%q) = %q, %v; want an error with %q", tc.raw, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("BaseURL(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
}
