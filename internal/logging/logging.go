// Package logging builds the daemon's logger (text or JSON lines, a level)
// and carries a request's id from its context into every record logged with
// that context, so that the lines a request causes deeper down (the engine,
// the error mapping) can be told apart from those of other requests.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Formats are the values --log-format takes.
var Formats = []string{"text", "json"}

// New returns a logger writing records at level or above to w, as text
// (logfmt-like key=value) or json (one JSON object a line). Records logged
// with a context that carries a request id (WithRequestID) get it as
// req_id.
func New(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch format {
	case "text", "":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("unknown log format %q: want %s", format, strings.Join(Formats, " or "))
	}
	return slog.New(Handler(h)), nil
}

// RequestIDKey is the attribute a record's request id is logged under.
const RequestIDKey = "req_id"

type requestIDKey struct{}

// WithRequestID returns ctx carrying a request id. The id must be safe to
// print as it is (see ValidRequestID): handlers quote or escape values, but
// an id is also meant to be copied into terminals and searches.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID returns the request id ctx carries, or "".
func RequestID(ctx context.Context) string {
	if ctx == nil {
		return ""
	}
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// MaxRequestIDLen bounds an inbound request id.
const MaxRequestIDLen = 64

// ValidRequestID reports whether id, as a client sent it (X-Request-Id),
// may be used as the request's id: 1 to MaxRequestIDLen characters, each
// an ASCII letter or digit, '-', '_' or '.'. That admits UUIDs, ULIDs and
// hex or base64url ids, and nothing a log line or a terminal would
// interpret (no spaces, quotes, '=', control characters or escapes).
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

// Handler wraps h so that records logged with a context carrying a request
// id get it as req_id. A handler that already does is returned as it is.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(ctxHandler); ok {
		return h
	}
	return ctxHandler{h}
}

type ctxHandler struct{ slog.Handler }

func (h ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String(RequestIDKey, id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h ctxHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return ctxHandler{h.Handler.WithAttrs(as)}
}

func (h ctxHandler) WithGroup(name string) slog.Handler {
	return ctxHandler{h.Handler.WithGroup(name)}
}
