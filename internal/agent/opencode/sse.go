package opencode

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// errLineTooLong reports an event stream line longer than the reader takes.
var errLineTooLong = errors.New("opencode: event stream line too long")

// sseReader reads the data of server-sent events: "data:" lines are joined
// with LF and dispatched on an empty line; comments (":"), "event", "id",
// "retry" and unknown fields are ignored, and so is an event the stream
// ends before dispatching. OpenCode sends one JSON object per event on one
// data line, so nothing else is needed.
type sseReader struct {
	r       *bufio.Reader
	maxLine int
	data    []byte
	has     bool
}

func newSSEReader(r io.Reader, maxLine int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10), maxLine: maxLine}
}

// next returns the data of the next event, or the reader's error (io.EOF
// at the end).
func (s *sseReader) next() ([]byte, error) {
	for {
		line, err := s.line()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if s.has {
				out := bytes.TrimSuffix(s.data, []byte("\n"))
				s.data, s.has = nil, false
				return out, nil
			}
			continue
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		if string(name) != "data" {
			continue
		}
		if len(s.data)+len(value)+1 > s.maxLine {
			s.data, s.has = nil, false
			return nil, errLineTooLong
		}
		s.data = append(s.data, value...)
		s.data = append(s.data, '\n')
		s.has = true
	}
}

// line reads one line without its LF or CRLF ending (OpenCode never ends
// a line with a lone CR).
func (s *sseReader) line() ([]byte, error) {
	var buf []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(buf)+len(frag) > s.maxLine {
			// Drain the rest of the line, then report it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = s.r.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return nil, err
			}
			return nil, errLineTooLong
		}
		buf = append(buf, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		buf = bytes.TrimSuffix(buf, []byte("\n"))
		return bytes.TrimSuffix(buf, []byte("\r")), nil
	}
}
