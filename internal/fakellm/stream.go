package fakellm

import (
	"context"
	"net/http"
	"strconv"
	"time"
)

// stream writes server-sent events, flushing each one. After the first
// failed write (the client went away) or once ctx is done, it writes
// nothing more and err says why.
type stream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	ctx   context.Context
	delay time.Duration
	err   error
	buf   []byte
}

func newStream(ctx context.Context, w http.ResponseWriter, delay time.Duration) *stream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &stream{w: w, rc: http.NewResponseController(w), ctx: ctx, delay: delay}
	s.flush()
	return s
}

// event writes "event: name" (if name is set) and "data: <json of v>".
func (s *stream) event(name string, v any) {
	if s.err != nil {
		return
	}
	s.buf = s.buf[:0]
	if name != "" {
		s.buf = append(s.buf, "event: "...)
		s.buf = append(s.buf, name...)
		s.buf = append(s.buf, '\n')
	}
	s.buf = append(s.buf, "data: "...)
	if raw, ok := v.(string); ok {
		s.buf = append(s.buf, raw...)
	} else {
		s.buf = append(s.buf, marshal(v)...)
	}
	s.buf = append(s.buf, "\n\n"...)
	if _, err := s.w.Write(s.buf); err != nil {
		s.err = err
		return
	}
	s.flush()
}

func (s *stream) flush() {
	if err := s.rc.Flush(); err != nil && s.err == nil {
		s.err = err
	}
}

// pause sleeps the per-chunk delay; call it before each chunk.
func (s *stream) pause() {
	if s.err == nil {
		s.err = sleep(s.ctx, s.delay)
	}
}

// sleep waits d, or until ctx is done (then it returns ctx.Err()).
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeJSON writes a JSON answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b := marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
