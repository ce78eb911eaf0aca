package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/storetest"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		crashChild(path) // never returns
	}
	goleak.VerifyTestMain(m)
}

// factory opens stores with opts in the suite's directories.
func factory(opts Options) storetest.Factory {
	return storetest.FactoryFunc(func(t *testing.T, dir string) store.Store {
		s, err := Open(t.Context(), filepath.Join(dir, "agentbox.db"), opts)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

func TestConformance(t *testing.T) {
	storetest.Run(t, factory(Options{}))
}

// TestConformanceTinyRing runs the suite with a ring of two events and
// synchronous=NORMAL, so that subscribers constantly fall behind the ring
// and read from the database, and with the tail of the event log indexed
// every few rows, so that those reads find rows in event_runs, in the tail
// and in both (the default options leave the suite's few rows in the tail).
func TestConformanceTinyRing(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite already ran with the default options")
	}
	storetest.Run(t, factory(Options{RingSize: 2, Sync: SyncNormal, indexRows: 3}))
}

func open(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func createSession(t *testing.T, s *Store, id string) {
	t.Helper()
	if err := s.CreateSession(t.Context(), store.Session{ID: id, Agent: "mock", Status: store.StatusIdle}); err != nil {
		t.Fatal(err)
	}
}

func delta(n int) event.Event {
	return event.New(event.SourceAgent, &event.ItemDelta{ItemID: "item_1", Field: event.DeltaText, Delta: string(rune('a' + n%26))})
}

func TestFileAndPragmas(t *testing.T) {
	for _, tc := range []struct {
		sync   Sync
		syncer bool
	}{{SyncFull, true}, {SyncNormal, false}} {
		t.Run(map[Sync]string{SyncFull: "full", SyncNormal: "normal"}[tc.sync], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "a", "b", "agentbox.db")
			s := open(t, path, Options{Sync: tc.sync})
			if s.Path() != path {
				t.Errorf("Path() = %q, want %q", s.Path(), path)
			}
			for p, want := range map[string]os.FileMode{filepath.Dir(path): 0o700 | os.ModeDir, path: 0o600} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode() != want {
					t.Errorf("%s: mode %v, want %v", p, fi.Mode(), want)
				}
			}
			createSession(t, s, "ses_1") // makes the WAL exist
			if _, err := os.Stat(path + "-wal"); err != nil {
				t.Errorf("no write-ahead log: %v", err)
			}

			var mode string
			var sync, fk int
			db, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
				t.Errorf("journal_mode = %q, %v; want wal", mode, err)
			}
			// synchronous and foreign_keys are per connection: ask the
			// writer's. Commits do not sync; the syncer does, with
			// SyncFull.
			w := s.w.conn
			if err := w.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&sync); err != nil || sync != 1 {
				t.Errorf("writer synchronous = %d, %v; want 1 (NORMAL)", sync, err)
			}
			// The checkpointer's too: its checkpoints sync the log
			// before copying and the database file before the log may
			// start over (checkpoint.go).
			if err := s.cdb.QueryRowContext(t.Context(), "PRAGMA synchronous").Scan(&sync); err != nil || sync != 1 {
				t.Errorf("checkpointer synchronous = %d, %v; want 1 (NORMAL)", sync, err)
			}
			if (s.syncQ != nil) != tc.syncer {
				t.Errorf("syncer running: %v, want %v", s.syncQ != nil, tc.syncer)
			}
			if err := w.QueryRowContext(t.Context(), "PRAGMA foreign_keys").Scan(&fk); err != nil || fk != 1 {
				t.Errorf("writer foreign_keys = %d, %v; want 1", fk, err)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(t.Context(), "", Options{}); err == nil {
		t.Error("Open with an empty path succeeded")
	}
	if _, err := Open(t.Context(), filepath.Join(dir, "a?b.db"), Options{}); err == nil {
		t.Error("Open with '?' in the path succeeded")
	}
	// A parent that is a file.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), filepath.Join(file, "agentbox.db"), Options{}); err == nil {
		t.Error("Open under a file succeeded")
	}
}

func TestMigrations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(t.Context(), path, Options{}) // nothing to apply again
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	s.Close()

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, version int
	if err := db.QueryRow("SELECT COUNT(*), MAX(version) FROM schema_migrations").Scan(&n, &version); err != nil {
		t.Fatal(err)
	}
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	if n != len(ms) || version != len(ms) {
		t.Errorf("schema_migrations has %d rows up to version %d, want %d", n, version, len(ms))
	}

	// A database from a newer program is refused.
	if _, err := db.Exec("INSERT INTO schema_migrations VALUES (?, 'future', 0)", len(ms)+1); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(t.Context(), path, Options{}); err == nil {
		s.Close()
		t.Error("Open of a database with a newer schema succeeded")
	}
}

func TestDefaultPath(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	tests := []struct {
		dataDir, xdg string
		want         string
	}{
		{"/data", "/xdg", "/data/agentbox.db"},
		{"", "/xdg", "/xdg/agentbox/agentbox.db"},
		{"", "relative", filepath.Join(home, ".local/share/agentbox/agentbox.db")},
		{"", "", filepath.Join(home, ".local/share/agentbox/agentbox.db")},
	}
	for _, tc := range tests {
		t.Setenv("AGENTBOX_DATA_DIR", tc.dataDir)
		t.Setenv("XDG_DATA_HOME", tc.xdg)
		got, err := DefaultPath()
		if err != nil || got != tc.want {
			t.Errorf("AGENTBOX_DATA_DIR=%q XDG_DATA_HOME=%q: DefaultPath() = %q, %v; want %q", tc.dataDir, tc.xdg, got, err, tc.want)
		}
	}
}

// TestReopenContinuesSeqs reopens a store many sessions wrote to: every
// session continues from its own last seq although the new writer starts with
// nothing cached.
func TestReopenContinuesSeqs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s := open(t, path, Options{})
	ids := []string{"ses_a", "ses_b", "ses_c"}
	for i, id := range ids {
		createSession(t, s, id)
		for range i + 1 {
			if _, err := s.Append(t.Context(), id, delta(0), delta(1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, Options{})
	for i, id := range ids {
		got, err := s.Append(t.Context(), id, delta(2))
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(2*(i+1) + 1); got[0].Seq != want {
			t.Errorf("%s: seq %d after reopen, want %d", id, got[0].Seq, want)
		}
	}
}

// gate holds the writer on a batch when armed, so that a test can queue
// operations that the writer will then take as one batch.
type gate struct {
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed when the armed batch arrives
	release chan struct{}
	sizes   []int // batch sizes since armed
}

func (g *gate) hook(batch []*op) {
	g.mu.Lock()
	g.sizes = append(g.sizes, len(batch))
	armed, held, release := g.armed, g.held, g.release
	g.armed = false
	g.mu.Unlock()
	if armed {
		close(held)
		<-release
	}
}

// hold arms the gate, makes the writer busy with one operation and returns
// once the writer is held.
func (g *gate) hold(t *testing.T, s *Store) (release func()) {
	t.Helper()
	g.mu.Lock()
	g.armed, g.held, g.release, g.sizes = true, make(chan struct{}), make(chan struct{}), nil
	held, rel := g.held, g.release
	g.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		done <- s.CreateSession(context.WithoutCancel(t.Context()), store.Session{ID: "ses_blocker", Agent: "mock"})
	}()
	<-held
	return func() {
		close(rel)
		if err := <-done; err != nil {
			t.Errorf("blocking operation: %v", err)
		}
	}
}

// queued waits until n operations are queued for the writer.
func queued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.ops) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d operations queued", len(s.ops), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFailingOpsInBatch commits one batch mixing operations that succeed with
// operations that fail, and checks that each failure stays alone: the other
// operations commit, seqs stay gapless and the writer carries on.
func TestFailingOpsInBatch(t *testing.T) {
	g := &gate{}
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{batchHook: g.hook})
	ctx := t.Context()
	createSession(t, s, "ses_a")
	createSession(t, s, "ses_b")
	if _, err := s.CreateRequest(ctx, store.Request{SessionID: "ses_a", ID: "perm_1", Kind: store.KindPermission},
		event.New(event.SourceDaemon, &event.PermissionRequested{ID: "perm_1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveRequest(ctx, "ses_a", "perm_1",
		event.New(event.SourceDaemon, &event.PermissionResolved{ID: "perm_1", Decision: event.DecisionAllow})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "ses_b", delta(0)); err != nil {
		t.Fatal(err)
	}
	// Make the writer's insert of seq 3 into ses_b fail.
	failInsert(t, s, "ses_b", 3)

	release := g.hold(t, s)
	type result struct {
		evs []event.Event
		err error
	}
	results := make([]result, 6)
	one := func(e event.Event, err error) ([]event.Event, error) { return []event.Event{e}, err }
	calls := []func(){
		func() { results[0].evs, results[0].err = s.Append(ctx, "ses_a", delta(1), delta(2)) },
		// Already resolved: fails before writing anything.
		func() {
			results[1].evs, results[1].err = one(s.ResolveRequest(ctx, "ses_a", "perm_1",
				event.New(event.SourceDaemon, &event.PermissionResolved{ID: "perm_1", Decision: event.DecisionDeny})))
		},
		// Unknown session.
		func() { results[2].evs, results[2].err = s.Append(ctx, "ses_missing", delta(3)) },
		// Seq 2 goes in, seq 3 fails: the savepoint must undo seq 2.
		func() { results[3].evs, results[3].err = s.Append(ctx, "ses_b", delta(4), delta(5)) },
		func() { results[4].evs, results[4].err = s.Append(ctx, "ses_a", delta(6)) },
		// Duplicate request.
		func() {
			results[5].evs, results[5].err = one(s.CreateRequest(ctx, store.Request{SessionID: "ses_a", ID: "perm_1", Kind: store.KindPermission},
				event.New(event.SourceDaemon, &event.PermissionRequested{ID: "perm_1"})))
		},
	}
	var wg sync.WaitGroup
	for _, call := range calls {
		wg.Go(call)
	}
	queued(t, s, len(calls))
	release()
	wg.Wait()
	g.mu.Lock()
	if len(g.sizes) != 2 || g.sizes[1] != len(calls) {
		t.Errorf("batch sizes %v, want [1 %d]", g.sizes, len(calls))
	}
	g.mu.Unlock()

	for i, want := range []error{nil, store.ErrAlreadyResolved, store.ErrNotFound, errAny, nil, store.ErrExists} {
		switch err := results[i].err; {
		case want == nil && err != nil:
			t.Errorf("call %d failed: %v", i, err)
		case errors.Is(want, errAny):
			if err == nil {
				t.Errorf("call %d succeeded, want an error", i)
			}
		case want != nil && !errors.Is(err, want):
			t.Errorf("call %d: error %v, want %v", i, err, want)
		}
	}
	// ses_a had seqs 1 and 2; the two appends of the batch got 3..5.
	got := append(seqsOf(results[0].evs), seqsOf(results[4].evs)...)
	slices.Sort(got)
	if !cmp.Equal(got, []int64{3, 4, 5}) || results[0].evs[1].Seq != results[0].evs[0].Seq+1 {
		t.Errorf("appends in the batch got seqs %v and %v, want 3..5", seqsOf(results[0].evs), seqsOf(results[4].evs))
	}
	stored, err := s.Events(ctx, "ses_a", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(stored); !cmp.Equal(got, []int64{1, 2, 3, 4, 5}) {
		t.Errorf("ses_a stored seqs %v", got)
	}
	// ses_b: seq 1; the failed append's seq 2 was rolled back.
	stored, err = s.Events(ctx, "ses_b", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqsOf(stored); !cmp.Equal(got, []int64{1}) {
		t.Errorf("ses_b stored seqs %v, want [1]", got)
	}
	// The writer carries on.
	if got, err := s.Append(ctx, "ses_a", delta(7)); err != nil || got[0].Seq != 6 {
		t.Errorf("append after the batch: %v, %v", got, err)
	}
}

// errAny marks an expected error of any kind.
var errAny = errors.New("any error")

func seqsOf(evs []event.Event) []int64 {
	var out []int64
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

// failInsert makes every insert of the event row (sessionID, seq) fail, with
// a trigger added by a separate connection behind the writer's back.
func failInsert(t *testing.T, s *Store, sessionID string, seq int64) {
	t.Helper()
	db, err := sql.Open("sqlite", dsn(s.path, "busy_timeout(5000)"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(fmt.Sprintf(`CREATE TRIGGER fail_insert BEFORE INSERT ON events
		WHEN NEW.session_id = '%s' AND NEW.seq = %d
		BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`, sessionID, seq)); err != nil {
		t.Fatal(err)
	}
}

// TestInvalidEvents checks what Append refuses before anything is written.
func TestInvalidEvents(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{})
	createSession(t, s, "ses_1")
	tests := []struct {
		name string
		ev   event.Event
	}{
		{"no type", event.Event{Data: json.RawMessage(`{}`)}},
		{"data not JSON", event.Event{Type: event.TypeNative, Data: json.RawMessage(`{`)}},
		{"raw not JSON", event.Event{Type: event.TypeNative, Raw: json.RawMessage(`nope`)}},
		{"time out of range", event.Event{Type: event.TypeNative, Time: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}},
	}
	for _, tc := range tests {
		if _, err := s.Append(t.Context(), "ses_1", delta(0), tc.ev); err == nil {
			t.Errorf("%s: Append succeeded", tc.name)
		}
	}
	if evs, err := s.Events(t.Context(), "ses_1", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events = %d, %v; want nothing written", len(evs), err)
	}
}

// TestAppendCopiesData checks that the stored event does not share memory
// with the caller's buffers.
func TestAppendCopiesData(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{})
	createSession(t, s, "ses_1")
	ch, err := s.Subscribe(t.Context(), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := []byte(`{"a":1}`)
	if _, err := s.Append(t.Context(), "ses_1", event.Event{Type: event.TypeNative, Data: buf}); err != nil {
		t.Fatal(err)
	}
	copy(buf, `{"b":2}`)
	select {
	case e := <-ch:
		if string(e.Data) != `{"a":1}` {
			t.Errorf("delivered data %s, want the data as appended", e.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
}

// TestCancelledBeforeWrite checks that an operation whose context ends while
// it waits for the writer is not written.
func TestCancelledBeforeWrite(t *testing.T) {
	g := &gate{}
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{batchHook: g.hook})
	createSession(t, s, "ses_1")
	release := g.hold(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := s.Append(ctx, "ses_1", delta(0)); done <- err }()
	queued(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Append: %v, want context.Canceled", err)
	}
	release()
	if evs, err := s.Events(t.Context(), "ses_1", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("Events = %d, %v; want the cancelled append not written", len(evs), err)
	}
}

// TestUnsyncedInvisible holds the syncer back and checks that what the
// writer committed stays invisible until the log is synced: to Events, to
// requests and to subscribers, and that Append waits for the sync.
func TestUnsyncedInvisible(t *testing.T) {
	hold := make(chan struct{})
	var holding atomic.Bool
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{syncHook: func() error {
		if holding.Load() {
			<-hold
		}
		return nil
	}})
	ctx := t.Context()
	createSession(t, s, "ses_1")
	if _, err := s.CreateRequest(ctx, store.Request{SessionID: "ses_1", ID: "perm_1", Kind: store.KindPermission},
		event.New(event.SourceDaemon, &event.PermissionRequested{ID: "perm_1"})); err != nil {
		t.Fatal(err)
	}
	ch, err := s.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-ch; got.Seq != 1 {
		t.Fatalf("got seq %d", got.Seq)
	}

	holding.Store(true)
	appended := make(chan error, 2)
	go func() { _, err := s.Append(ctx, "ses_1", delta(0)); appended <- err }()
	go func() {
		_, err := s.ResolveRequest(ctx, "ses_1", "perm_1",
			event.New(event.SourceDaemon, &event.PermissionResolved{ID: "perm_1", Decision: event.DecisionAllow}))
		appended <- err
	}()
	// Wait until both are committed: the writer's cache knows seq 3.
	deadline := time.Now().Add(10 * time.Second)
	for committed(t, s, "ses_1") < 3 {
		if time.Now().After(deadline) {
			t.Fatal("writes not committed")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-appended:
		t.Fatalf("a write returned before the log was synced: %v", err)
	case e := <-ch:
		t.Fatalf("seq %d delivered before the log was synced", e.Seq)
	case <-time.After(50 * time.Millisecond):
	}
	if evs, err := s.Events(ctx, "ses_1", 0, 0); err != nil || len(evs) != 1 {
		t.Errorf("Events before sync: %d events, %v; want only seq 1", len(evs), err)
	}
	if r, err := s.GetRequest(ctx, "ses_1", "perm_1"); err != nil || r.State != store.StatePending || r.Resolution != nil || r.ResolvedAt != nil {
		t.Errorf("GetRequest before sync = %+v, %v; want it still pending", r, err)
	}
	if list, err := s.ListRequests(ctx, "ses_1", store.StatePending); err != nil || len(list) != 1 {
		t.Errorf("ListRequests(pending) before sync = %d, %v; want 1", len(list), err)
	}
	if list, err := s.ListRequests(ctx, "ses_1", store.StateResolved); err != nil || len(list) != 0 {
		t.Errorf("ListRequests(resolved) before sync = %d, %v; want 0", len(list), err)
	}

	close(hold)
	for range 2 {
		if err := <-appended; err != nil {
			t.Fatal(err)
		}
	}
	if got := recvN(t, ch, 2); got[0].Seq != 2 || got[1].Seq != 3 {
		t.Errorf("after sync got seqs %d, %d", got[0].Seq, got[1].Seq)
	}
	if evs, err := s.Events(ctx, "ses_1", 0, 0); err != nil || len(evs) != 3 {
		t.Errorf("Events after sync: %d events, %v; want 3", len(evs), err)
	}
	if r, err := s.GetRequest(ctx, "ses_1", "perm_1"); err != nil || r.State != store.StateResolved {
		t.Errorf("GetRequest after sync = %+v, %v; want it resolved", r, err)
	}
}

// committed returns the last seq of a session as committed by the writer,
// synced or not, reading past the batch filter.
func committed(t *testing.T, s *Store, sessionID string) int64 {
	t.Helper()
	var seq int64
	if err := s.rdb.QueryRowContext(t.Context(),
		"SELECT COALESCE(MAX(seq), 0) FROM events WHERE session_id = ?", sessionID).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	return seq
}

func recvN(t *testing.T, ch <-chan event.Event, n int) []event.Event {
	t.Helper()
	var out []event.Event
	for len(out) < n {
		select {
		case e := <-ch:
			out = append(out, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("received %d of %d events", len(out), n)
		}
	}
	return out
}

// TestSyncFailure fails a sync of the log: the writes it covered fail and
// stay invisible, and the store refuses writes from then on.
func TestSyncFailure(t *testing.T) {
	var fail atomic.Bool
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{syncHook: func() error {
		if fail.Load() {
			return errors.New("disk on fire")
		}
		return nil
	}})
	ctx := t.Context()
	createSession(t, s, "ses_1")
	ch, err := s.Subscribe(ctx, "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "ses_1", delta(0)); err != nil {
		t.Fatal(err)
	}
	recvN(t, ch, 1)
	fail.Store(true)
	if _, err := s.Append(ctx, "ses_1", delta(1)); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Errorf("Append with a failing sync: %v", err)
	}
	fail.Store(false)
	if _, err := s.Append(ctx, "ses_1", delta(2)); err == nil {
		t.Error("Append after a failed sync succeeded")
	}
	if evs, err := s.Events(ctx, "ses_1", 0, 0); err != nil || len(evs) != 1 {
		t.Errorf("Events = %d, %v; want only the synced event", len(evs), err)
	}
	select {
	case e := <-ch:
		t.Errorf("seq %d delivered", e.Seq)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestLogStartsOver writes far more than the write-ahead log may hold and
// checks that the log is reused instead of growing.
func TestLogStartsOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s := open(t, path, Options{checkpointPages: 20, restartPages: 100})
	for i := range 8 {
		createSession(t, s, benchSession(i))
	}
	big := event.Event{Type: event.TypeNative, Data: json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)}
	const perCall, n = 10, 4000 // 8 MB, about 20 MB of log without restarts
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range n / 8 / perCall {
				if _, err := s.Append(t.Context(), benchSession(g), slices.Repeat([]event.Event{big}, perCall)...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	written := int64(n) * 2000
	t.Logf("log %d KiB after writing %d KiB", fi.Size()>>10, written>>10)
	// restartPages pages, plus what comes in while checkpoints run.
	if limit := written / 2; fi.Size() > limit {
		t.Errorf("write-ahead log is %d KiB after writing %d KiB, want it reused (under %d KiB)",
			fi.Size()>>10, written>>10, limit>>10)
	}
}

// TestSecondOpenRefused: seqs live in the writer's memory, so a second store
// on the same file (another daemon) must be refused, and allowed again once
// the first is closed.
func TestSecondOpenRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	first, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), path, Options{}); !errors.Is(err, ErrInUse) {
		t.Fatalf("second open: %v, want ErrInUse", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(t.Context(), path, Options{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	again.Close()
}

// TestLogBoundedUnderReaders is TestLogStartsOver with readers that never
// pause: some reader always has the log open, so a checkpoint that only
// starts the log over when none does never gets to, and the log grows with
// everything written.
func TestLogBoundedUnderReaders(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	const restart = 100
	s := open(t, path, Options{checkpointPages: 20, restartPages: restart})
	for i := range 8 {
		createSession(t, s, benchSession(i))
	}
	big := event.Event{Type: event.TypeNative, Data: json.RawMessage(`"` + strings.Repeat("x", 2000) + `"`)}
	const perCall, n = 10, 4000 // 8 MB, about 20 MB of log without restarts
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for g := range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Events(t.Context(), benchSession(g), 0, 200); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var maxWAL int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range n / 8 / perCall {
				if _, err := s.Append(t.Context(), benchSession(g), slices.Repeat([]event.Event{big}, perCall)...); err != nil {
					t.Error(err)
					return
				}
				if fi, err := os.Stat(path + "-wal"); err == nil && g == 0 {
					maxWAL = max(maxWAL, fi.Size())
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	maxWAL = max(maxWAL, fi.Size())
	// The bound: the log starts over at restart pages; what the writers add
	// while it does, and the page estimate's error, may double that.
	limit := int64(4 * restart * 4096)
	t.Logf("log at most %d KiB (bound %d KiB) while writing %d KiB", maxWAL>>10, limit>>10, int64(n)*2000>>10)
	if maxWAL > limit {
		t.Errorf("write-ahead log grew to %d KiB with readers present, want at most %d KiB", maxWAL>>10, limit>>10)
	}
}

// TestPublishOncePerBatch commits one batch with two appends to a session,
// an append to another and that other's deletion, and checks that each
// session's subscribers are woken once for the whole batch, with every event
// in seq order, and that the deleted session's subscription closes.
func TestPublishOncePerBatch(t *testing.T) {
	g := &gate{}
	s := open(t, filepath.Join(t.TempDir(), "agentbox.db"), Options{batchHook: g.hook})
	ctx := t.Context()
	createSession(t, s, "ses_a")
	createSession(t, s, "ses_b")
	subA, err := s.Subscribe(ctx, "ses_a", 0)
	if err != nil {
		t.Fatal(err)
	}
	subB, err := s.Subscribe(ctx, "ses_b", 0)
	if err != nil {
		t.Fatal(err)
	}
	s.hubsMu.RLock()
	hubA := s.hubs["ses_a"]
	s.hubsMu.RUnlock()

	release := g.hold(t, s)
	var wg sync.WaitGroup
	for i, call := range []func() error{
		func() error { _, err := s.Append(ctx, "ses_a", delta(1), delta(2)); return err },
		func() error { _, err := s.Append(ctx, "ses_b", delta(3)); return err },
		func() error { _, err := s.Append(ctx, "ses_a", delta(4)); return err },
		func() error { return s.DeleteSession(ctx, "ses_b") },
	} {
		wg.Go(func() {
			if err := call(); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		})
		queued(t, s, i+1) // one at a time: the batch keeps this order
	}
	release()
	wg.Wait()
	g.mu.Lock()
	if len(g.sizes) != 2 || g.sizes[1] != 4 {
		t.Errorf("batch sizes %v, want [1 4]", g.sizes)
	}
	g.mu.Unlock()

	if got := seqsOf(recvN(t, subA, 3)); !cmp.Equal(got, []int64{1, 2, 3}) {
		t.Errorf("ses_a delivered seqs %v, want [1 2 3]", got)
	}
	hubA.mu.Lock()
	if hubA.publishes != 1 {
		t.Errorf("ses_a's subscribers woken %d times by one batch, want 1", hubA.publishes)
	}
	hubA.mu.Unlock()
	// The deletion closes ses_b's subscription; its event, deleted with
	// it, may or may not be delivered first.
	timeout := time.After(10 * time.Second)
	for closed := false; !closed; {
		select {
		case e, ok := <-subB:
			if closed = !ok; ok && e.Seq != 1 {
				t.Errorf("ses_b delivered seq %d, want only 1", e.Seq)
			}
		case <-timeout:
			t.Fatal("ses_b's subscription not closed by its deletion")
		}
	}
}
