package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestCrashRightAfterFirstHealthy starts a daemon on a new data directory
// (whose database is made without syncing, and synced before its first
// write: internal/store/sqlite/fresh.go), writes as soon as it answers
// healthy, kills it with SIGKILL once the write is acknowledged, and
// checks that the restarted daemon has what was acknowledged, and again
// after a second such crash on the existing directory.
func TestCrashRightAfterFirstHealthy(t *testing.T) {
	dataDir := t.TempDir()
	var ids []string
	for range 2 {
		d := startDaemon(t, dataDir) // returns at the first healthy answer
		s, err := d.c.CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID)
		d.kill9(t)
	}
	d := startDaemon(t, dataDir)
	defer d.kill9(t)
	for _, id := range ids {
		if _, err := d.c.GetSession(t.Context(), id); err != nil {
			t.Errorf("session %s, acknowledged before the crash: %v", id, err)
		}
	}
}

// TestStartUpPagesReleased checks that a started daemon gives back the
// pages of its binary its start mapped (internal/residency, called from
// internal/daemon/memory.go): without it, nearly the whole binary stays
// resident (RssFile ≈ 16 MiB); with it, only what the idle daemon touches
// again. The daemon still serves afterwards.
func TestStartUpPagesReleased(t *testing.T) {
	d := startDaemon(t, t.TempDir())
	defer d.kill9(t)
	const limit = 8 << 20
	var file int64
	deadline := time.Now().Add(60 * time.Second) // the host probe runs first, and may be slow under load
	for {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(st)) {
			if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				file = kb << 10
			}
		}
		if file < limit {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RssFile still %d KiB 60 s after the start: the binary's start-up pages were not released", file>>10)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("RssFile %d KiB", file>>10)
	if _, err := d.c.Health(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := d.c.CreateSession(t.Context(), client.CreateSession{Agent: "mock"}); err != nil {
		t.Fatal(err)
	}
}
