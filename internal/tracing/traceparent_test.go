package tracing_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/tracing"
)

// The cases of the W3C trace-context test suite (test/test.py) for
// traceparent, and a few more.
func TestParseTraceparent(t *testing.T) {
	const ok = "00-12345678901234567890123456789012-1234567890123456-01"
	for _, tc := range []struct {
		v       string
		valid   bool
		sampled bool
	}{
		{ok, true, true},
		{"00-12345678901234567890123456789012-1234567890123456-00", true, false},
		{" \t" + ok + " \t", true, true},                                        // OWS
		{"00-12345678901234567890123456789012-1234567890123456-ff", true, true}, // unknown flags ignored
		{"cc-12345678901234567890123456789012-1234567890123456-01", true, true}, // future version
		{"cc-12345678901234567890123456789012-1234567890123456-01-what-the-future-will-be-like", true, true},
		{"cc-12345678901234567890123456789012-1234567890123456-01.what", false, false},
		{"ff-12345678901234567890123456789012-1234567890123456-01", false, false}, // version ff
		{"00-12345678901234567890123456789012-1234567890123456-01-extra", false, false},
		{"0-12345678901234567890123456789012-1234567890123456-01", false, false},
		{"000-12345678901234567890123456789012-1234567890123456-01", false, false},
		{".0-12345678901234567890123456789012-1234567890123456-01", false, false},
		{"00-00000000000000000000000000000000-1234567890123456-01", false, false}, // zero trace id
		{"00-12345678901234567890123456789012-0000000000000000-01", false, false}, // zero parent id
		{"00-1234567890123456789012345678901A-1234567890123456-01", false, false}, // upper case
		{"00-12345678901234567890123456789012-123456789012345A-01", false, false},
		{"00-1234567890123456789012345678901.-1234567890123456-01", false, false},
		{"00-123456789012345678901234567890123-1234567890123456-01", false, false},
		{"00-1234567890123456789012345678901-1234567890123456-01", false, false},
		{"00-12345678901234567890123456789012-12345678901234567-01", false, false},
		{"00-12345678901234567890123456789012-123456789012345-01", false, false},
		{"00-12345678901234567890123456789012-1234567890123456-0.", false, false},
		{"00-12345678901234567890123456789012-1234567890123456-0", false, false},
		{"00-12345678901234567890123456789012-1234567890123456-001", false, false},
		{"00_12345678901234567890123456789012_1234567890123456_01", false, false},
		{"", false, false},
	} {
		sc, got := tracing.ParseTraceparent(tc.v)
		if got != tc.valid || got && sc.Sampled() != tc.sampled {
			t.Errorf("ParseTraceparent(%q) = %+v, %v; want valid %v sampled %v", tc.v, sc, got, tc.valid, tc.sampled)
		}
		if got && (!sc.Remote || sc.Traceparent()[3:52] != strings.Trim(tc.v, " \t")[3:52]) {
			t.Errorf("round trip of %q: %q", tc.v, sc.Traceparent())
		}
	}
}

func TestFromHeaderDuplicated(t *testing.T) {
	const a = "00-12345678901234567890123456789012-1234567890123456-01"
	h := http.Header{}
	h.Add("traceparent", a)
	if _, ok := tracing.FromHeader(h); !ok {
		t.Fatal("one header did not parse")
	}
	h.Add("Traceparent", "00-12345678901234567890123456789012-1234567890123457-01")
	if _, ok := tracing.FromHeader(h); ok {
		t.Error("two traceparent headers were accepted; the trace must restart")
	}
}

// FuzzParseTraceparent: whatever parses is a valid, remote context that
// formats back to the same ids, and flags reduced to sampled.
func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	f.Add("cc-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-09-xyz")
	f.Add("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	f.Add(" 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00\t")
	f.Fuzz(func(t *testing.T, v string) {
		sc, ok := tracing.ParseTraceparent(v)
		if !ok {
			if sc != (tracing.SpanContext{}) {
				t.Fatalf("a refused value returned %+v", sc)
			}
			return
		}
		if !sc.IsValid() || !sc.Remote || sc.Flags&^1 != 0 {
			t.Fatalf("accepted %q as %+v", v, sc)
		}
		tp := sc.Traceparent()
		if w := strings.Trim(v, " \t"); tp[3:52] != w[3:52] || strings.ToLower(w[:2]) == "ff" {
			t.Fatalf("%q formats back as %q", v, tp)
		}
		again, ok := tracing.ParseTraceparent(tp)
		if !ok || again != sc {
			t.Fatalf("%q does not parse back: %+v", tp, again)
		}
	})
}
