package fakellm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Redacted replaces every credential in the request log.
const Redacted = "REDACTED"

// APIs a request is recognised as (Request.API).
const (
	APIAnthropic            = "anthropic"
	APIAnthropicCountTokens = "anthropic.count_tokens"
	APIResponses            = "responses"
	APIChat                 = "chat"
	APIGemini               = "gemini"
	APIGeminiCountTokens    = "gemini.count_tokens"
	APIModels               = "models"
	APIOther                = "other"
)

// Request is one recorded request. Credentials are never stored: the
// headers and query parameters that carry them read "REDACTED", and only
// the SHA-256 of the key is kept.
type Request struct {
	Seq    int       `json:"seq"` // 1, 2, … in the order requests were answered
	Time   time.Time `json:"time"`
	Method string    `json:"method"`
	// Path is the path as received, including a /s/<name> prefix.
	Path   string      `json:"path"`
	Query  string      `json:"query,omitempty"` // the raw query, credentials redacted
	Header http.Header `json:"header,omitempty"`
	// Body is the request body if it is JSON (after Content-Encoding),
	// else BodyText holds it (cut at 64 KiB).
	Body     json.RawMessage `json:"body,omitempty"`
	BodyText string          `json:"body_text,omitempty"`
	// KeySHA256 is the hex SHA-256 of the API key sent (bearer token,
	// x-api-key, x-goog-api-key, api-key or ?key=), "" if none.
	KeySHA256 string `json:"key_sha256,omitempty"`

	API      string `json:"api"`
	Scenario string `json:"scenario,omitempty"`
	Model    string `json:"model,omitempty"`
	Stream   bool   `json:"stream,omitempty"`
	// Prompt is the 0-based user prompt the request answers (the number
	// of final answers in its history), Turn the number of tool rounds
	// since the last real user message, and Step the index in the
	// scenario's Turns of the answer (-1: none, e.g. past the end of the
	// script or a request without tools).
	Prompt int `json:"prompt"`
	Turn   int `json:"turn"`
	Step   int `json:"step"`
	// Parts are the content parts of the request's user messages (text,
	// images, files; not tool results), in order, at most 256.
	Parts []Part `json:"parts,omitempty"`
	// Status is the HTTP status of the answer, Reply a summary of it.
	Status int    `json:"status"`
	Reply  string `json:"reply"`
}

// HasKey reports whether the request carried the API key k.
func (r Request) HasKey(k string) bool {
	return k != "" && r.KeySHA256 == keyHash(k)
}

// String is a one-line summary, as the dev command prints it.
func (r Request) String() string {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte(' ')
	b.WriteString(r.Path)
	if r.Query != "" {
		b.WriteByte('?')
		b.WriteString(r.Query)
	}
	b.WriteString(" api=")
	b.WriteString(r.API)
	if r.Scenario != "" {
		b.WriteString(" scenario=")
		b.WriteString(r.Scenario)
	}
	if r.Model != "" {
		b.WriteString(" model=")
		b.WriteString(r.Model)
	}
	if r.Stream {
		b.WriteString(" stream")
	}
	switch r.API {
	case APIAnthropic, APIResponses, APIChat, APIGemini:
		b.WriteString(" prompt=")
		b.WriteString(strconv.Itoa(r.Prompt))
		b.WriteString(" turn=")
		b.WriteString(strconv.Itoa(r.Turn))
	}
	b.WriteString(" -> ")
	b.WriteString(strconv.Itoa(r.Status))
	if r.Reply != "" {
		b.WriteByte(' ')
		b.WriteString(r.Reply)
	}
	return b.String()
}

func keyHash(k string) string {
	h := sha256.Sum256([]byte(k))
	return hex.EncodeToString(h[:])
}

// secretHeader reports whether a header carries credentials.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	switch n {
	case "authorization", "proxy-authorization", "cookie", "set-cookie",
		"x-api-key", "api-key", "x-goog-api-key":
		return true
	}
	for _, s := range []string{"auth", "token", "secret", "password", "api-key", "apikey"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// secretParam reports whether a query parameter carries credentials.
func secretParam(name string) bool {
	n := strings.ToLower(name)
	if n == "sig" || n == "signature" {
		return true
	}
	for _, s := range []string{"key", "token", "secret", "password", "auth"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// redactHeader copies h with credentials replaced.
func redactHeader(h http.Header) http.Header {
	out := make(http.Header, len(h))
	for k, vs := range h {
		if secretHeader(k) {
			red := make([]string, len(vs))
			for i := range red {
				red[i] = Redacted
			}
			out[k] = red
			continue
		}
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// redactQuery returns the raw query with credentials replaced. A query
// that does not parse is dropped whole, since it may hold a key.
func redactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return Redacted
	}
	changed := false
	for k, vs := range q {
		if secretParam(k) {
			for i := range vs {
				vs[i] = Redacted
			}
			changed = true
		}
	}
	if !changed {
		return raw
	}
	return q.Encode()
}

// apiKey returns the key a request carries, "" if none.
func apiKey(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if k, ok := strings.CutPrefix(a, "Bearer "); ok {
			return strings.TrimSpace(k)
		}
		if k, ok := strings.CutPrefix(a, "bearer "); ok {
			return strings.TrimSpace(k)
		}
		return a
	}
	for _, h := range []string{"X-Api-Key", "X-Goog-Api-Key", "Api-Key"} {
		if k := r.Header.Get(h); k != "" {
			return k
		}
	}
	return r.URL.Query().Get("key")
}
