package sqlite

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

// TestMigrateKeepsEvents makes a database with the schema before the event
// log was kept in append order (migrations 1-5), with the events of three
// sessions interleaved as appends left them, and opens it: every event is
// there, in order, whole, and the sessions go on from their last seq.
func TestMigrateKeepsEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	ms, err := migrations()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(ms, func(m store.Migration) bool { return m.Name == "0006_events_append_order.sql" })
	if i < 0 {
		t.Fatal("no migration 0006_events_append_order.sql")
	}
	db, err := sql.Open("sqlite", dsn(path, "journal_mode(WAL)", "foreign_keys(1)"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateTo(t.Context(), conn, ms[:i]); err != nil {
		t.Fatal(err)
	}
	ids := []string{"ses_b", "ses_a", "ses_c"}
	for _, id := range ids {
		if _, err := conn.ExecContext(t.Context(), `INSERT INTO sessions (id, agent, model, mode, permission_mode, cwd,
			status, native_session_id, current_turn_id, created_at, updated_at) VALUES (?, 'mock', '', '', '', '', 'idle', '', '', 1, 1)`, id); err != nil {
			t.Fatal(err)
		}
	}
	// Rows as the old writer left them: sessions interleaved, each
	// session's seqs in order, some with data and raw, some without.
	want := map[string][]event.Event{}
	for n := range 300 {
		id := ids[n*7%len(ids)]
		ev := event.Event{
			ID: fmt.Sprintf("evt_%03d", n), SessionID: id, Seq: int64(len(want[id]) + 1),
			Time: fromNanos(int64(1e18 + n)), Schema: 1, Type: event.TypeNative, Source: event.SourceAgent,
			NativeSessionID: "native", TurnID: fmt.Sprintf("turn_%d", n/10),
		}
		if n%3 != 0 {
			ev.Data = []byte(fmt.Sprintf(`{"n":%d}`, n))
		}
		if n%5 == 0 {
			ev.Raw = []byte(`{"raw":true}`)
		}
		want[id] = append(want[id], ev)
		if _, err := conn.ExecContext(t.Context(), `INSERT INTO events (session_id, seq, id, time, schema, type, source,
			native_session_id, turn_id, data, raw, batch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			id, ev.Seq, ev.ID, ev.Time.UnixNano(), ev.Schema, string(ev.Type), string(ev.Source),
			ev.NativeSessionID, ev.TurnID, text(ev.Data), text(ev.Raw), int64(1)<<32+int64(n/4)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.ExecContext(t.Context(), "UPDATE meta SET value = 1 WHERE key = 'epoch'"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	db.Close()

	s := open(t, path, Options{})
	for _, id := range ids {
		got, err := s.Events(t.Context(), id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, want[id], sameEvent) {
			t.Errorf("%s after the migration: %d events %v, want %d %v", id, len(got), seqsOf(got), len(want[id]), seqsOf(want[id]))
		}
		// Reads from a seq, as a resume does.
		if got, err := s.Events(t.Context(), id, 40, 10); err != nil || !slices.EqualFunc(got, want[id][40:50], sameEvent) {
			t.Errorf("%s from seq 40: %v, %v", id, seqsOf(got), err)
		}
		evs, err := s.Append(t.Context(), id, delta(0))
		if err != nil {
			t.Fatal(err)
		}
		if n := int64(len(want[id])) + 1; evs[0].Seq != n {
			t.Errorf("%s: appended seq %d after the migration, want %d", id, evs[0].Seq, n)
		}
	}
	var indexed, rows int
	if err := s.rdb.QueryRowContext(t.Context(), "SELECT "+indexedPos+", (SELECT COUNT(*) FROM event_runs)").Scan(&indexed, &rows); err != nil {
		t.Fatal(err)
	}
	if indexed != 300 || rows != 300 {
		t.Errorf("after the migration 'indexed' is %d with %d runs in event_runs, want 300 and 300 (a run per old row)", indexed, rows)
	}
}

// sameEvent compares stored events field by field (Data and Raw as bytes).
func sameEvent(a, b event.Event) bool {
	return a.ID == b.ID && a.SessionID == b.SessionID && a.Seq == b.Seq && a.Time.Equal(b.Time) &&
		a.Schema == b.Schema && a.Type == b.Type && a.Source == b.Source &&
		a.NativeSessionID == b.NativeSessionID && a.TurnID == b.TurnID &&
		string(a.Data) == string(b.Data) && string(a.Raw) == string(b.Raw)
}

// TestIndexedAndTail appends to interleaved sessions with a tail indexed
// every few rows, so that reads find rows in event_runs, in the tail and
// in both: every read from every seq answers what was appended, across a
// reopen (which counts the tail again), a deleted session (its rows gone
// from both) and one created again under the same ID.
func TestIndexedAndTail(t *testing.T) {
	for _, every := range []int{1, 5, 1000} {
		t.Run(fmt.Sprintf("indexRows=%d", every), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agentbox.db")
			opts := Options{indexRows: every}
			ids := []string{"ses_a", "ses_b", "ses_c"}
			want := map[string][]event.Event{}
			appendSome := func(s *Store, rounds int) {
				t.Helper()
				for n := range rounds {
					id := ids[n%len(ids)]
					evs, err := s.Append(t.Context(), id, delta(n), delta(n+1))
					if err != nil {
						t.Fatal(err)
					}
					want[id] = append(want[id], evs...)
				}
			}
			check := func(s *Store, when string) {
				t.Helper()
				for _, id := range ids {
					for after := range len(want[id]) + 1 {
						for _, limit := range []int{0, 1, 7} {
							got, err := s.Events(t.Context(), id, int64(after), limit)
							if err != nil {
								t.Fatal(err)
							}
							w := want[id][after:]
							if limit > 0 {
								w = w[:min(limit, len(w))]
							}
							if !slices.EqualFunc(got, w, sameEvent) {
								t.Fatalf("%s: %s after %d limit %d: %v, want %v", when, id, after, limit, seqsOf(got), seqsOf(w))
							}
						}
					}
				}
			}
			// One batch with the sessions' appends interleaved, which
			// the writer writes grouped by session.
			batch := func(s *Store, g *gate) {
				t.Helper()
				release := g.hold(t, s)
				results := make([][]event.Event, 12)
				var wg sync.WaitGroup
				for n := range results {
					wg.Go(func() {
						var err error
						if results[n], err = s.Append(t.Context(), ids[n%len(ids)], delta(n), delta(n+1), delta(n+2)); err != nil {
							t.Error(err)
						}
					})
					// In this order: each session's appends get
					// their seqs in the order they were queued.
					queued(t, s, n+1)
				}
				release()
				wg.Wait()
				if err := s.DeleteSession(t.Context(), "ses_blocker"); err != nil { // for the next hold
					t.Fatal(err)
				}
				for n, evs := range results {
					want[ids[n%len(ids)]] = append(want[ids[n%len(ids)]], evs...)
				}
			}
			g := &gate{}
			opts.batchHook = g.hook
			s := open(t, path, opts)
			for _, id := range ids {
				createSession(t, s, id)
			}
			appendSome(s, 20)
			batch(s, g)
			check(s, "first run")
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			s = open(t, path, opts)
			check(s, "reopened")
			appendSome(s, 13)
			batch(s, g)
			check(s, "second run")

			if err := s.DeleteSession(t.Context(), "ses_b"); err != nil {
				t.Fatal(err)
			}
			var left int
			if err := s.rdb.QueryRowContext(t.Context(), `SELECT (SELECT COUNT(*) FROM events WHERE session_id = 'ses_b')
				+ (SELECT COUNT(*) FROM event_runs WHERE session_id = 'ses_b')`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("%d rows of a deleted session left", left)
			}
			createSession(t, s, "ses_b")
			want["ses_b"] = nil
			check(s, "ses_b created again")
			appendSome(s, 9)
			if want["ses_b"][0].Seq != 1 {
				t.Errorf("ses_b created again starts at seq %d", want["ses_b"][0].Seq)
			}
			check(s, "after appends to ses_b created again")
		})
	}
}

// TestIndexingNeverFailsWrites makes every insert into event_runs fail: the
// appends still succeed (their batches, written again carefully, leave the
// tail unindexed) and read back whole; once inserts work again, the tail is
// indexed.
func TestIndexingNeverFailsWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agentbox.db")
	s := open(t, path, Options{indexRows: 2})
	createSession(t, s, "ses_a")
	db, err := sql.Open("sqlite", dsn(s.path, "busy_timeout(5000)"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TRIGGER fail_runs BEFORE INSERT ON event_runs
		BEGIN SELECT RAISE(ABORT, 'refused by the test'); END`); err != nil {
		t.Fatal(err)
	}
	var want []event.Event
	for n := range 10 {
		evs, err := s.Append(t.Context(), "ses_a", delta(n))
		if err != nil {
			t.Fatalf("append %d while indexing fails: %v", n, err)
		}
		want = append(want, evs...)
	}
	indexed := func() (pos int64) {
		t.Helper()
		if err := db.QueryRow("SELECT " + indexedPos).Scan(&pos); err != nil {
			t.Fatal(err)
		}
		return pos
	}
	if got := indexed(); got != 0 {
		t.Errorf("'indexed' is %d while indexing fails, want 0", got)
	}
	if got, err := s.Events(t.Context(), "ses_a", 0, 0); err != nil || !slices.EqualFunc(got, want, sameEvent) {
		t.Errorf("events while indexing fails: %v, %v", seqsOf(got), err)
	}
	if _, err := db.Exec(`DROP TRIGGER fail_runs`); err != nil {
		t.Fatal(err)
	}
	evs, err := s.Append(t.Context(), "ses_a", delta(10))
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, evs...)
	if got := indexed(); got == 0 {
		t.Error("the tail was not indexed once inserts worked again")
	}
	if got, err := s.Events(t.Context(), "ses_a", 0, 0); err != nil || !slices.EqualFunc(got, want, sameEvent) {
		t.Errorf("events after indexing: %v, %v", seqsOf(got), err)
	}
}
