package procrt

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// LineReader reads LF-terminated lines of at most max bytes (a trailing
// CR dropped). A longer line is read to its end and dropped; Next reports
// its size instead.
type LineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewLineReader returns a LineReader of r.
func NewLineReader(r io.Reader, max int) *LineReader {
	return &LineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next line without its newline (a fresh slice), or the
// size of a skipped line (line nil, skipped > 0). At the end of the input
// err is io.EOF (a last line without a newline is returned first).
func (lr *LineReader) Next() (line []byte, skipped int64, err error) {
	lr.buf = lr.buf[:0]
	var n int64
	over := false
	for {
		chunk, err := lr.r.ReadSlice('\n')
		n += int64(len(chunk))
		if !over {
			if len(lr.buf)+len(chunk) > lr.max+1 { // +1: the newline
				over, lr.buf = true, lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && n == 0 {
			return nil, 0, err
		}
		break
	}
	line = bytes.TrimSuffix(lr.buf, []byte("\n"))
	if over || len(line) > lr.max { // the last line may lack its newline
		return nil, n, nil
	}
	return bytes.Clone(bytes.TrimSuffix(line, []byte("\r"))), 0, nil
}
