package cli

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
)

func TestAttach(t *testing.T) {
	h := newExecHarness(t)
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout []string
		stderr []string
	}{
		{"keystrokes go to the terminal", []string{"attach", "--new", "--", "sh", "-c", `[ -t 0 ] && echo tty; read x; echo "got $x"`}, "abc\n",
			0, []string{"tty\r\n", "got abc\r\n"}, []string{"started prc_"}},
		{"the exit code is the process's", []string{"attach", "--new", "--", "sh", "-c", "exit 3"}, "", 3, nil, nil},
		{"the detach key leaves it running", []string{"attach", "--new", "--", "sleep", "600"}, "\x1dnot sent\n", 0, nil, []string{"detached from prc_"}},
		{"no process", []string{"attach"}, "", ExitUsage, nil, []string{"give one process id"}},
		{"a policy without --new", []string{"attach", "--policy", "strict", "prc_x"}, "", ExitUsage, nil, []string{"--policy and --provider go with --new"}},
		{"a provider without --new", []string{"attach", "--provider", "e2b", "prc_x"}, "", ExitUsage, nil, []string{"--policy and --provider go with --new"}},
		{"an unknown process", []string{"attach", "prc_unknown"}, "", 1, nil, []string{"404"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.run(t.Context(), strings.NewReader(tt.stdin), tt.args...)
			if r.code != tt.code {
				t.Fatalf("exit code %d, want %d; stdout %q, stderr %q", r.code, tt.code, r.stdout, r.stderr)
			}
			for _, s := range tt.stdout {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("no %q in stdout %q", s, r.stdout)
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("no %q in stderr %q", s, r.stderr)
				}
			}
		})
	}
}

// TestAttachAgain: attaching by id replays the screen output the daemon
// holds, then follows; the detached process was left running.
func TestAttachAgain(t *testing.T) {
	h := newExecHarness(t)
	r := h.run(t.Context(), strings.NewReader("echo first\n\x1d"), "attach", "--new", "--", "sh")
	id := regexp.MustCompile(`prc_[0-9A-Za-z]+`).FindString(r.stderr)
	if r.code != 0 || id == "" {
		t.Fatalf("code %d, stderr %q", r.code, r.stderr)
	}
	c, err := client.New(h.env[EnvURL])
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.GetProcess(t.Context(), id)
	if err != nil || p.Status != client.ProcessRunning || !p.TTY {
		t.Fatalf("after the detach: %+v, %v", p, err)
	}
	r = h.run(t.Context(), strings.NewReader("echo second; exit 4\n"), "attach", id)
	if r.code != 4 || !strings.Contains(r.stdout, "first\r\n") || !strings.Contains(r.stdout, "second\r\n") {
		t.Fatalf("code %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

func FuzzSplitDetach(f *testing.F) {
	for _, s := range []string{"", "abc", "\x1d", "ab\x1dcd", "\x1d\x1d", "\x03\x04\x1b[A"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		keys, detach := splitDetach(in)
		if bytes.IndexByte(keys, detachKey) >= 0 {
			t.Fatalf("the detach key would be sent: %q", keys)
		}
		if !bytes.HasPrefix(in, keys) || detach != (len(keys) < len(in)) || (detach && in[len(keys)] != detachKey) {
			t.Fatalf("splitDetach(%q) = %q, %v", in, keys, detach)
		}
	})
}
