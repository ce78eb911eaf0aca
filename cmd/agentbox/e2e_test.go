package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	"github.com/agentbox/agentbox/internal/reexec"
)

// These tests run the real binary as a subprocess: they are about what
// survives when the process dies.

var binary string

func TestMain(m *testing.M) {
	reexec.Init()
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
	cmd   *exec.Cmd
	url   string
	token string // from its token file
	c     *client.Client
	log   *bytes.Buffer
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
	return startDaemonEnv(t, dataDir, port, nil, extra...)
}

// startDaemonEnv is startDaemonOn with env added to the daemon's
// environment.
func startDaemonEnv(t *testing.T, dataDir string, port int, env []string, extra ...string) *daemonProc {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	logs := &lockedBuffer{}
	args := append([]string{"serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", dataDir}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"HOME=" + dataDir, "PATH=/usr/bin:/bin"}, env...)
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
	// Started without --token: the daemon's token is in its data dir.
	tok, err := client.ReadTokenFile(filepath.Join(dataDir, client.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	if c, err = client.New(url, client.WithToken(tok)); err != nil {
		t.Fatal(err)
	}
	return &daemonProc{cmd: cmd, url: url, token: tok, c: c, log: &logs.Buffer}
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

// TestTokenFile: a daemon started without --token makes a token in
// DATA_DIR/token, mode 0600, requires it, and keeps it across restarts; the
// CLI reads it by itself, for a daemon on this machine only; with
// --insecure-no-auth there is no token at all.
func TestTokenFile(t *testing.T) {
	dataDir := t.TempDir()
	d := startDaemon(t, dataDir)
	path := filepath.Join(dataDir, client.TokenFileName)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %04o, want 0600", st.Mode().Perm())
	}
	tok, err := client.ReadTokenFile(path)
	if err != nil || len(tok) < 32 {
		t.Fatalf("token %q: %v", tok, err)
	}
	bare, err := client.New(d.url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.ListSessions(t.Context(), client.ListOptions{}); !client.IsUnauthorized(err) {
		t.Fatalf("without the token: %v, want 401", err)
	}
	if _, err := d.c.ListSessions(t.Context(), client.ListOptions{}); err != nil {
		t.Fatalf("with the file's token: %v", err)
	}

	cli := func(env ...string) (string, error) {
		cmd := exec.Command(binary, "sessions", "list")
		cmd.Env = append([]string{"HOME=" + t.TempDir(), "AGENTBOX_URL=" + d.url}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := cli("AGENTBOX_DATA_DIR=" + dataDir); err != nil {
		t.Fatalf("the CLI with AGENTBOX_DATA_DIR: %v\n%s", err, out)
	}
	if out, err := cli(); err == nil || !strings.Contains(out, "401") || !strings.Contains(out, "DATA_DIR/token") {
		t.Fatalf("the CLI without the data dir: %v\n%s", err, out)
	}
	// The default data dir is found from HOME.
	home := t.TempDir()
	share := filepath.Join(home, ".local", "share", "agentbox")
	if err := os.MkdirAll(share, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(share, "token"), []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "sessions", "list")
	cmd.Env = []string{"HOME=" + home, "AGENTBOX_URL=" + d.url}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the CLI with the default data dir: %v\n%s", err, out)
	}

	// Restarted, the daemon keeps its token.
	d.kill9(t)
	d2 := startDaemon(t, dataDir)
	if tok2, _ := client.ReadTokenFile(path); tok2 != tok {
		t.Errorf("the token changed across a restart")
	}
	d2.kill9(t)

	// A token file others can read is refused, by the daemon and the CLI.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(binary, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--data-dir", dataDir)
	srv.Env = []string{"HOME=" + dataDir}
	if out, err := srv.CombinedOutput(); err == nil || !strings.Contains(string(out), "chmod 600") {
		t.Errorf("serve with a token file of mode 0644: %v\n%s", err, out)
	}
	if out, err := cli("AGENTBOX_DATA_DIR=" + dataDir); err == nil || !strings.Contains(out, "chmod 600") {
		t.Errorf("the CLI with a token file of mode 0644: %v\n%s", err, out)
	}

	// --insecure-no-auth: no token, no file.
	open := t.TempDir()
	port := freePort(t)
	insecure := exec.Command(binary, "serve", "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--data-dir", open, "--insecure-no-auth")
	insecure.Env = []string{"HOME=" + open}
	if err := insecure.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = insecure.Process.Kill(); _ = insecure.Wait() })
	oc, _ := client.New(fmt.Sprintf("http://127.0.0.1:%d", port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := oc.ListSessions(t.Context(), client.ListOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--insecure-no-auth daemon: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(open, client.TokenFileName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--insecure-no-auth wrote a token file: %v", err)
	}
}

// TestDNSRebinding is the attack through the real binary: a request for the
// daemon that names another host (a page's own name, resolved to 127.0.0.1)
// is refused before it can create a session, even with the right token;
// --allowed-hosts lets a name through.
func TestDNSRebinding(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "--allowed-hosts", "agentbox.test")
	port := strings.TrimPrefix(d.url, "http://127.0.0.1:")
	post := func(host string, hdr ...string) int {
		req, err := http.NewRequestWithContext(t.Context(), "POST", d.url+"/v1/sessions", strings.NewReader(`{"agent":"mock"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+d.token)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for host, want := range map[string]int{
		"attacker.example:" + port: 403,
		"localhost.:" + port:       201,
		"127.0.0.1:" + port:        201,
		"agentbox.test:" + port:    201,
	} {
		if got := post(host); got != want {
			t.Errorf("Host %s: %d, want %d", host, got, want)
		}
	}
	if got := post("127.0.0.1:"+port, "Origin", "http://attacker.example"); got != 403 {
		t.Errorf("a foreign Origin: %d, want 403", got)
	}
	list, err := d.c.ListSessions(t.Context(), client.ListOptions{})
	if err != nil || len(list.Sessions) != 3 {
		t.Errorf("sessions %d (%v), want the 3 allowed", len(list.Sessions), err)
	}
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
