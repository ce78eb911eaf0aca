package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
)

// TestStartDoesNotWaitForReaping: while another agentbox process is
// removing what dead processes left (it holds the host's reaping turn), a
// daemon starts and answers at once; it reaps in the background and
// waits for that only when it shuts down. Nothing it does first needs
// the reaping done: slots of dead processes are free already and every
// artefact's name is its own.
func TestStartDoesNotWaitForReaping(t *testing.T) {
	owners := filepath.Join(owner.DefaultDir(), "owners")
	if err := os.MkdirAll(owners, 0o700); err != nil {
		t.Fatal(err)
	}
	turn, err := os.OpenFile(filepath.Join(owners, ".reap"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer turn.Close()
	if err := unix.Flock(int(turn.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			_ = unix.Flock(int(turn.Fd()), unix.LOCK_UN)
		}
	}
	t.Cleanup(release)

	reg := agent.NewRegistry()
	reg.Register("mock", mock.New())
	type result struct {
		d   *Daemon
		err error
	}
	started := make(chan result, 1)
	go func() {
		d, err := New(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Agents: reg,
			Log: slog.New(slog.DiscardHandler)})
		started <- result{d, err}
	}()
	var d *Daemon
	select {
	case r := <-started:
		if r.err != nil {
			t.Fatal(r.err)
		}
		d = r.d
	case <-time.After(30 * time.Second):
		release() // let it finish
		t.Fatal("the daemon did not start while another process held the reaping turn")
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(ctx) }()
	c, err := client.New(d.URL(), client.WithToken(d.Token()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Agents(t.Context()); err != nil {
		t.Fatalf("a request while another process reaps: %v", err)
	}
	select {
	case <-d.reaped:
		t.Error("the daemon's reaping finished while another process held the turn")
	default:
	}
	release()
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.reaped:
	default:
		t.Error("Shutdown returned before the daemon's reaping ended")
	}
}
