package procrt

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// host records what the runtime emits.
type host struct {
	mu     sync.Mutex
	events []event.Event
}

func (h *host) Emit(_ context.Context, evs ...event.Event) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, evs...)
	return nil
}

func (h *host) RequestPermission(context.Context, agent.PermissionRequest) (agent.PermissionAnswer, error) {
	return agent.PermissionAnswer{}, errors.New("not asked")
}

func (h *host) AskQuestion(context.Context, agent.Question) (agent.Answer, error) {
	return agent.Answer{}, errors.New("not asked")
}

func (h *host) SetNativeSessionID(context.Context, string) error { return nil }

// start runs script under sh with the runtime and serves its lines to a
// channel.
func start(t *testing.T, script string, cfg Config, maxLine int) (*Runtime, *host, <-chan string) {
	t.Helper()
	h := &host{}
	cfg.Name, cfg.Who, cfg.Short, cfg.ErrPrefix, cfg.Host = "fake", "the fake agent", "the agent", "fake: the agent", h
	OrDefault(&cfg.CloseGrace, DefaultCloseGrace)
	OrDefault(&cfg.InterruptTimeout, DefaultInterruptTimeout)
	r, err := Start(&agent.Proc{Path: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Dir: t.TempDir()}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	r.ServeLines(maxLine, func(line []byte) { lines <- string(line) })
	t.Cleanup(func() {
		r.Kill()
		<-r.Done()
	})
	return r, h, lines
}

func collect(lines <-chan string, done <-chan struct{}) []string {
	<-done
	var got []string
	for {
		select {
		case l := <-lines:
			got = append(got, l)
		default:
			return got
		}
	}
}

func TestServeLines(t *testing.T) {
	// Blank lines are skipped, CRLF is a line end, a line over the limit
	// is reported, a last line without a newline still counts.
	r, h, lines := start(t, `printf 'one\n\n  \ntwo\r\n'; head -c 100 /dev/zero | tr '\0' x; printf '\nthree\nfour'`, Config{}, 50)
	got := collect(lines, r.Done())
	if strings.Join(got, "|") != "one|two|three|four" {
		t.Errorf("lines %q", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) != 1 {
		t.Fatalf("events %v", h.events)
	}
	var e event.Error
	if err := json.Unmarshal(h.events[0].Data, &e); err != nil || e.Code != "output_too_long" ||
		e.Message != "skipped a line of 101 bytes from the agent (the limit is 50)" {
		t.Errorf("event %s (%v)", h.events[0].Data, err)
	}
}

func TestExitRecorded(t *testing.T) {
	onExit := make(chan struct{})
	r, _, _ := start(t, `echo 'it broke' >&2; exit 3`, Config{OnExit: func() { close(onExit) }}, 100)
	<-r.Done()
	select {
	case <-onExit:
	default:
		t.Error("OnExit did not run before Done")
	}
	if !r.Gone() {
		t.Error("Gone is false after Done")
	}
	end := r.Exit()
	if end.Reason != event.EndError || end.ExitCode == nil || *end.ExitCode != 3 ||
		end.Message != "the fake agent exited with code 3" || end.StderrTail != "it broke\n" {
		t.Errorf("Exit() = %+v", end)
	}
	if err := r.ExitError(); err == nil || err.Error() != "fake: the agent exited with code 3: it broke" {
		t.Errorf("ExitError() = %v", err)
	}
	if _, err := r.BeginTurn(); err == nil || err.Error() != r.ExitError().Error() {
		t.Errorf("BeginTurn after the exit: %v", err)
	}
	if err := r.WriteJSON(t.Context(), map[string]int{"a": 1}); err == nil {
		t.Error("WriteJSON to a process that is gone succeeded")
	}
}

func TestBeginTurn(t *testing.T) {
	r, _, _ := start(t, `cat >/dev/null`, Config{ExitsOnEOF: true}, 100)
	end, err := r.BeginTurn()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.BeginTurn(); !errors.Is(err, ErrBusy) || err.Error() != "fake: a turn is already running" {
		t.Errorf("second BeginTurn: %v", err)
	}
	end()
	if err := r.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.BeginTurn(); err == nil {
		t.Error("BeginTurn after Close succeeded")
	}
}

func TestClose(t *testing.T) {
	for _, tc := range []struct {
		name       string
		script     string
		exitsOnEOF bool
		grace      time.Duration // long where the process ends before it
		code       int
		msg        string
	}{
		// Closing stdin is enough.
		{"eof", `cat >/dev/null; exit 4`, true, time.Hour, 4, "the fake agent was closed; it exited with code 4"},
		// Not waiting for EOF: SIGTERM at once.
		{"term", `while :; do sleep 1; done`, false, time.Hour, 128 + 15, "the fake agent was closed; it was killed by signal 15 (terminated)"},
		// Deaf to both: SIGKILL.
		{"kill", `trap '' TERM; while :; do sleep 1; done`, true, 10 * time.Millisecond, 128 + 9, "the fake agent was closed; it was killed by signal 9 (killed)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, _ := start(t, tc.script, Config{ExitsOnEOF: tc.exitsOnEOF, CloseGrace: tc.grace}, 100)
			if err := r.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			end := r.Exit()
			if end.Reason != event.EndCompleted || end.ExitCode == nil || *end.ExitCode != tc.code || end.Message != tc.msg {
				t.Errorf("Exit() = %+v", end)
			}
		})
	}
}

func TestCloseContext(t *testing.T) {
	// A Close whose context ends kills the process at once.
	r, _, lines := start(t, `trap '' TERM; echo ready; while :; do sleep 1; done`, Config{CloseGrace: time.Hour}, 100)
	<-lines // TERM is ignored from here on
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v", err)
	}
	<-r.Done()
	if end := r.Exit(); end.ExitCode == nil || *end.ExitCode != 128+9 {
		t.Errorf("Exit() = %+v", end)
	}
}

// TestAwait runs turns against cat: what the turn writes comes back as a
// line, which ends it.
func TestAwait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		cancel bool
		// timeout is long where the process ends the turn before it.
		timeout time.Duration
		stop    event.StopReason
		msg     string
		err     string
	}{
		{"result", `cat`, false, time.Hour, event.StopEndTurn, "", ""},
		{"interrupted", `cat`, true, time.Hour, event.StopInterrupted, "", ""},
		// Reads the interrupt and ignores it: killed.
		{"deaf", `while read l; do :; done`, true, 10 * time.Millisecond, event.StopInterrupted, "the agent did not stop within 10ms of the interrupt and was killed", ""},
		{"crash", `read l; echo bye >&2; exit 2`, false, time.Hour, "", "", "fake: the agent exited with code 2: bye"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _, lines := start(t, tc.script, Config{InterruptTimeout: tc.timeout}, 100)
			result := make(chan agent.Result, 1)
			go func() {
				for l := range lines {
					if l == `{"end":true}` || l == `{"interrupt":true}` {
						result <- agent.Result{StopReason: event.StopEndTurn}
					}
				}
			}()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				cancel()
			} else if err := r.WriteJSON(ctx, map[string]bool{"end": true}); err != nil {
				t.Fatal(err)
			}
			res, err := r.Await(ctx, result, func(wctx context.Context) error {
				return r.WriteJSON(wctx, map[string]bool{"interrupt": true})
			})
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("Await = %+v, %v; want error %q", res, err, tc.err)
				}
				return
			}
			if err != nil || res.StopReason != tc.stop || res.Message != tc.msg {
				t.Errorf("Await = %+v, %v", res, err)
			}
		})
	}
}

// TestFailed: a failed write is told from the agent's end by an event, not
// a fixed wait: an agent that broke its stdin and exits later, or whose
// protocol connection ended, fails the turn with how it exited; a write
// that failed while the agent lives on is the caller's at once.
func TestFailed(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	past, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	for _, c := range []struct {
		name, script string
		ctx          context.Context
		ended        <-chan struct{}
		want         string // ExitError, "" for not ended
	}{
		{"stdin closed, exits later", `exec 0<&-; echo closed; echo gone >&2; sleep 0.5; exit 4`, t.Context(), nil, "fake: the agent exited with code 4: gone"},
		{"connection ended", `echo closed; sleep 0.5; exit 5`, past, closed, "fake: the agent exited with code 5"},
		// cat keeps the stdout pipe open on fd 3: an agent that lives on
		// has not closed its output either.
		{"alive, the write timed out", `echo closed; exec cat 3>&1 >/dev/null`, past, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _, lines := start(t, c.script, Config{}, 100)
			<-lines // the script reached its point
			err := r.WriteJSON(c.ctx, map[string]int{"a": 1})
			if err == nil {
				t.Fatal("the write succeeded")
			}
			ended, exitErr := r.Failed(err, c.ended)
			switch {
			case c.want == "" && ended:
				t.Errorf("Failed(%v) = %v, true; want not ended (the agent lives)", err, exitErr)
			case c.want != "" && (!ended || exitErr == nil || exitErr.Error() != c.want):
				t.Errorf("Failed(%v) = %v, %v; want %q, true", err, exitErr, ended, c.want)
			}
			if c.want == "" && r.Gone() {
				t.Error("the agent is gone")
			}
		})
	}
}
