package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

// sseFrame is one block of lines up to a blank line.
type sseFrame struct {
	id, event, data, retry string
	hasID                  bool
	comments               []string
}

type sseConn struct {
	t      *testing.T
	resp   *http.Response
	frames chan sseFrame
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

// openStream connects to a session's event stream and parses frames in the
// background. hdr are header pairs as for harness.do.
func (h *harness) openStream(path string, hdr ...string) *sseConn {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", h.srv.URL+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if h.tok != "" {
		req.Header.Set("Authorization", "Bearer "+h.tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		h.t.Fatalf("stream: status %d: %s", resp.StatusCode, b)
	}
	c := &sseConn{t: h.t, resp: resp, frames: make(chan sseFrame, 1024), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go c.read()
	h.t.Cleanup(c.close)
	return c
}

func (c *sseConn) read() {
	defer close(c.done)
	defer close(c.frames)
	sc := bufio.NewScanner(c.resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var f sseFrame
	var data []string
	empty := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if !empty {
				f.data = strings.Join(data, "\n")
				select {
				case c.frames <- f:
				case <-c.ctx.Done():
					return
				}
			}
			f, data, empty = sseFrame{}, nil, true
			continue
		}
		empty = false
		if rest, ok := strings.CutPrefix(line, ":"); ok {
			f.comments = append(f.comments, strings.TrimPrefix(rest, " "))
			continue
		}
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "id":
			f.id, f.hasID = value, true
		case "event":
			f.event = value
		case "data":
			data = append(data, value)
		case "retry":
			f.retry = value
		default:
			c.t.Errorf("unexpected SSE line %q", line)
		}
	}
}

func (c *sseConn) close() {
	c.cancel()
	c.resp.Body.Close()
	<-c.done
}

// next returns the next frame, failing after a timeout.
func (c *sseConn) next(timeout time.Duration) (sseFrame, bool) {
	select {
	case f, ok := <-c.frames:
		return f, ok
	case <-time.After(timeout):
		return sseFrame{}, false
	}
}

// nextEvent skips retry and comment frames and returns the next event,
// checking its framing.
func (c *sseConn) nextEvent() event.Event {
	c.t.Helper()
	for {
		f, ok := c.next(5 * time.Second)
		if !ok {
			c.t.Fatal("no event arrived")
		}
		if !f.hasID && f.data == "" {
			continue
		}
		var ev event.Event
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			c.t.Fatalf("data %q: %v", f.data, err)
		}
		if f.id != strconv.FormatInt(ev.Seq, 10) {
			c.t.Fatalf("id: %q but seq %d", f.id, ev.Seq)
		}
		if f.event != string(ev.Type) {
			c.t.Fatalf("event: %q but type %q", f.event, ev.Type)
		}
		return ev
	}
}

// expectSeqs reads exactly these seqs, then checks nothing else comes.
func (c *sseConn) expectSeqs(want ...int64) {
	c.t.Helper()
	for _, w := range want {
		if ev := c.nextEvent(); ev.Seq != w {
			c.t.Fatalf("got seq %d, want %d", ev.Seq, w)
		}
	}
	deadline := time.After(150 * time.Millisecond)
	for {
		select {
		case f := <-c.frames:
			if f.hasID || f.data != "" {
				c.t.Fatalf("unexpected extra event: %+v", f)
			}
		case <-deadline:
			return
		}
	}
}

func TestSSEStream(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession() // seq 1
	h.eng.emitN(s.ID, 2)   // seq 2, 3

	c := h.openStream("/v1/sessions/" + s.ID + "/events/stream")
	for k, v := range map[string]string{"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"} {
		if got := c.resp.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	first, ok := c.next(5 * time.Second)
	if !ok || first.retry != "3000" || first.hasID {
		t.Fatalf("first frame = %+v, want the retry hint", first)
	}
	ev := c.nextEvent()
	if ev.Seq != 1 || ev.Type != event.TypeSessionStarted || ev.SessionID != s.ID || ev.Schema != event.SchemaVersion {
		t.Fatalf("first event = %+v", ev)
	}
	if _, err := ev.Decode(); err != nil {
		t.Fatal(err)
	}
	c.expectSeqs(2, 3)

	// Live events follow the catch-up.
	h.eng.emitN(s.ID, 2)
	c.expectSeqs(4, 5)
}

func TestSSEResume(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession()
	h.eng.emitN(s.ID, 4) // seq 1..5
	path := "/v1/sessions/" + s.ID + "/events/stream"

	h.openStream(path, "Last-Event-ID", "2").expectSeqs(3, 4, 5)
	h.openStream(path+"?after=3").expectSeqs(4, 5)
	h.openStream(path+"?after=0").expectSeqs(1, 2, 3, 4, 5)
	// The header wins over the query.
	h.openStream(path+"?after=3", "Last-Event-ID", "1").expectSeqs(2, 3, 4, 5)
	// Past the end: nothing until something new happens.
	c := h.openStream(path, "Last-Event-ID", "5")
	c.expectSeqs()
	h.eng.emitN(s.ID, 1)
	c.expectSeqs(6)
	h.openStream(path + "?after=1000").expectSeqs()
}

func TestSSEReconnectsLoseAndRepeatNothing(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession()
	const total = 301
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 2; i <= total; i++ {
			h.eng.emitN(s.ID, 1)
			if i%7 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	defer wg.Wait()

	path := "/v1/sessions/" + s.ID + "/events/stream"
	var last int64
	for conns := 0; last < total; conns++ {
		if conns > total {
			t.Fatal("too many reconnects")
		}
		var c *sseConn
		if conns%2 == 0 {
			c = h.openStream(path, "Last-Event-ID", strconv.FormatInt(last, 10))
		} else {
			c = h.openStream(path + "?after=" + strconv.FormatInt(last, 10))
		}
		for n := 1 + rand.IntN(25); n > 0 && last < total; n-- {
			ev := c.nextEvent()
			if ev.Seq != last+1 {
				t.Fatalf("after seq %d came %d", last, ev.Seq)
			}
			last = ev.Seq
		}
		c.close()
	}
}

func TestSSEHeartbeat(t *testing.T) {
	h := newHarness(t, Config{Heartbeat: 50 * time.Millisecond})
	s := h.createSession()
	c := h.openStream("/v1/sessions/"+s.ID+"/events/stream", "Last-Event-ID", "1")
	pings := 0
	deadline := time.After(5 * time.Second)
	for pings < 2 {
		select {
		case f := <-c.frames:
			if f.hasID {
				t.Fatalf("unexpected event %+v", f)
			}
			if len(f.comments) == 1 && f.comments[0] == "ping" {
				pings++
			}
		case <-deadline:
			t.Fatalf("%d pings in 5s", pings)
		}
	}
	// Still delivers events between pings.
	h.eng.emitN(s.ID, 1)
	if ev := c.nextEvent(); ev.Seq != 2 {
		t.Fatalf("seq %d", ev.Seq)
	}
}

func TestSSEBadRequests(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession()
	path := "/v1/sessions/" + s.ID + "/events/stream"
	for _, v := range []string{"abc", "-1", "+1", "1.5", "0x10", "99999999999999999999"} {
		p := h.do("GET", path, "", "Last-Event-ID", v).problem(t, 422, client.ProblemValidation)
		if len(p.Errors) != 1 || p.Errors[0].Location != "header.Last-Event-ID" {
			t.Fatalf("Last-Event-ID %q: %+v", v, p)
		}
		p = h.do("GET", path+"?after="+v, "").problem(t, 422, client.ProblemValidation)
		if len(p.Errors) != 1 || p.Errors[0].Location != "query.after" {
			t.Fatalf("after %q: %+v", v, p)
		}
	}
	h.do("GET", "/v1/sessions/ses_nope/events/stream", "").problem(t, 404, client.ProblemNotFound)
}

func TestSSEAccessToken(t *testing.T) {
	h := newHarness(t, Config{Token: testToken})
	s := h.createSession()
	path := "/v1/sessions/" + s.ID + "/events/stream"
	h.do("GET", path, "", "Authorization", "").problem(t, 401, client.ProblemUnauthorized)
	c := h.openStream(path+"?access_token="+testToken, "Authorization", "")
	c.expectSeqs(1)
	if strings.Contains(h.logs.String(), testToken) {
		t.Fatal("the token appears in the logs")
	}
}

func TestSSEClientGoneEndsStream(t *testing.T) {
	h := newHarness(t, Config{})
	s := h.createSession()
	c := h.openStream("/v1/sessions/" + s.ID + "/events/stream")
	c.expectSeqs(1)
	c.close()
	// The handler and the engine subscription must end: goleak in TestMain
	// fails the package otherwise. Give the server a moment, then check the
	// request was recorded (it is, once the handler returns).
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(h.logs.String(), `route=/v1/sessions/{id}/events/stream status=200`) {
		if time.Now().After(deadline) {
			t.Fatalf("stream handler still running; logs:\n%s", h.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
