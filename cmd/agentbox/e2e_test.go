package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

// These tests run the real binary as a subprocess: they are about what
// survives when the process dies.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentbox-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "agentbox")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building agentbox: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type daemonProc struct {
	cmd *exec.Cmd
	url string
	c   *client.Client
	log *bytes.Buffer
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type lockedBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

// startDaemon starts `agentbox serve` on dataDir and waits until it answers.
func startDaemon(t *testing.T, dataDir string, extra ...string) *daemonProc {
	t.Helper()
	return startDaemonOn(t, dataDir, freePort(t), extra...)
}

// startDaemonOn is startDaemon on a given port.
func startDaemonOn(t *testing.T, dataDir string, port int, extra ...string) *daemonProc {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	logs := &lockedBuffer{}
	args := append([]string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dataDir}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"HOME=" + dataDir, "PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("daemon log:\n%s", logs.String())
		}
	})
	c, err := client.New(url)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not healthy: %v\n%s", err, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &daemonProc{cmd: cmd, url: url, c: c, log: &logs.Buffer}
}

func (d *daemonProc) kill9(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
}

func mockScript(steps ...map[string]any) string {
	b, _ := json.Marshal(steps)
	return "/mock " + string(b)
}

// TestCrashSafety kills the daemon with SIGKILL at several points of a long
// streamed session and checks, after a restart, that every event the client
// had received is stored unchanged, that seqs have no gaps or duplicates, and
// that the session is marked interrupted.
func TestCrashSafety(t *testing.T) {
	dataDir := t.TempDir()
	outer := t // restarted daemons outlive the subtest that restarts them
	d := startDaemon(outer, dataDir)
	long := mockScript(map[string]any{"kind": "long", "count": 4000, "delay": "100us"})
	cases := []struct {
		name     string
		prompt   string
		killWhen func(received []event.Event) bool
	}{
		{"after first event", long, func(r []event.Event) bool { return len(r) >= 1 }},
		{"early in the stream", long, func(r []event.Event) bool { return len(r) >= 40 }},
		{"mid-stream", long, func(r []event.Event) bool { return len(r) >= 700 }},
		{"late in the stream", long, func(r []event.Event) bool { return len(r) >= 2500 }},
		{"permission pending", "/scenario permission-write", func(r []event.Event) bool {
			return len(r) > 0 && r[len(r)-1].Type == event.TypePermissionRequested
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s, err := d.c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.c.Send(ctx, s.ID, tc.prompt); err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithCancel(ctx)
			st := d.c.Stream(sctx, s.ID, 0, client.WithMaxAttempts(1))
			var received []event.Event
			for st.Next() {
				received = append(received, st.Event())
				if tc.killWhen(received) {
					break
				}
			}
			cancel()
			if !tc.killWhen(received) {
				t.Fatalf("stream ended early after %d events: %v", len(received), st.Err())
			}
			d.kill9(t)

			d = startDaemon(outer, dataDir)
			var stored []event.Event
			if err := d.c.EventsAll(ctx, s.ID, 0, func(e event.Event) error {
				stored = append(stored, e)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			for i, e := range stored {
				if e.Seq != int64(i+1) {
					t.Fatalf("stored event %d has seq %d: gap or duplicate", i, e.Seq)
				}
			}
			if len(stored) < len(received) {
				t.Fatalf("client received %d events, only %d stored", len(received), len(stored))
			}
			for i, r := range received {
				if err := sameEvent(r, stored[i]); err != nil {
					t.Fatalf("event seq %d: %v", r.Seq, err)
				}
			}
			got, err := d.c.GetSession(ctx, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != client.StatusInterrupted {
				t.Fatalf("session status after crash: %s, want interrupted", got.Status)
			}
			last := stored[len(stored)-1]
			p, err := last.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if end, ok := p.(*event.SessionEnded); !ok || end.Reason != event.EndInterrupted {
				t.Fatalf("last event %s %s, want session.ended interrupted", last.Type, last.Data)
			}
			reqs, err := d.c.Requests(ctx, s.ID, "pending")
			if err != nil {
				t.Fatal(err)
			}
			if len(reqs.Requests) != 0 {
				t.Fatalf("pending requests after recovery: %+v", reqs.Requests)
			}
			t.Logf("killed after %d received events; %d stored", len(received), len(stored))
		})
	}
}

func sameEvent(a, b event.Event) error {
	if a.ID != b.ID || a.Seq != b.Seq || a.Type != b.Type || a.TurnID != b.TurnID || !a.Time.Equal(b.Time) {
		return fmt.Errorf("envelope differs: %+v vs %+v", a, b)
	}
	var x, y bytes.Buffer
	if err := json.Compact(&x, a.Data); err != nil {
		return err
	}
	if err := json.Compact(&y, b.Data); err != nil {
		return err
	}
	if !bytes.Equal(x.Bytes(), y.Bytes()) {
		return fmt.Errorf("data differs: %s vs %s", x.Bytes(), y.Bytes())
	}
	return nil
}

// TestGracefulShutdown sends SIGTERM while a turn runs: the process exits in
// time and the session is marked interrupted with its turn closed.
func TestGracefulShutdown(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dataDir := t.TempDir()
			d := startDaemon(t, dataDir, "--shutdown-timeout", "3s")
			ctx := t.Context()
			s, err := d.c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
			if err != nil {
				t.Fatal(err)
			}
			turn, err := d.c.Send(ctx, s.ID, mockScript(map[string]any{"kind": "sleep", "duration": "1h"}))
			if err != nil {
				t.Fatal(err)
			}
			// A second session waits on a permission.
			s2, err := d.c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.c.Send(ctx, s2.ID, "/scenario permission-command"); err != nil {
				t.Fatal(err)
			}
			waitType(t, d.c, s2.ID, event.TypePermissionRequested)
			waitStatus(t, d.c, s.ID, client.StatusRunning)

			start := time.Now()
			if err := d.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- d.cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("daemon exited with %v", err)
				}
			case <-time.After(8 * time.Second):
				t.Fatal("daemon did not exit within 8s of " + sig.String())
			}
			t.Logf("exited %v after %s", time.Since(start).Round(time.Millisecond), sig)

			d = startDaemon(t, dataDir)
			for _, id := range []string{s.ID, s2.ID} {
				got, err := d.c.GetSession(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if got.Status != client.StatusInterrupted {
					t.Fatalf("status %s, want interrupted", got.Status)
				}
			}
			page, err := d.c.Events(ctx, s.ID, 0, 1000)
			if err != nil {
				t.Fatal(err)
			}
			var tail []string
			for _, e := range page.Events[len(page.Events)-2:] {
				tail = append(tail, string(e.Type))
			}
			if strings.Join(tail, ",") != "turn.completed,session.ended" {
				t.Fatalf("last events %v, want turn.completed, session.ended", tail)
			}
			p, _ := page.Events[len(page.Events)-2].Decode()
			if tc := p.(*event.TurnCompleted); tc.TurnID != turn.TurnID || tc.StopReason != event.StopInterrupted {
				t.Fatalf("turn.completed %+v", tc)
			}
		})
	}
}

func waitType(t *testing.T, c *client.Client, id string, typ event.Type) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st := c.Stream(ctx, id, 0, client.Until(func(e event.Event) bool { return e.Type == typ }))
	for st.Next() {
		if st.Event().Type == typ {
			return
		}
	}
	t.Fatalf("no %s event: %v", typ, st.Err())
}

func waitStatus(t *testing.T, c *client.Client, id, status string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		s, err := c.GetSession(t.Context(), id)
		if err == nil && s.Status == status {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("session %s never reached %s", id, status)
}

// TestNonLoopbackNeedsToken: the daemon refuses to listen on a non-loopback
// address without a token.
func TestNonLoopbackNeedsToken(t *testing.T) {
	cmd := exec.Command(binary, "serve", "--listen", "0.0.0.0:0", "--data-dir", t.TempDir())
	cmd.Env = []string{"HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("serve on 0.0.0.0 without token: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "token") {
		t.Fatalf("error does not mention the token:\n%s", out)
	}
}
