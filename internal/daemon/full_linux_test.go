package daemon

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// TestStartOnFullDisk: a daemon whose disk is full when it starts (with a
// session the last run left live, whose end it must record) still starts
// and serves reads; writes are refused as storage-full (507), not as
// internal errors; once space is freed the daemon records the end and takes
// writes again, without a restart.
func TestStartOnFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dataDir := t.TempDir()
	if err := unix.Mount("tmpfs", dataDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=8m,mode=0700"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dataDir, unix.MNT_DETACH) })

	// The last run: it made its token, audit log and database, and left a
	// session running (it died in a turn).
	_, _, stop := runDaemon(t, dataDir, "")
	stop()
	st, err := sqlite.Open(t.Context(), filepath.Join(dataDir, "agentbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if err = st.CreateSession(t.Context(), store.Session{ID: "ses_left", Agent: "mock", Status: store.StatusRunning, CreatedAt: now, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(t.Context(), "ses_left", event.New(event.SourceDaemon, &event.SessionStarted{Agent: "mock"})); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	filler := filepath.Join(dataDir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	c, _, _ := runDaemon(t, dataDir, "")
	ctx := t.Context()
	if _, err := c.GetSession(ctx, "ses_left"); err != nil {
		t.Fatalf("read on a full disk: %v", err)
	}
	if _, err := c.Events(ctx, "ses_left", 0, 0); err != nil {
		t.Fatalf("read events on a full disk: %v", err)
	}
	_, err = c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	var p *client.APIError
	if !errors.As(err, &p) || p.Status != http.StatusInsufficientStorage || !client.IsStorageFull(err) {
		t.Fatalf("create on a full disk: %v, want a 507 %s problem", err, client.ProblemStorageFull)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := c.GetSession(ctx, "ses_left")
		if err == nil && s.Status == string(store.StatusInterrupted) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the end of the session left live was not recorded once space came back: %+v %v", s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"}); err != nil {
		t.Fatalf("create after space came back: %v", err)
	}
}
