package tracing

import (
	"net/http"
	"strings"
)

// ParseTraceparent parses a W3C traceparent header value
// (https://www.w3.org/TR/trace-context/#traceparent-header) strictly: lower
// case hex only, version ff refused, version 00 exactly 55 characters, a
// later version at least 55 followed by nothing or by '-', trace and parent
// ids not all zero. Surrounding spaces and tabs are allowed. The context
// it returns is Remote, and keeps only the sampled flag (the one flag this
// version defines).
func ParseTraceparent(v string) (SpanContext, bool) {
	v = strings.Trim(v, " \t")
	const n = 55 // 2 + 1 + 32 + 1 + 16 + 1 + 2
	if len(v) < n {
		return SpanContext{}, false
	}
	var version [1]byte
	if !hexLower(version[:], v[0:2]) || version[0] == 0xff {
		return SpanContext{}, false
	}
	if version[0] == 0 && len(v) != n {
		return SpanContext{}, false
	}
	if len(v) > n && v[n] != '-' {
		return SpanContext{}, false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return SpanContext{}, false
	}
	var sc SpanContext
	var flags [1]byte
	if !hexLower(sc.TraceID[:], v[3:35]) || !hexLower(sc.SpanID[:], v[36:52]) || !hexLower(flags[:], v[53:55]) {
		return SpanContext{}, false
	}
	if !sc.IsValid() {
		return SpanContext{}, false
	}
	sc.Flags, sc.Remote = flags[0]&flagSampled, true
	return sc, true
}

// hexLower decodes s, lower-case hex of exactly 2*len(dst) digits, into
// dst.
func hexLower(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	for i := range dst {
		hi, ok1 := nibble(s[2*i])
		lo, ok2 := nibble(s[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

func nibble(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// Traceparent formats sc as a version 00 traceparent value.
func (sc SpanContext) Traceparent() string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	for _, c := range sc.TraceID {
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	b = append(b, '-')
	for _, c := range sc.SpanID {
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	f := sc.Flags & flagSampled
	b = append(b, '-', digits[f>>4], digits[f&0xf])
	return string(b)
}

// FromHeader returns the remote parent a request's traceparent header
// names. Several traceparent headers, or one that does not parse, name
// none (the trace restarts here, as the W3C test suite expects).
func FromHeader(h http.Header) (SpanContext, bool) {
	vs := h.Values("Traceparent")
	if len(vs) != 1 {
		return SpanContext{}, false
	}
	return ParseTraceparent(vs[0])
}
