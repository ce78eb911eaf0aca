package docker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agentbox/agentbox/internal/provider"
)

// maxFrame bounds one frame of a multiplexed log stream: the daemon's
// frames are at most 32 KiB; a larger one is a corrupt stream.
const maxFrame = 1 << 20

// maxBuildError bounds the message of a build's error kept in the
// provider's error.
const maxBuildError = 4 << 10

// errStream is a multiplexed stream that breaks its format.
var errStream = errors.New("malformed multiplexed stream")

// demux copies the payloads of a multiplexed stream (the Engine API's
// attach and logs format when the container has no tty: frames of an
// 8-byte header — stream 0 stdin, 1 stdout, 2 stderr, three zero bytes,
// the payload's size big-endian — then the payload) to w, stdout and
// stderr alike, in order. It ends at io.EOF between frames; a truncated
// frame, an unknown stream or an oversized frame is errStream. The input
// is the container's, so hostile: nothing in it is trusted but its bounds.
func demux(w io.Writer, r io.Reader) error {
	var hdr [8]byte
	buf := make([]byte, 32<<10)
	for {
		if _, err := io.ReadFull(r, hdr[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("%w: header: %w", errStream, err)
		}
		if hdr[0] > 2 || hdr[1]|hdr[2]|hdr[3] != 0 {
			return fmt.Errorf("%w: header % x", errStream, hdr)
		}
		n := binary.BigEndian.Uint32(hdr[4:])
		if n > maxFrame {
			return fmt.Errorf("%w: frame of %d bytes", errStream, n)
		}
		for n > 0 {
			k := min(int(n), len(buf))
			got, err := io.ReadFull(r, buf[:k])
			if _, werr := w.Write(buf[:got]); werr != nil {
				return werr
			}
			if err != nil {
				// What arrived of a cut frame is kept: a log's last words.
				return fmt.Errorf("%w: payload: %w", errStream, err)
			}
			n -= uint32(k)
		}
	}
}

// buildOutcome reads a build's JSON message stream (at most
// maxBuildOutput bytes): an error message in it is the build's failure,
// with the last lines of output kept for it; a stream that ends without
// one is success.
func buildOutcome(tag string, body io.Reader) error {
	dec := json.NewDecoder(io.LimitReader(body, maxBuildOutput))
	var tail []string
	for {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("%w: build image %s: reading the daemon's output: %w", provider.ErrUnavailable, tag, err)
		}
		if s := strings.TrimSpace(m.Stream); s != "" {
			if len(s) > 512 {
				s = s[:512] + "…"
			}
			tail = append(tail, s)
			if len(tail) > 5 {
				tail = tail[1:]
			}
		}
		if msg := m.ErrorDetail.Message + m.Error; msg != "" {
			if m.ErrorDetail.Message != "" {
				msg = m.ErrorDetail.Message
			}
			if len(msg) > maxBuildError {
				msg = msg[:maxBuildError] + "…"
			}
			return fmt.Errorf("%w: build image %s: %s (after: %s)", provider.ErrUnavailable, tag, msg, strings.Join(tail, " | "))
		}
	}
}
