package daemon_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/internal/daemon"
)

// openFDs is what this process's descriptors point at, by number.
func openFDs(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	fds := map[string]string{}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil {
			fds[e.Name()] = target
		}
	}
	return fds
}

// TestNewFailureLeavesNothing fails New at each of its steps in turn and
// checks that what the steps before it opened is closed again: no
// goroutine left running, no descriptor left open.
func TestNewFailureLeavesNothing(t *testing.T) {
	newDaemon := func(t *testing.T) (*daemon.Daemon, error) {
		return daemon.New(t.Context(), daemon.Config{
			Listen: "127.0.0.1:0", DataDir: t.TempDir(), InsecureNoAuth: true,
			Log: slog.New(slog.DiscardHandler),
		})
	}
	// The steps, in order, as a New that succeeds reaches them.
	var steps []string
	restore := daemon.FailAt(func(step string) error { steps = append(steps, step); return nil })
	d, err := newDaemon(t)
	restore()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(steps) < 5 {
		t.Fatalf("New went through steps %q, want every step named", steps)
	}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			before := openFDs(t)
			injected := fmt.Errorf("injected failure at %s", step)
			defer daemon.FailAt(func(s string) error {
				if s == step {
					return injected
				}
				return nil
			})()
			d, err := newDaemon(t)
			if !errors.Is(err, injected) {
				if d != nil {
					_ = d.Shutdown(t.Context())
				}
				t.Fatalf("New = %v, want the injected failure", err)
			}
			// Goroutines first: goleak waits for those ending (a
			// child's Wait), and with them their descriptors.
			goleak.VerifyNone(t, ignore)
			after := openFDs(t)
			var leaked []string
			for fd, target := range after {
				if before[fd] != target {
					leaked = append(leaked, fd+" -> "+target)
				}
			}
			slices.Sort(leaked)
			if len(leaked) > 0 {
				t.Errorf("New failing at %s left descriptors open: %q", step, leaked)
			}
		})
	}
}
