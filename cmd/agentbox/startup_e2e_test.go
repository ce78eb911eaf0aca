package main

import (
	"debug/elf"
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

// TestStartUpPagesMappedAhead checks that `serve` maps its executable's
// read-only segments from its early init (internal/prefault): the daemon
// logs how much it mapped, which is what the binary's program headers say
// those segments hold (rounded to pages).
func TestStartUpPagesMappedAhead(t *testing.T) {
	d := startDaemon(t, t.TempDir(), "--log-level", "debug")
	d.kill9(t) // the line comes before serving; the log is read once the process is gone
	var line string
	for l := range strings.Lines(d.log.String()) {
		if strings.Contains(l, `msg="start-up pages mapped ahead"`) {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no \"start-up pages mapped ahead\" line in the daemon's log:\n%s", d.log.String())
	}
	if strings.Contains(line, "err=\"invalid argument\"") {
		t.Skipf("this kernel has no MADV_POPULATE_READ (Linux 5.14): %s", line)
	}
	var kib uint64
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "binary_kib="); ok {
			kib, _ = strconv.ParseUint(v, 10, 64)
		}
	}
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var want uint64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_W == 0 && p.Filesz > 0 {
			lo := p.Vaddr &^ 4095
			want += (p.Vaddr+p.Filesz+4095)&^4095 - lo
		}
	}
	if kib != want>>10 || !strings.Contains(line, "err=<nil>") {
		t.Fatalf("mapped %d KiB, want the read-only segments' %d KiB: %s", kib, want>>10, line)
	}
}
