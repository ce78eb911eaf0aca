package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"

	"github.com/agentbox/agentbox/internal/store"
)

var sessionTests = []test{
	{"CreateGet", testCreateGet},
	{"List", testList},
	{"ListDefaultLimitAndPaging", testListPaging},
	{"Update", testUpdate},
	{"UpdateConcurrent", testUpdateConcurrent},
	{"Delete", testDelete},
}

func testCreateGet(t *testing.T, f Factory) {
	s := open(t, f)
	ended := time.Date(2025, 3, 4, 6, 0, 0, 1, time.FixedZone("CET", 3600))
	full := store.Session{
		ID:              "ses_full",
		Agent:           "claude",
		Model:           "sonnet",
		Mode:            "code",
		PermissionMode:  "ask",
		Cwd:             "/work",
		Metadata:        map[string]string{"team": "a", "quote": `"x"`},
		Status:          store.StatusEnded,
		NativeSessionID: "native-1",
		CurrentTurnID:   "turn_1",
		// Not UTC: the store returns the same instant in UTC.
		CreatedAt:  base.In(time.FixedZone("EST", -5*3600)),
		UpdatedAt:  base.Add(time.Minute),
		EndedAt:    &ended,
		Policy:     []byte(`{"isolation":"process","resources":{"pids":64}}`),
		EnvNames:   []string{"ANTHROPIC_API_KEY", "FOO"},
		MCPServers: json.RawMessage(`[{"name":"docs","type":"stdio","command":"/bin/true","env":{"TOKEN":""}}]`),
	}
	if err := s.CreateSession(ctx(t), full); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	got, err := s.GetSession(ctx(t), full.ID)
	if err != nil {
		t.Fatalf("GetSession: %v", err)
	}
	if diff := cmp.Diff(full, got); diff != "" {
		t.Errorf("GetSession mismatch (-created +got):\n%s", diff)
	}
	if got.CreatedAt.Location() != time.UTC || got.EndedAt.Location() != time.UTC {
		t.Errorf("times not in UTC: created %v, ended %v", got.CreatedAt, got.EndedAt)
	}

	// The store fills in a zero CreatedAt (and UpdatedAt).
	before := time.Now()
	if err := s.CreateSession(ctx(t), store.Session{ID: "ses_min", Agent: "mock", Status: store.StatusStarting}); err != nil {
		t.Fatalf("CreateSession minimal: %v", err)
	}
	minimal, err := s.GetSession(ctx(t), "ses_min")
	if err != nil {
		t.Fatalf("GetSession minimal: %v", err)
	}
	if minimal.CreatedAt.Before(before.Add(-time.Minute)) || minimal.CreatedAt.After(time.Now().Add(time.Minute)) {
		t.Errorf("CreatedAt = %v, want about now", minimal.CreatedAt)
	}
	if minimal.UpdatedAt.Before(minimal.CreatedAt) {
		t.Errorf("UpdatedAt %v before CreatedAt %v", minimal.UpdatedAt, minimal.CreatedAt)
	}

	// An empty metadata map is not confused with none.
	empty := newSession("ses_empty_meta")
	empty.Metadata = map[string]string{}
	if err := s.CreateSession(ctx(t), empty); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	if got, err := s.GetSession(ctx(t), empty.ID); err != nil || got.Metadata == nil {
		t.Errorf("GetSession(empty metadata) = %v, %v; want a non-nil empty map", got.Metadata, err)
	}

	dup := newSession(full.ID)
	wantErr(t, "CreateSession(duplicate)", s.CreateSession(ctx(t), dup), store.ErrExists)
	if got, _ := s.GetSession(ctx(t), full.ID); got.Agent != full.Agent {
		t.Errorf("duplicate create changed the session: agent %q", got.Agent)
	}
	_, err = s.GetSession(ctx(t), "ses_missing")
	wantErr(t, "GetSession(unknown)", err, store.ErrNotFound)
}

func testList(t *testing.T, f Factory) {
	s := open(t, f)
	// IDs sort against creation order so that ordering by ID is caught.
	var ids []string // ids[i] created at base+i minutes
	for i := range 10 {
		sess := newSession(fmt.Sprintf("ses_%c", 'z'-i))
		sess.CreatedAt = base.Add(time.Duration(i) * time.Minute)
		sess.Status = store.StatusIdle
		if i%2 == 1 {
			sess.Status = store.StatusEnded
		}
		if err := s.CreateSession(ctx(t), sess); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sess.ID)
	}
	pick := func(is ...int) []string {
		out := []string{}
		for _, i := range is {
			out = append(out, ids[i])
		}
		return out
	}
	tests := []struct {
		name string
		opts store.ListOptions
		want []string
		err  error
	}{
		{"all newest first", store.ListOptions{}, pick(9, 8, 7, 6, 5, 4, 3, 2, 1, 0), nil},
		{"limit", store.ListOptions{Limit: 3}, pick(9, 8, 7), nil},
		{"status", store.ListOptions{Status: store.StatusEnded}, pick(9, 7, 5, 3, 1), nil},
		{"status none", store.ListOptions{Status: store.StatusFailed}, pick(), nil},
		{"before", store.ListOptions{Before: ids[5]}, pick(4, 3, 2, 1, 0), nil},
		{"before limit", store.ListOptions{Before: ids[5], Limit: 2}, pick(4, 3), nil},
		{"before status", store.ListOptions{Before: ids[5], Status: store.StatusIdle}, pick(4, 2, 0), nil},
		{"before oldest", store.ListOptions{Before: ids[0]}, pick(), nil},
		{"before unknown", store.ListOptions{Before: "ses_missing"}, nil, store.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			list, err := s.ListSessions(ctx(t), tc.opts)
			if tc.err != nil {
				wantErr(t, "ListSessions", err, tc.err)
				return
			}
			if err != nil {
				t.Fatalf("ListSessions: %v", err)
			}
			got := []string{}
			for _, sess := range list {
				got = append(got, sess.ID)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ListSessions(%+v) (-want +got):\n%s", tc.opts, diff)
			}
		})
	}
}

func testListPaging(t *testing.T, f Factory) {
	s := open(t, f)
	const n = 105 // more than the default limit of 100
	g, gctx := errgroup.WithContext(ctx(t))
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			sess := newSession(fmt.Sprintf("ses_%03d", i))
			sess.CreatedAt = base.Add(time.Duration(i) * time.Second)
			return s.CreateSession(gctx, sess)
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSessions(ctx(t), store.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 100 {
		t.Errorf("ListSessions with no limit returned %d sessions, want the default 100", len(list))
	}

	var got []string
	before := ""
	for page := 0; ; page++ {
		list, err := s.ListSessions(ctx(t), store.ListOptions{Limit: 10, Before: before})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 0 {
			break
		}
		for _, sess := range list {
			got = append(got, sess.ID)
		}
		before = list[len(list)-1].ID
		if page > n {
			t.Fatal("paging does not end")
		}
	}
	var want []string
	for i := n - 1; i >= 0; i-- {
		want = append(want, fmt.Sprintf("ses_%03d", i))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("paging with Before (-want +got):\n%s", diff)
	}
}

func testUpdate(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	orig, err := s.GetSession(ctx(t), "ses_1")
	if err != nil {
		t.Fatal(err)
	}

	ended := time.Now()
	got, err := s.UpdateSession(ctx(t), "ses_1", func(sess *store.Session) error {
		sess.Status = store.StatusEnded
		sess.CurrentTurnID = "turn_2"
		sess.Metadata = map[string]string{"k": "v"}
		sess.EndedAt = &ended
		return nil
	})
	if err != nil {
		t.Fatalf("UpdateSession: %v", err)
	}
	if got.Status != store.StatusEnded || got.CurrentTurnID != "turn_2" || got.Metadata["k"] != "v" ||
		got.EndedAt == nil || !got.EndedAt.Equal(ended) {
		t.Errorf("UpdateSession returned %+v", got)
	}
	if got.UpdatedAt.Before(orig.UpdatedAt) {
		t.Errorf("UpdatedAt went back from %v to %v", orig.UpdatedAt, got.UpdatedAt)
	}
	stored, err := s.GetSession(ctx(t), "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, stored); diff != "" {
		t.Errorf("GetSession after update differs from what UpdateSession returned (-returned +stored):\n%s", diff)
	}

	errFn := errors.New("fn failed")
	tests := []struct {
		name string
		id   string
		fn   func(*store.Session) error
		want error // nil: any error
	}{
		{"fn error", "ses_1", func(sess *store.Session) error { sess.Status = store.StatusFailed; return errFn }, errFn},
		{"id change", "ses_1", func(sess *store.Session) error { sess.ID = "ses_other"; return nil }, nil},
		{"unknown", "ses_missing", func(*store.Session) error { return nil }, store.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.UpdateSession(ctx(t), tc.id, tc.fn)
			if err == nil {
				t.Fatal("UpdateSession succeeded")
			}
			if tc.want != nil {
				wantErr(t, "UpdateSession", err, tc.want)
			}
			after, err := s.GetSession(ctx(t), "ses_1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(stored, after); diff != "" {
				t.Errorf("failed update changed the session (-before +after):\n%s", diff)
			}
			if _, err := s.GetSession(ctx(t), "ses_other"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("GetSession(ses_other) = %v, want ErrNotFound", err)
			}
		})
	}
}

// testUpdateConcurrent checks that UpdateSession is an atomic
// read-modify-write: no increment is lost.
func testUpdateConcurrent(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	n := Scale(32)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := s.UpdateSession(ctx(t), "ses_1", func(sess *store.Session) error {
				c, _ := strconv.Atoi(sess.Metadata["count"])
				sess.Metadata = map[string]string{"count": strconv.Itoa(c + 1)}
				return nil
			})
			if err != nil {
				t.Errorf("UpdateSession: %v", err)
			}
		})
	}
	wg.Wait()
	got, err := s.GetSession(ctx(t), "ses_1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Metadata["count"] != strconv.Itoa(n) {
		t.Errorf("count = %q after %d concurrent increments", got.Metadata["count"], n)
	}
}

func testDelete(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	mustCreate(t, s, "ses_keep")
	mustAppend(t, s, "ses_1", 5)
	kept := mustAppend(t, s, "ses_keep", 3)
	if _, err := s.CreateRequest(ctx(t), permRequest("ses_1", "perm_1"), permRequested("perm_1")); err != nil {
		t.Fatal(err)
	}

	if err := s.DeleteSession(ctx(t), "ses_1"); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	_, err := s.GetSession(ctx(t), "ses_1")
	wantErr(t, "GetSession after delete", err, store.ErrNotFound)
	_, err = s.Events(ctx(t), "ses_1", 0, 0)
	wantErr(t, "Events after delete", err, store.ErrNotFound)
	_, err = s.GetRequest(ctx(t), "ses_1", "perm_1")
	wantErr(t, "GetRequest after delete", err, store.ErrNotFound)
	_, err = s.ListRequests(ctx(t), "ses_1", "")
	wantErr(t, "ListRequests after delete", err, store.ErrNotFound)
	_, err = s.Append(ctx(t), "ses_1", ev(0))
	wantErr(t, "Append after delete", err, store.ErrNotFound)
	_, err = s.Subscribe(ctx(t), "ses_1", 0)
	wantErr(t, "Subscribe after delete", err, store.ErrNotFound)
	wantErr(t, "DeleteSession twice", s.DeleteSession(ctx(t), "ses_1"), store.ErrNotFound)
	if diff := cmp.Diff(kept, mustEvents(t, s, "ses_keep")); diff != "" {
		t.Errorf("deleting a session changed another (-want +got):\n%s", diff)
	}

	// The same ID starts again from nothing.
	mustCreate(t, s, "ses_1")
	if got := mustEvents(t, s, "ses_1"); len(got) != 0 {
		t.Errorf("recreated session has %d events", len(got))
	}
	if list, err := s.ListRequests(ctx(t), "ses_1", ""); err != nil || len(list) != 0 {
		t.Errorf("recreated session: ListRequests = %d requests, %v", len(list), err)
	}
	if got := mustAppend(t, s, "ses_1", 2); !cmp.Equal(seqs(got), []int64{1, 2}) {
		t.Errorf("recreated session: seqs %v, want [1 2]", seqs(got))
	}
}
