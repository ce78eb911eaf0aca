package claude

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// lineReader reads newline-terminated lines of at most max bytes. A longer
// line is read to its end and dropped; next reports its size instead.
type lineReader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the next line without its newline (a fresh slice), or the
// size of a skipped line (line nil, skipped > 0). At the end of the input
// err is io.EOF (a last line without a newline is returned first).
func (lr *lineReader) next() (line []byte, skipped int64, err error) {
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
		if err != nil {
			if over {
				return nil, n, nil
			}
			if len(lr.buf) > 0 {
				return bytes.Clone(lr.buf), 0, nil
			}
			return nil, 0, err
		}
		break
	}
	if over {
		return nil, n, nil
	}
	return bytes.Clone(bytes.TrimSuffix(lr.buf, []byte("\n"))), 0, nil
}
