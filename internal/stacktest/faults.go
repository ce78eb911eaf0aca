package stacktest

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Faults makes the event streams (GET /v1/sessions/{id}/events/stream) of
// the handler it wraps misbehave the way networks and proxies do, so tests
// see the SDK recover from real cuts, repeats and gaps of the real server's
// output. Each fault is decided per event with a random source seeded by
// Seed; other routes pass through untouched. Set it in Options.Faults (the
// stack fills in Later), or call Wrap yourself.
type Faults struct {
	// Seed seeds the random source.
	Seed uint64
	// Cut is the chance to end the connection instead of sending an
	// event, after sending a random prefix of it; half of the cuts are
	// abrupt (the connection is reset), half are a clean end of the
	// response.
	Cut float64
	// Duplicate is the chance to send an event already sent on the
	// connection again after an event.
	Duplicate float64
	// Skip is the chance to leave an event out of the stream (it stays in
	// the log), making a gap. An event is left out only when Later says a
	// later one exists, so the client always learns of the gap.
	Skip float64
	// SkipSeq, when set, leaves out the events whose seq it accepts
	// (with the same proviso as Skip).
	SkipSeq func(seq int64) bool
	// Vary varies the line endings per connection (LF, CRLF, CR) and
	// spreads some events' data over several data lines (indented JSON).
	Vary bool
	// Later says whether session sessionID's log holds an event after seq
	// (New sets it from the store).
	Later func(sessionID string, seq int64) bool

	conns atomic.Int64
	mu    sync.Mutex
	rnd   *rand.Rand
}

// Connections returns how many event streams the wrapper has served.
func (f *Faults) Connections() int { return int(f.conns.Load()) }

// Wrap returns h with the faults injected into its event streams.
func (f *Faults) Wrap(h http.Handler) http.Handler {
	f.mu.Lock()
	if f.rnd == nil {
		f.rnd = rand.New(rand.NewPCG(f.Seed, 0x5eed))
	}
	f.mu.Unlock()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
		sid, ok2 := strings.CutSuffix(rest, "/events/stream")
		if !ok || !ok2 || r.Method != http.MethodGet || strings.Contains(sid, "/") {
			h.ServeHTTP(w, r)
			return
		}
		f.conns.Add(1)
		fw := &faultWriter{ResponseWriter: w, f: f, sid: sid, eol: "\n"}
		if f.Vary {
			fw.eol = []string{"\n", "\r\n", "\r"}[f.intN(3)]
		}
		h.ServeHTTP(fw, r)
		if fw.abort {
			// An abrupt cut: net/http resets the connection.
			panic(http.ErrAbortHandler)
		}
	})
}

func (f *Faults) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.Float64() < p
}

func (f *Faults) intN(n int) int {
	if n <= 1 {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rnd.IntN(n)
}

// errCut is what a write returns once the connection has been cut: the
// real handler stops its stream on a failed write.
var errCut = errors.New("stacktest: stream cut by Faults")

// faultWriter rewrites an SSE response frame by frame (a frame ends with a
// blank line; the real server writes LF line endings).
type faultWriter struct {
	http.ResponseWriter
	f   *Faults
	sid string
	eol string

	buf   []byte
	sent  [][]byte // the event frames sent, as sent
	cut   bool
	abort bool
}

// Unwrap lets http.ResponseController reach the connection (write
// deadlines).
func (w *faultWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *faultWriter) Flush() {
	if !w.cut {
		http.NewResponseController(w.ResponseWriter).Flush() //nolint:errcheck // as http.Flusher
	}
}

func (w *faultWriter) Write(p []byte) (int, error) {
	if w.cut {
		return 0, errCut
	}
	if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/event-stream") {
		return w.ResponseWriter.Write(p) // a problem document
	}
	w.buf = append(w.buf, p...)
	for {
		i := bytes.Index(w.buf, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		frame := string(w.buf[:i+1])
		w.buf = w.buf[i+2:]
		if err := w.frame(frame); err != nil {
			return 0, err
		}
	}
}

// frame sends one frame (its lines, each ending in LF), or a fault.
func (w *faultWriter) frame(frame string) error {
	lines := strings.Split(strings.TrimSuffix(frame, "\n"), "\n")
	var seq int64 = -1
	for _, l := range lines {
		if v, ok := strings.CutPrefix(l, "id: "); ok {
			seq, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if seq < 0 { // a comment or the retry field
		return w.send(w.encode(lines, false))
	}
	f := w.f
	if (f.chance(f.Skip) || (f.SkipSeq != nil && f.SkipSeq(seq))) && f.Later != nil && f.Later(w.sid, seq) {
		return nil
	}
	enc := w.encode(lines, f.Vary && f.chance(0.3))
	if f.chance(f.Cut) {
		_, _ = w.ResponseWriter.Write(enc[:f.intN(len(enc))])
		w.Flush()
		w.cut, w.abort = true, f.chance(0.5)
		return errCut
	}
	if err := w.send(enc); err != nil {
		return err
	}
	w.sent = append(w.sent, enc)
	if f.chance(f.Duplicate) {
		return w.send(w.sent[f.intN(len(w.sent))])
	}
	return nil
}

func (w *faultWriter) send(b []byte) error {
	_, err := w.ResponseWriter.Write(b)
	return err
}

// encode renders a frame's lines with the connection's line ending; with
// spread, its data (JSON) is indented over several data lines.
func (w *faultWriter) encode(lines []string, spread bool) []byte {
	var out []string
	for _, l := range lines {
		if d, ok := strings.CutPrefix(l, "data: "); ok && spread {
			var b bytes.Buffer
			if json.Indent(&b, []byte(d), "", " ") == nil {
				for dl := range strings.SplitSeq(b.String(), "\n") {
					out = append(out, "data: "+dl)
				}
				continue
			}
		}
		out = append(out, l)
	}
	return []byte(strings.Join(out, w.eol) + w.eol + w.eol)
}
