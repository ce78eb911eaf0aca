package agent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
)

func TestTailBuffer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		writes []string
		want   string
		cut    bool
	}{
		{"empty", 8, nil, "", false},
		{"fits", 8, []string{"abc", "def"}, "abcdef", false},
		{"exactly full", 6, []string{"abc", "def"}, "abcdef", false},
		{"cut", 4, []string{"abc", "def"}, "…cdef", true},
		{"one large write", 3, []string{"abcdefgh"}, "…fgh", true},
		{"broken character", 8, []string{"a\xffb"}, "a?b", false},
		{"cut inside a character", 4, []string{"aé", "xyz"}, "…?xyz", true},
		{"zero size", 0, []string{"abc"}, "…", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewTailBuffer(tc.size)
			for _, w := range tc.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := b.String(); got != tc.want {
				t.Errorf("String = %q, want %q", got, tc.want)
			}
			raw, cut := b.Bytes()
			if cut != tc.cut || len(raw) > tc.size {
				t.Errorf("Bytes = %q, %v; want at most %d bytes, cut %v", raw, cut, tc.size, tc.cut)
			}
			if len(raw) > 0 {
				raw[0] = 'X' // a copy: the buffer is unchanged
				if again, _ := b.Bytes(); again[0] == 'X' {
					t.Error("Bytes returned the buffer itself")
				}
			}
		})
	}
}

func TestTailBufferSummary(t *testing.T) {
	long := strings.Repeat("é", 1500) // 3000 bytes
	for _, tc := range []struct {
		name, in, want string
	}{
		{"nothing", "", ""},
		{"only space", " \n\t\n", ""},
		{"trimmed", "\n  oops\n\n", "oops"},
		{"last five lines", "1\n2\n3\n4\n5\n6\n7\n", "3\n4\n5\n6\n7"},
		{"clipped at a character", long, strings.Repeat("é", 1000) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewTailBuffer(8 << 10)
			_, _ = b.Write([]byte(tc.in))
			if got := b.Summary(); got != tc.want {
				t.Errorf("Summary = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 3, "abc"},
		{"abcd", 3, "abc…"},
		{"", 0, ""},
		{"ab", 0, "…"},
		{"aé", 2, "a…"}, // é is two bytes: not cut in half
		{"日本", 4, "日…"},
		{"日本", 6, "日本"},
	} {
		if got := Clip(tc.s, tc.n); got != tc.want {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

func TestProcExitEnded(t *testing.T) {
	ex := ProcExit{Code: 2, Desc: "exited with code 2"}
	got := ex.Ended("the x CLI", false, "boom")
	if got.Reason != event.EndError || got.Message != "the x CLI exited with code 2" || got.ExitCode == nil || *got.ExitCode != 2 || got.StderrTail != "boom" {
		t.Errorf("not closing: %+v", got)
	}
	got = ex.Ended("the x CLI", true, "")
	if got.Reason != event.EndCompleted || got.Message != "the x CLI was closed; it exited with code 2" || got.ExitCode == nil || *got.ExitCode != 2 {
		t.Errorf("closing: %+v", got)
	}
}

// TestProcStop stops real processes: one that exits when its stdin
// closes, one that needs SIGTERM, one that ignores SIGTERM and is killed,
// and one whose ctx ends before the grace does.
func TestProcStop(t *testing.T) {
	// A grace the process must not outlast is long, so that a slow
	// machine does not change the outcome; one it must outlast is short.
	const long, short = time.Minute, 300 * time.Millisecond
	for _, tc := range []struct {
		name       string
		script     string
		exitsOnEOF bool
		grace      time.Duration
		ctxTimeout time.Duration
		wantCode   int
		wantErr    error
	}{
		{"exits on EOF", "echo ready; cat >/dev/null", true, long, time.Minute, 0, nil},
		{"SIGTERM", "echo ready; exec sleep 60", false, long, time.Minute, 128 + 15, nil},
		{"SIGTERM after waiting for EOF", "echo ready; exec sleep 60", true, short, time.Minute, 128 + 15, nil},
		{"SIGTERM ignored: killed", "trap '' TERM; echo ready; exec sleep 60", false, short, time.Minute, 128 + 9, nil},
		{"ctx ends first: killed", "trap '' TERM; echo ready; exec sleep 60", true, long, 50 * time.Millisecond, 128 + 9, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inR, inW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer outR.Close()
			p := &Proc{Path: "/bin/sh", Args: []string{"-c", tc.script}, Env: []string{"PATH=/usr/bin:/bin"}, Stdin: inR, Stdout: outW}
			if err := p.Start(); err != nil {
				t.Fatal(err)
			}
			inR.Close()
			outW.Close()
			done := make(chan struct{})
			var ex ProcExit
			go func() {
				ex = p.Wait()
				close(done)
			}()
			// The shell has set its trap once it says so.
			if line, err := bufio.NewReader(outR).ReadString('\n'); line != "ready\n" {
				t.Fatalf("the shell said %q, %v", line, err)
			}
			inW.Close()
			ctx, cancel := context.WithTimeout(t.Context(), tc.ctxTimeout)
			defer cancel()
			if err := p.Stop(ctx, done, tc.grace, tc.exitsOnEOF); !errors.Is(err, tc.wantErr) {
				t.Errorf("Stop = %v, want %v", err, tc.wantErr)
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatal("the process is still running")
			}
			if ex.Code != tc.wantCode {
				t.Errorf("the process %s (code %d), want code %d", ex.Desc, ex.Code, tc.wantCode)
			}
		})
	}
}

// TestStartPiped runs a real process on the pipes and checks each one.
func TestStartPiped(t *testing.T) {
	p := &Proc{Path: "/bin/sh", Args: []string{"-c", "read line; echo out:$line; echo err:$line >&2"}, Env: []string{"PATH=/usr/bin:/bin"}}
	stdin, stdout, stderr, err := p.StartPiped()
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	defer stderr.Close()
	if err := WriteJSONLine(t.Context(), stdin, map[string]string{"a": "b"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	out, _ := io.ReadAll(stdout)
	errOut, _ := io.ReadAll(stderr)
	if ex := p.Wait(); ex.Code != 0 {
		t.Errorf("the process %s", ex.Desc)
	}
	if string(out) != "out:{\"a\":\"b\"}\n" || string(errOut) != "err:{\"a\":\"b\"}\n" {
		t.Errorf("stdout %q, stderr %q", out, errOut)
	}
}

// TestWriteJSONLineDeadline: a write nobody reads gives up at ctx's
// deadline rather than hanging.
func TestWriteJSONLineDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	big := strings.Repeat("x", 4<<20) // more than a pipe holds
	if err := WriteJSONLine(ctx, w, big, time.Minute); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("WriteJSONLine = %v, want a deadline error", err)
	}
	if err := WriteJSONLine(t.Context(), w, func() {}, time.Minute); err == nil {
		t.Error("a value JSON cannot encode was written")
	}
}
