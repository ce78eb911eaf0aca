package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestValidRequestID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"0190a5e4-7c3b-7d2e-9f00-1a2b3c4d5e6f", true},
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV", true},
		{"a.b_c-D9", true},
		{strings.Repeat("x", MaxRequestIDLen), true},
		{"", false},
		{strings.Repeat("x", MaxRequestIDLen+1), false},
		{"a b", false},
		{"a\nb", false},
		{"a\x1b[31m", false},
		{"k=v", false},
		{`"q"`, false},
		{"ⅰd", false},
		{"id\u202e", false},
		{"a/b", false},
	} {
		if got := ValidRequestID(tc.id); got != tc.ok {
			t.Errorf("ValidRequestID(%q) = %v, want %v", tc.id, got, tc.ok)
		}
	}
}

// TestHandler: records logged with a request's context carry its id, in
// both formats, through With and WithGroup; others do not; wrapping twice
// adds it once.
func TestHandler(t *testing.T) {
	for _, format := range Formats {
		t.Run(format, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := New(&buf, format, slog.LevelInfo)
			if err != nil {
				t.Fatal(err)
			}
			log = slog.New(Handler(log.Handler())).With("component", "x")
			ctx := WithRequestID(t.Context(), "req-1")
			log.InfoContext(ctx, "with id")
			log.Info("without")
			log.DebugContext(ctx, "below the level")
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 2 {
				t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
			}
			if n := strings.Count(lines[0], "req-1"); n != 1 {
				t.Errorf("line with a request's context has its id %d times: %s", n, lines[0])
			}
			if strings.Contains(lines[1], RequestIDKey) {
				t.Errorf("line without a request has an id: %s", lines[1])
			}
			if format == "json" {
				var rec map[string]any
				if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil || rec[RequestIDKey] != "req-1" || rec["component"] != "x" {
					t.Errorf("JSON line %s: %v %v", lines[0], rec, err)
				}
			}
		})
	}
	if _, err := New(&bytes.Buffer{}, "yaml", slog.LevelInfo); err == nil {
		t.Error("New accepts format yaml")
	}
	if RequestID(context.Background()) != "" {
		t.Error("a bare context has a request id")
	}
}
