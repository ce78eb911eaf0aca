package owner

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests run a second process (this test binary, re-executed) as the
// other agentbox process on the host: it records artefacts or holds slots
// in the host directory named by childDirEnv, prints what it did, and
// waits to be killed.
const (
	childDirEnv  = "AGENTBOX_OWNER_TEST_DIR"
	childDoEnv   = "AGENTBOX_OWNER_TEST_DO"
	childArgEnv  = "AGENTBOX_OWNER_TEST_ARG"
	childSlotsOf = "slots"
	childRecord  = "record"
	childOwner   = "owner"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		runChild(NewHost(dir), os.Getenv(childDoEnv), os.Getenv(childArgEnv))
		return
	}
	os.Exit(m.Run())
}

// runChild is the second process: "record PATH..." makes each directory
// and records it as KindDir; "slots POOL:N" takes N slots of POOL. It
// prints one line per result, then "ready", and sleeps until killed.
func runChild(h *Host, do, arg string) {
	fail := func(err error) {
		fmt.Println("error", err)
		os.Exit(1)
	}
	switch do {
	case childOwner:
		o, err := h.Self()
		if err != nil {
			fail(err)
		}
		fmt.Println("owner", o.ID())
	case childRecord:
		o, err := h.Self()
		if err != nil {
			fail(err)
		}
		for _, p := range strings.Split(arg, ",") {
			if _, err := h.Record(Record{Kind: KindDir, Path: p}); err != nil {
				fail(err)
			}
			if err := os.MkdirAll(filepath.Join(p, "sub"), 0o700); err != nil {
				fail(err)
			}
		}
		fmt.Println("owner", o.ID())
	case childSlotsOf:
		pool, n, _ := strings.Cut(arg, ":")
		count, _ := strconv.Atoi(n)
		for range count {
			s, err := h.Slot(pool, 100)
			if err != nil {
				fail(err)
			}
			fmt.Println("slot", s.N)
		}
	}
	fmt.Println("ready")
	time.Sleep(time.Hour)
}

// child is a running second process.
type child struct {
	cmd   *exec.Cmd
	lines []string
}

func startChild(t *testing.T, dir, do, arg string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childDirEnv+"="+dir, childDoEnv+"="+do, childArgEnv+"="+arg)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd}
	t.Cleanup(c.kill)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" {
			return c
		}
		if strings.HasPrefix(line, "error ") {
			t.Fatalf("second process: %s", line)
		}
		c.lines = append(c.lines, line)
	}
	t.Fatalf("second process ended before it was ready: %v", sc.Err())
	return nil
}

// kill ends the process the way a crash does: SIGKILL, nothing cleaned up.
func (c *child) kill() {
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

func (c *child) values(key string) []string {
	var out []string
	for _, l := range c.lines {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			out = append(out, v)
		}
	}
	return out
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

func TestReapDeadRemovesOnlyDeadOwners(t *testing.T) {
	hostDir := filepath.Join(t.TempDir(), "run")
	work := t.TempDir()
	deadDirs := []string{filepath.Join(work, "dead-1"), filepath.Join(work, "dead-2")}
	liveDir := filepath.Join(work, "live")

	dead := startChild(t, hostDir, childRecord, strings.Join(deadDirs, ","))
	live := startChild(t, hostDir, childRecord, liveDir)
	dead.kill()

	h := NewHost(hostDir)
	// This process is an owner too, with an artefact of its own.
	self, err := h.Self()
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(work, "mine")
	e, err := self.Record(Record{Kind: KindDir, Path: mine})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Release()
	if err := os.Mkdir(mine, 0o700); err != nil {
		t.Fatal(err)
	}

	rep, err := h.ReapDead(Reaper{Kind: KindDir, Reap: ReapDir})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deadDirs {
		if exists(d) {
			t.Errorf("%s of the killed process is still there", d)
		}
	}
	if !exists(liveDir) || !exists(mine) {
		t.Errorf("an artefact of a live process was removed (live: %v, ours: %v)", exists(liveDir), exists(mine))
	}
	if rep.Owners != 1 || len(rep.Removed) != 2 || len(rep.Kept) != 0 {
		t.Errorf("report %+v, want 1 dead owner and 2 artefacts removed", rep)
	}
	deadID := dead.values("owner")[0]
	for _, p := range []string{deadID + ".lock", deadID} {
		if exists(filepath.Join(hostDir, "owners", p)) {
			t.Errorf("the dead owner's %s is still there", p)
		}
	}
	// Nothing more to do the second time; the live owner is still alive.
	if rep, err := h.ReapDead(Reaper{Kind: KindDir, Reap: ReapDir}); err != nil || rep.Owners != 0 {
		t.Errorf("second ReapDead = %+v, %v", rep, err)
	}
	live.kill()
	if rep, err := h.ReapDead(Reaper{Kind: KindDir, Reap: ReapDir}); err != nil || rep.Owners != 1 || exists(liveDir) {
		t.Errorf("after the second process died: %+v, %v; its dir exists: %v", rep, err, exists(liveDir))
	}
}

func TestReapDeadKeepsWhatItCannotRemove(t *testing.T) {
	hostDir := filepath.Join(t.TempDir(), "run")
	d := filepath.Join(t.TempDir(), "a")
	c := startChild(t, hostDir, childRecord, d)
	c.kill()
	h := NewHost(hostDir)

	// No reaper for the kind: kept, owner kept.
	rep, err := h.ReapDead()
	if err != nil || rep.Owners != 1 || len(rep.Kept) != 1 || !exists(d) {
		t.Fatalf("without a reaper: %+v, %v", rep, err)
	}
	// A failing reaper: kept, with the error.
	boom := errors.New("boom")
	rep, err = h.ReapDead(Reaper{Kind: KindDir, Reap: func(Record) error { return boom }})
	if !errors.Is(err, boom) || len(rep.Kept) != 1 || !exists(d) {
		t.Fatalf("failing reaper: %+v, %v", rep, err)
	}
	// Then a later run removes it.
	rep, err = h.ReapDead(Reaper{Kind: KindDir, Reap: ReapDir})
	if err != nil || len(rep.Removed) != 1 || exists(d) {
		t.Fatalf("later run: %+v, %v", rep, err)
	}
	entries, _ := os.ReadDir(filepath.Join(hostDir, "owners"))
	for _, e := range entries {
		if e.Name() != ".reap" {
			t.Errorf("owner left: %s", e.Name())
		}
	}
}

func TestReapDeadDropsUnfinishedRecords(t *testing.T) {
	hostDir := filepath.Join(t.TempDir(), "run")
	c := startChild(t, hostDir, childRecord, filepath.Join(t.TempDir(), "a"))
	c.kill()
	id := c.values("owner")[0]
	// A record its process did not finish writing: the artefact was
	// never made.
	if err := os.WriteFile(filepath.Join(hostDir, "owners", id, "99.json"), []byte(`{"kind":"di`), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := NewHost(hostDir).ReapDead(Reaper{Kind: KindDir, Reap: ReapDir})
	if err != nil || len(rep.Removed) != 1 || len(rep.Kept) != 0 {
		t.Fatalf("%+v, %v", rep, err)
	}
}

func TestSlotsAreHostWide(t *testing.T) {
	hostDir := filepath.Join(t.TempDir(), "run")
	other := startChild(t, hostDir, childSlotsOf, "uid:3")
	theirs := other.values("slot")
	h := NewHost(hostDir)
	var ours []*Slot
	for range 3 {
		s, err := h.Slot("uid", 100)
		if err != nil {
			t.Fatal(err)
		}
		ours = append(ours, s)
		if slices.Contains(theirs, strconv.Itoa(s.N)) {
			t.Errorf("slot %d is held by the other process too (it holds %v)", s.N, theirs)
		}
	}
	// Within the process too, a slot goes to one holder.
	if ours[0].N == ours[1].N || ours[1].N == ours[2].N {
		t.Errorf("slots %d %d %d", ours[0].N, ours[1].N, ours[2].N)
	}
	// The other process dies without releasing: its slots are free.
	other.kill()
	for _, want := range theirs {
		s, err := h.Slot("uid", 100)
		if err != nil {
			t.Fatal(err)
		}
		if strconv.Itoa(s.N) != want {
			t.Errorf("after the holder died, the lowest free slot is %d, want its %s", s.N, want)
		}
	}
	// Release frees one for the next taker.
	ours[1].Release()
	ours[1].Release()
	if s2, err := h.Slot("uid", 100); err != nil || s2.N != ours[1].N {
		t.Errorf("after Release: slot %+v, %v; want %d", s2, err, ours[1].N)
	}
	// All held: a clear error.
	small := NewHost(hostDir)
	if _, err := small.Slot("tiny", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := small.Slot("tiny", 1); !errors.Is(err, ErrNoSlot) {
		t.Errorf("a full pool: %v", err)
	}
}

func TestHostDirMustBeOurs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := NewHost(dir).Self(); err == nil {
		t.Fatal("a world-writable host directory was accepted")
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(t.TempDir(), link); err != nil {
		t.Fatal(err)
	}
	if _, err := NewHost(link).Slot("p", 1); err == nil {
		t.Fatal("a symlinked host directory was accepted")
	}
	// Another user's directory, even one only it can write: that user
	// could hold every slot or plant records.
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	for _, sub := range []string{"", "owners", "slots"} {
		theirs := filepath.Join(t.TempDir(), "run")
		if err := os.MkdirAll(filepath.Join(theirs, sub), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(filepath.Join(theirs, sub), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		h := NewHost(theirs)
		if _, err := h.Self(); err == nil && sub != "slots" {
			t.Errorf("a host directory with %q owned by uid 65534 was accepted", "run/"+sub)
		}
		if _, err := h.Slot("p", 1); err == nil && sub != "owners" {
			t.Errorf("slots in a host directory with %q owned by uid 65534 were given out", "run/"+sub)
		}
	}
}

// TestRemoveTreeNeverFollowsAMount: a mount below the tree (a bound host
// directory) is detached first, never deleted through.
func TestRemoveTreeNeverFollowsAMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root")
	}
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	mnt := filepath.Join(tree, "a", "mnt")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(host, mnt, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if err := RemoveTree(tree); err != nil {
		t.Fatal(err)
	}
	if exists(tree) {
		t.Error("the tree is still there")
	}
	if !exists(filepath.Join(host, "precious")) {
		t.Error("RemoveTree deleted through a mount into a host directory")
	}
	if err := RemoveTree("/"); err == nil {
		t.Error("RemoveTree(/) was accepted")
	}
	if err := RemoveTree(filepath.Join(tree, "gone")); err != nil {
		t.Errorf("a missing tree: %v", err)
	}
}

// TestDeadOwnersWithNothingGo: every process that makes a sandbox is an
// owner; those that died with nothing left are forgotten by the next
// process to become one, without waiting for a daemon to start.
func TestDeadOwnersWithNothingGo(t *testing.T) {
	hostDir := filepath.Join(t.TempDir(), "run")
	empty := startChild(t, hostDir, childOwner, "")
	withRecord := startChild(t, hostDir, childRecord, filepath.Join(t.TempDir(), "kept"))
	empty.kill()
	withRecord.kill()
	if _, err := NewHost(hostDir).Self(); err != nil {
		t.Fatal(err)
	}
	lock := func(c *child) string { return filepath.Join(hostDir, "owners", c.values("owner")[0]+".lock") }
	deadline := time.Now().Add(10 * time.Second)
	for exists(lock(empty)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if exists(lock(empty)) {
		t.Error("a dead owner with no artefacts is still there")
	}
	if !exists(lock(withRecord)) {
		t.Error("a dead owner with an artefact was forgotten by a process with no reaper for it")
	}
}

// TestGuard checks that every Record first waits for the guards, is
// refused (and writes nothing) while one fails, and that a removed guard
// no longer applies.
func TestGuard(t *testing.T) {
	// Not t.TempDir: this process's owner (its lock, tidied in the
	// background) is in it for the process's life.
	dir, err := os.MkdirTemp("", "owner-guard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	h := NewHost(filepath.Join(dir, "host"))
	refused := errors.New("no deathwatch")
	remove := h.Guard(func() error { return refused })
	if _, err := h.Record(Record{Kind: KindDir, Path: "/nonexistent"}); !errors.Is(err, refused) {
		t.Fatalf("Record with a failing guard = %v, want %v", err, refused)
	}
	if h.self != nil {
		t.Error("a refused Record made this process's owner")
	}
	remove()

	release := make(chan struct{})
	h.Guard(func() error { <-release; return nil })
	recorded := make(chan error, 1)
	go func() {
		e, err := h.Record(Record{Kind: KindDir, Path: "/nonexistent"})
		e.Release()
		recorded <- err
	}()
	select {
	case err := <-recorded:
		t.Fatalf("Record returned (%v) before its guard was through", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-recorded; err != nil {
		t.Fatal(err)
	}
}
