// Package vendorapi is what the providers of sandbox vendors (e2b,
// daytona, vercel) share: the provider itself (Provider, around a vendor's
// own endpoints and shapes, Vendor), their HTTP client (Client: defaults,
// credentials, bounded answers), the start of the inner daemon (Serve,
// WaitHealthy), and the mapping of a failed call to the provider
// contract's sentinels, keeping the vendor's message bounded to one
// printable line and never a credential.
package vendorapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/provider"
)

// MaxAnswer bounds what a client reads of one answer.
const MaxAnswer = 8 << 20

// StatusError maps vendor's error answer (status, body) to the contract's
// sentinels: 401/403 ErrCredentials, 429 ErrQuota, 404/410 ErrGone, 5xx
// ErrUnavailable; any other status wraps none. The text keeps the
// vendor's message (Message).
func StatusError(vendor string, status int, body []byte) error {
	msg := Message(body)
	var kind error
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		kind = provider.ErrCredentials
	case status == http.StatusTooManyRequests:
		kind = provider.ErrQuota
	case status == http.StatusNotFound || status == http.StatusGone:
		kind = provider.ErrGone
	case status >= 500:
		kind = provider.ErrUnavailable
	default:
		return fmt.Errorf("%s answered %d: %s", vendor, status, msg)
	}
	return fmt.Errorf("%w: %s answered %d: %s", kind, vendor, status, msg)
}

// TransportError maps a call that got no answer (refused, reset, timed
// out) to ErrUnavailable.
func TransportError(err error) error {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return fmt.Errorf("%w: timed out: %w", provider.ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
}

// Message is the message of an error answer: its JSON "message" field (a
// string, or a list of strings as NestJS answers), or the "message" of its
// "error" object (Vercel's {"error": {"code", "message"}}), else the
// body's start; Clean either way.
func Message(body []byte) string {
	var e struct {
		Message json.RawMessage `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil {
		if len(e.Message) > 0 {
			var s string
			if json.Unmarshal(e.Message, &s) == nil && s != "" {
				return Clean(s)
			}
			var list []string
			if json.Unmarshal(e.Message, &list) == nil && len(list) > 0 {
				return Clean(strings.Join(list, "; "))
			}
		}
		var nested struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		if len(e.Error) > 0 && json.Unmarshal(e.Error, &nested) == nil && nested.Message != "" {
			if nested.Code != "" {
				return Clean(nested.Message + " (" + nested.Code + ")")
			}
			return Clean(nested.Message)
		}
	}
	return Clean(string(body))
}

// maxMessage bounds a vendor's message, in characters.
const maxMessage = 300

// Clean bounds a vendor's text to maxMessage characters on one printable
// line: control characters and invalid UTF-8 become spaces.
func Clean(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if n == maxMessage {
			b.WriteString("…")
			break
		}
		if r < 0x20 || (r >= 0x7f && r < 0xa0) || r == utf8.RuneError {
			r = ' '
		}
		b.WriteRune(r)
		n++
	}
	out := strings.TrimSpace(b.String())
	if out == "" {
		return "(no message)"
	}
	return out
}

// BaseURL is a vendor's API base URL: raw, or def when raw is empty,
// without trailing slashes; anything but an absolute http(s) URL with a
// host is refused, naming the vendor.
func BaseURL(vendor, raw, def string) (string, error) {
	if raw == "" {
		raw = def
	}
	raw = strings.TrimRight(raw, "/")
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("%s: API URL %q: want http(s)://host", vendor, raw)
	}
	return raw, nil
}
