package sqlite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldSync returns a syncHook whose first call after arm is called blocks
// until release is called, reporting on started when it begins; later calls
// return what next returns.
func heldSync(next func() error) (hook func() error, arm func(), started <-chan struct{}, release func()) {
	var armed, taken atomic.Bool
	start := make(chan struct{})
	hold := make(chan struct{})
	var once sync.Once
	hook = func() error {
		if armed.Load() && taken.CompareAndSwap(false, true) {
			close(start)
			<-hold
			return nil
		}
		if armed.Load() {
			return next()
		}
		return nil
	}
	return hook, func() { armed.Store(true) }, start, func() { once.Do(func() { close(hold) }) }
}

// TestSyncsOverlap holds one sync of the log and checks that a batch
// committed meanwhile is synced without waiting for it: its own sync, which
// began after both batches were committed, answers both, in commit order.
func TestSyncsOverlap(t *testing.T) {
	hook, arm, started, release := heldSync(func() error { return nil })
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{syncHook: hook})
	defer release() // before the cleanup's Close, which waits for the held sync
	ctx := t.Context()
	createSession(t, s, "ses_1")
	ch, err := s.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	arm()
	first := make(chan error, 1)
	go func() { _, err := s.Append(ctx, "ses_1", delta(0)); first <- err }()
	<-started // the first append's sync is in flight, and held
	second := make(chan error, 1)
	go func() { _, err := s.Append(ctx, "ses_1", delta(1)); second <- err }()
	for i, c := range []chan error{first, second} {
		select {
		case err := <-c:
			if err != nil {
				t.Fatalf("append %d: %v", i+1, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("append %d not answered while an earlier sync is held: syncs do not overlap", i+1)
		}
	}
	if got := recvN(t, ch, 2); got[0].Seq != 1 || got[1].Seq != 2 {
		t.Errorf("delivered seqs %d, %d; want 1, 2", got[0].Seq, got[1].Seq)
	}
	if evs, err := s.Events(ctx, "ses_1", 0, 0); err != nil || len(evs) != 2 {
		t.Errorf("Events = %d, %v; want 2", len(evs), err)
	}
}

// TestSyncFailureWhileEarlierHeld fails a sync that overlaps a held one: the
// batches the failed sync covered (the held one's too) fail and stay
// invisible, the held sync's later success answers nothing, and the store
// refuses writes from then on.
func TestSyncFailureWhileEarlierHeld(t *testing.T) {
	hook, arm, started, release := heldSync(func() error { return errors.New("disk on fire") })
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{syncHook: hook})
	defer release()
	ctx := t.Context()
	createSession(t, s, "ses_1")
	ch, err := s.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	arm()
	first := make(chan error, 1)
	go func() { _, err := s.Append(ctx, "ses_1", delta(0)); first <- err }()
	<-started
	second := make(chan error, 1)
	go func() { _, err := s.Append(ctx, "ses_1", delta(1)); second <- err }()
	select {
	case err := <-second:
		if err == nil || !strings.Contains(err.Error(), "disk on fire") {
			t.Errorf("append under a failing sync: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("append not answered while an earlier sync is held: syncs do not overlap")
	}
	release()
	if err := <-first; err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("append whose held sync succeeded after a later one failed: %v; want the failure", err)
	}
	if _, err := s.Append(ctx, "ses_1", delta(2)); err == nil {
		t.Error("append after a failed sync succeeded")
	}
	if evs, err := s.Events(ctx, "ses_1", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events = %d, %v; want none", len(evs), err)
	}
	select {
	case e := <-ch:
		t.Errorf("seq %d delivered", e.Seq)
	case <-time.After(50 * time.Millisecond):
	}
}

// crashChildEnv names the database the test binary, run as a child by
// TestAcknowledgedSurviveKill, appends to until it is killed.
const crashChildEnv = "AGENTBOX_TEST_STORE_CRASH_DB"

// crashSessions is how many sessions the child appends to.
const crashSessions = 4

// crashChild appends to the database named by crashChildEnv from many
// goroutines and prints "session seq" for every acknowledged event. It never
// returns: it runs until killed.
func crashChild(path string) {
	ctx := context.Background()
	s, err := Open(ctx, path, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	fmt.Fprintln(out, "ready")
	out.Flush()
	for i := range 32 {
		go func() {
			id := benchSession(i % crashSessions)
			for {
				evs, err := s.Append(ctx, id, delta(i), delta(i+1))
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				mu.Lock()
				for _, e := range evs {
					fmt.Fprintln(out, id, e.Seq)
				}
				out.Flush() // the parent sees it only once acknowledged
				mu.Unlock()
			}
		}()
	}
	select {}
}

// TestAcknowledgedSurviveKill kills (SIGKILL) a process in the middle of
// concurrent appends and checks that every event it had acknowledged is in
// the database when it is opened again, and that each session's seqs have no
// gap. (A kill keeps what the kernel was given; losing power is another
// matter, which the syncs cover: TestUnsyncedInvisible, TestSyncsOverlap.)
func TestAcknowledgedSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s := open(t, path, Options{})
	for i := range crashSessions {
		createSession(t, s, benchSession(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acked := make(map[string]int64)
		sc := bufio.NewScanner(stdout)
		n := 0
		for sc.Scan() && n < 3000*(round+1) {
			id, seq, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue // "ready"
			}
			v, err := strconv.ParseInt(seq, 10, 64)
			if err != nil {
				t.Fatalf("child printed %q", sc.Text())
			}
			acked[id] = max(acked[id], v)
			n++
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait() // killed: its exit status says so
		if n < 3000*(round+1) {
			t.Fatalf("child stopped after %d acknowledged events", n)
		}

		s := open(t, path, Options{})
		for i := range crashSessions {
			id := benchSession(i)
			evs, err := s.Events(t.Context(), id, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			for j, e := range evs {
				if e.Seq != int64(j+1) {
					t.Fatalf("round %d, session %s: event %d has seq %d", round, id, j, e.Seq)
				}
			}
			if got := int64(len(evs)); got < acked[id] {
				t.Errorf("round %d, session %s: %d events after the kill, %d were acknowledged", round, id, got, acked[id])
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
