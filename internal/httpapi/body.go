package httpapi

import (
	"errors"
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/client"
)

// requestBody is every request body as the API reads it: the one checkpoint
// each body passes before the adapter (operation.go) decodes it.
//
//   - A read that fails because of what the client sent (a body shorter than
//     its Content-Length, malformed chunked framing, a connection closed in
//     the middle of the body) ends in a bodyError answered with 400: the
//     client's fault, not an internal error. Timeouts (408) and size limits
//     (413) keep their own answers.
//   - A body that is not valid UTF-8 ends in a bodyError answered with 422.
//     JSON text is UTF-8 (RFC 8259 §8.1), and since bytes outside JSON
//     strings must be ASCII, invalid bytes can only hide inside strings,
//     where encoding/json would silently replace them with U+FFFD. So does
//     a \u escape of a lone UTF-16 surrogate (RFC 8259 §8.2): refused too.
type requestBody struct {
	io.ReadCloser
	utf8 utf8Stream
	esc  surrogateScan
	err  error // sticky, once the body is refused
}

// bodyError is a request body refused while it is read; validationProblem
// answers it with its status.
type bodyError struct {
	status int
	msg    string
	err    error
}

func (e *bodyError) Error() string { return e.msg }
func (e *bodyError) Unwrap() error { return e.err }

func (e *bodyError) problem() *problem { return newProblem(e.status, typeForStatus(e.status), e.msg) }

var errBodyNotUTF8 = errors.New("invalid UTF-8")

func (b *requestBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.ReadCloser.Read(p)
	if !b.utf8.write(p[:n]) || (errors.Is(err, io.EOF) && !b.utf8.done()) {
		b.err = &bodyError{status: http.StatusUnprocessableEntity, err: errBodyNotUTF8,
			msg: "The request body is not valid UTF-8 (JSON text must be); it was refused rather than altered."}
		return n, b.err
	}
	if !b.esc.write(p[:n]) {
		b.err = &bodyError{status: http.StatusUnprocessableEntity, err: errBodyNotUTF8,
			msg: "The request body has a JSON \\u escape of a lone UTF-16 surrogate, which is no character (and no valid UTF-8); it was refused rather than altered."}
		return n, b.err
	}
	if err == nil || errors.Is(err, io.EOF) {
		return n, err
	}
	var ne net.Error
	var me *http.MaxBytesError
	if errors.As(err, &ne) && ne.Timeout() || errors.As(err, &me) {
		return n, err
	}
	b.err = &bodyError{status: http.StatusBadRequest, err: err,
		msg: "The request body could not be read (" + err.Error() + "): it ended before its Content-Length, or its chunked framing is broken."}
	return n, b.err
}

// utf8Stream validates UTF-8 written to it in pieces that may split runes.
type utf8Stream struct {
	pend [utf8.UTFMax]byte // the start of a rune split by the last write
	n    int
}

// write reports whether p continues valid UTF-8.
func (u *utf8Stream) write(p []byte) bool {
	if u.n > 0 {
		for len(p) > 0 && !utf8.FullRune(u.pend[:u.n]) {
			u.pend[u.n] = p[0]
			u.n++
			p = p[1:]
		}
		if !utf8.FullRune(u.pend[:u.n]) {
			return true // still incomplete: wait for more
		}
		if r, size := utf8.DecodeRune(u.pend[:u.n]); (r == utf8.RuneError && size == 1) || size != u.n {
			return false
		}
		u.n = 0
	}
	// Hold back a rune the write cut short.
	tail := 0
	for i := len(p) - 1; i >= 0 && i >= len(p)-utf8.UTFMax; i-- {
		if utf8.RuneStart(p[i]) {
			if !utf8.FullRune(p[i:]) {
				tail = len(p) - i
			}
			break
		}
	}
	if !utf8.Valid(p[:len(p)-tail]) {
		return false
	}
	u.n = copy(u.pend[:], p[len(p)-tail:])
	return true
}

// done reports whether the input ended on a whole rune.
func (u *utf8Stream) done() bool { return u.n == 0 }

// surrogateScan finds, in JSON text written to it in pieces, a \u escape
// of a UTF-16 surrogate that is not half of a pair: a high one (D800-DBFF)
// not followed at once by an escaped low one (DC00-DFFF), or a low one
// alone. It follows strings only; the rest of the syntax is the decoder's.
type surrogateScan struct {
	state   uint8 // one of the scan* states
	digits  uint8 // hex digits of the \u escape read so far
	val     rune  // their value
	wantLow bool  // the last escape was a high surrogate
	bad     bool
}

const (
	scanOut = iota // outside a string
	scanIn         // in a string
	scanEsc        // after a backslash in a string
	scanHex        // in the hex digits of a \u escape
)

// write reports whether p continues text without a lone surrogate escape.
func (s *surrogateScan) write(p []byte) bool {
	for _, c := range p {
		if s.bad {
			break
		}
		switch s.state {
		case scanOut:
			if c == '"' {
				s.state = scanIn
			}
		case scanIn:
			switch {
			case s.wantLow && c != '\\':
				s.bad = true
			case c == '\\':
				s.state = scanEsc
			case c == '"':
				s.state = scanOut
			}
		case scanEsc:
			switch {
			case c == 'u':
				s.state, s.digits, s.val = scanHex, 0, 0
			case s.wantLow:
				s.bad = true
			default:
				s.state = scanIn
			}
		case scanHex:
			d := hexDigit(c)
			if d < 0 {
				s.state, s.wantLow = scanIn, false // not JSON: the decoder says so
				continue
			}
			s.val, s.digits = s.val<<4|rune(d), s.digits+1
			if s.digits < 4 {
				continue
			}
			s.state = scanIn
			high, low := s.val >= 0xD800 && s.val <= 0xDBFF, s.val >= 0xDC00 && s.val <= 0xDFFF
			switch {
			case s.wantLow:
				s.bad, s.wantLow = !low, false
			case low:
				s.bad = true
			default:
				s.wantLow = high
			}
		}
	}
	return !s.bad
}

func hexDigit(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// checkPath refuses a request path that is not canonical: one with an
// empty, "." or ".." segment, sent raw or percent-encoded (r.URL.Path is
// decoded). net/http's mux would answer it with an HTML redirect to the
// cleaned path; every answer of the API is a problem, and no client of it
// sends such a path unless it has a bug or is probing.
func checkPath(r *http.Request) *problem {
	p := r.URL.Path
	if p == "" || p[0] != '/' {
		return nil // CONNECT and "*": the mux answers them
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	if clean == p {
		return nil
	}
	return newProblem(http.StatusBadRequest, client.ProblemBadRequest,
		"The request path is not canonical: it has an empty, \".\" or \"..\" segment.")
}
