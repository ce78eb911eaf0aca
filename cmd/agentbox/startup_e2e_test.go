package main

import (
	"testing"

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
