//go:build linux

package execution

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// screen follows a process's output and waits for text in it.
type screen struct {
	t   *testing.T
	ch  <-chan Event
	out bytes.Buffer
	end *ProcessInfo
}

func follow(t *testing.T, svc *Service, id string, after int64) *screen {
	t.Helper()
	ch, err := svc.Subscribe(t.Context(), id, after)
	if err != nil {
		t.Fatal(err)
	}
	return &screen{t: t, ch: ch}
}

// waitFor reads until the output holds want, or the process ends.
func (s *screen) waitFor(want string) {
	s.t.Helper()
	timeout := time.After(60 * time.Second)
	for !strings.Contains(s.out.String(), want) {
		select {
		case ev, ok := <-s.ch:
			if !ok {
				s.t.Fatalf("the stream ended without %q; output %q", want, s.out.String())
			}
			s.take(ev)
		case <-timeout:
			s.t.Fatalf("no %q in the output %q", want, s.out.String())
		}
	}
}

func (s *screen) take(ev Event) {
	switch ev.Type {
	case EventStderr:
		s.t.Errorf("a terminal's output came as stderr: %q", ev.Data)
	case EventStdout:
		s.out.Write(ev.Data)
	case EventExit:
		s.end = ev.Exit
	}
}

// rest reads to the exit event.
func (s *screen) rest() {
	s.t.Helper()
	for _, ev := range collect(s.t, s.ch) {
		s.take(ev)
	}
}

// terminalScript reports whether its stdio are terminals and the
// terminal's size, reads a line, and reports the size again.
const terminalScript = `[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo "is a tty"; echo "size $(stty size)"; read line; echo "now $(stty size) after $line"; printf '\033[2J\033[Hdone\n'`

func testTerminal(t *testing.T, svc *Service) {
	info, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sh", "-c", terminalScript}, TTY: true, Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !info.TTY || info.Rows != 30 || info.Cols != 100 || !info.StdinOpen {
		t.Fatalf("started: %+v", info)
	}
	s := follow(t, svc, info.ID, 0)
	s.waitFor("size 30 100")
	if !strings.Contains(s.out.String(), "is a tty") {
		t.Fatalf("the process's stdio are not terminals: %q", s.out.String())
	}
	if err := svc.Resize(info.ID, 50, 132); err != nil {
		t.Fatal(err)
	}
	if got, _ := svc.Get(info.ID); got.Rows != 50 || got.Cols != 132 {
		t.Fatalf("after resize: %+v", got)
	}
	if err := svc.SendStdin(t.Context(), info.ID, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	s.rest()
	if s.end == nil || s.end.ExitCode != 0 || s.end.StdinOpen {
		t.Fatalf("exit %+v", s.end)
	}
	out := s.out.String()
	// The terminal echoes the input; the size is the new one; escape
	// sequences and CR LF are passed on as bytes, not interpreted.
	for _, want := range []string{"go\r\n", "now 50 132 after go\r\n", "\x1b[2J\x1b[Hdone\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the output %q", want, out)
		}
	}

	// Reconnecting replays the same screen output, from the start or
	// from a seq.
	again := follow(t, svc, info.ID, 0)
	again.rest()
	if again.out.String() != out {
		t.Fatalf("replay %q, want %q", again.out.String(), out)
	}
	evs := collect(t, mustSubscribe(t, svc, info.ID, 1))
	var tail bytes.Buffer
	for _, ev := range evs {
		tail.Write(ev.Data)
	}
	if !strings.HasSuffix(out, tail.String()) || evs[0].Seq != 2 {
		t.Fatalf("resumed after seq 1: first seq %d, output %q", evs[0].Seq, tail.String())
	}
	if err := svc.Resize(info.ID, 10, 10); !errors.Is(err, ErrConflict) {
		t.Fatalf("resize after the end: %v", err)
	}
}

func mustSubscribe(t *testing.T, svc *Service, id string, after int64) <-chan Event {
	t.Helper()
	ch, err := svc.Subscribe(t.Context(), id, after)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestTerminalProcess(t *testing.T) {
	testTerminal(t, newTestService(t, nil).svc)
}

func TestRealTerminalProcess(t *testing.T) {
	testTerminal(t, realService(t, 0))
}

func TestTerminalBadRequests(t *testing.T) {
	svc := newTestService(t, nil).svc
	piped, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sleep", "60"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	term, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sleep", "60"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	if term.Rows != DefaultRows || term.Cols != DefaultCols {
		t.Fatalf("default size %dx%d", term.Rows, term.Cols)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"resize a process without a terminal", func() error { return svc.Resize(piped.ID, 40, 100) }, ErrConflict},
		{"resize to no rows", func() error { return svc.Resize(term.ID, 0, 100) }, ErrInvalid},
		{"resize too wide", func() error { return svc.Resize(term.ID, 40, MaxTermSize+1) }, ErrInvalid},
		{"resize negative", func() error { return svc.Resize(term.ID, -1, 80) }, ErrInvalid},
		{"resize an unknown process", func() error { return svc.Resize("prc_nope", 40, 100) }, ErrNotFound},
		{"close a terminal's input", func() error { return svc.CloseStdin(term.ID) }, ErrConflict},
		{"size without a terminal", func() error {
			_, err := svc.Start(t.Context(), StartRequest{Argv: []string{"true"}, Rows: 10, Cols: 10})
			return err
		}, ErrInvalid},
		{"a huge terminal", func() error {
			_, err := svc.Start(t.Context(), StartRequest{Argv: []string{"true"}, TTY: true, Rows: 100000, Cols: 80})
			return err
		}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
	for _, id := range []string{piped.ID, term.ID} {
		if err := svc.Remove(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTerminalHostileProgram: a program that floods its terminal costs
// the daemon no more than the bounded ring, and one that never reads its
// input does not hold a writer forever.
func TestTerminalHostileProgram(t *testing.T) {
	const buf = 64 << 10
	svc := newTestService(t, func(o *Options) { o.OutputBuffer = buf }).svc
	flood, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sh", "-c", "head -c 4000000 /dev/zero | tr '\\0' 'x'; echo; echo end"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Wait(t.Context(), flood.ID); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, mustSubscribe(t, svc, flood.ID, 0))
	var held bytes.Buffer
	for _, ev := range evs {
		held.Write(ev.Data)
	}
	if evs[0].Type != EventDropped || held.Len() > buf || !bytes.HasSuffix(held.Bytes(), []byte("end\r\n")) {
		t.Fatalf("first event %s, %d bytes held (bound %d), ending %q", evs[0].Type, held.Len(), buf, held.Bytes()[max(0, held.Len()-20):])
	}

	// In raw mode the terminal keeps what is not read (canonical mode
	// would discard it) until its buffer is full.
	deaf, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sh", "-c", "stty raw -echo; echo ready; exec sleep 600"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	follow(t, svc, deaf.ID, 0).waitFor("ready")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := svc.SendStdin(ctx, deaf.ID, bytes.Repeat([]byte("y"), 1<<20)); err == nil {
		t.Fatal("a megabyte went into the input of a program that does not read it")
	}
	if err := svc.Remove(t.Context(), deaf.ID); err != nil {
		t.Fatal(err)
	}
}

// testGroupKilled: deleting a terminal process kills what it started in
// its process group too.
func testGroupKilled(t *testing.T, svc *Service) {
	info, err := svc.Start(t.Context(), StartRequest{Argv: []string{"sh", "-c", "sleep 600 & echo started; wait"}, TTY: true})
	if err != nil {
		t.Fatal(err)
	}
	follow(t, svc, info.ID, 0).waitFor("started")
	var child int
	waitFor(t, "the background child", func() bool { child = childOf(info.Pid); return child != 0 })
	if err := svc.Remove(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the background child to die", func() bool { return !alive(child) })
}

func TestTerminalGroupKilledOnRemove(t *testing.T) { testGroupKilled(t, newTestService(t, nil).svc) }

func TestRealTerminalGroupKilledOnRemove(t *testing.T) { testGroupKilled(t, realService(t, 0)) }

// childOf finds a child of host pid ppid, 0 if none.
func childOf(ppid int) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, _ := statOf(pid); p == ppid {
			return pid
		}
	}
	return 0
}

// statOf reads a process's parent and state from /proc.
func statOf(pid int) (ppid int, state string) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, ""
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ = strconv.Atoi(f[1])
	return ppid, f[0]
}

// alive: the process exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	_, state := statOf(pid)
	return state != "" && state != "Z"
}

// TestRealLentTerminal runs terminal processes in a sandbox lent to the
// service (a session's), on the process runtime: the command sees its
// terminal and its size, a resize reaches it, and a kill and the timeout
// end the command and what it started in its group, never the sandbox,
// where another process still runs.
func TestRealLentTerminal(t *testing.T) {
	svc := realService(t, 0)
	pol, err := svc.resolve(PolicyRef{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := svc.sandboxFor(t.Context(), pol, nil, "", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = b.sb.Close(context.Background()) })
	start := func(t *testing.T, req StartRequest) ProcessInfo {
		t.Helper()
		req.Sandbox, req.Limits, req.Scope, req.TTY = b.sb, b.spec.Limits, "ses_a", true
		info, err := svc.Start(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}

	t.Run("terminal and resize", func(t *testing.T) {
		info := start(t, StartRequest{Argv: []string{"sh", "-c", terminalScript}, Rows: 30, Cols: 100})
		s := follow(t, svc, info.ID, 0)
		s.waitFor("size 30 100")
		if !strings.Contains(s.out.String(), "is a tty") {
			t.Fatalf("the process's stdio are not terminals: %q", s.out.String())
		}
		if err := svc.Resize(info.ID, 50, 132); err != nil {
			t.Fatal(err)
		}
		if err := svc.SendStdin(t.Context(), info.ID, []byte("go\n")); err != nil {
			t.Fatal(err)
		}
		s.rest()
		if s.end == nil || s.end.ExitCode != 0 || !strings.Contains(s.out.String(), "now 50 132 after go") {
			t.Fatalf("exit %+v, output %q", s.end, s.out.String())
		}
	})

	// The command is in the terminal's foreground group: reading the
	// terminal does not stop it, and ^C (and the API's SIGINT, the same
	// key) reaches it.
	t.Run("foreground", func(t *testing.T) {
		info := start(t, StartRequest{Argv: []string{"sh", "-c", `trap 'echo got-int; exit 5' INT; case $(ps -o stat= -p $$) in *+*) echo foreground;; *) echo background;; esac; while :; do read x && echo "read $x"; done`}})
		s := follow(t, svc, info.ID, 0)
		s.waitFor("ground")
		if !strings.Contains(s.out.String(), "foreground") {
			t.Fatalf("the command is not in the terminal's foreground group: %q", s.out.String())
		}
		if err := svc.SendStdin(t.Context(), info.ID, []byte("hello\n")); err != nil {
			t.Fatal(err)
		}
		s.waitFor("read hello")
		if err := svc.Signal(info.ID, syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		s.rest()
		if s.end == nil || s.end.ExitCode != 5 || !strings.Contains(s.out.String(), "got-int") {
			t.Fatalf("exit %+v, output %q", s.end, s.out.String())
		}
	})

	for _, tt := range []struct {
		name    string
		timeout time.Duration
		kill    bool
		reason  string
	}{
		{name: "kill", kill: true},
		{name: "timeout", timeout: 300 * time.Millisecond, reason: "timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			other := start(t, StartRequest{Argv: []string{"sh", "-c", "echo up; read x; echo still $x"}})
			o := follow(t, svc, other.ID, 0)
			o.waitFor("up")
			info := start(t, StartRequest{Argv: []string{"sh", "-c", "sleep 600 & echo started; wait"}, Timeout: tt.timeout})
			follow(t, svc, info.ID, 0).waitFor("started")
			var child int
			waitFor(t, "the background child", func() bool { child = childOf(info.Pid); return child != 0 })
			if tt.kill {
				if err := svc.Signal(info.ID, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			end, err := svc.Wait(t.Context(), info.ID)
			if err != nil {
				t.Fatal(err)
			}
			reason := ""
			if end.Error != nil {
				reason = end.Error.Code
			}
			if end.Signal != "SIGKILL" || reason != tt.reason {
				t.Fatalf("exit %+v, want SIGKILL, reason %q", end, tt.reason)
			}
			waitFor(t, "the background child to die", func() bool { return !alive(child) })
			// The sandbox, and the other process in it, live on.
			if err := svc.SendStdin(t.Context(), other.ID, []byte("here\n")); err != nil {
				t.Fatal(err)
			}
			o.rest()
			if o.end == nil || o.end.ExitCode != 0 || !strings.Contains(o.out.String(), "still here") {
				t.Fatalf("the other process: exit %+v, output %q", o.end, o.out.String())
			}
		})
	}
}
