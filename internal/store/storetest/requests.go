package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

var requestTests = []test{
	{"Lifecycle", testRequestLifecycle},
	{"Errors", testRequestErrors},
	{"List", testRequestList},
	{"ConcurrentResolve", testRequestConcurrentResolve},
	{"AtomicWithEvent", testRequestAtomic},
}

func permRequest(sessionID, id string) store.Request {
	return store.Request{SessionID: sessionID, ID: id, Kind: store.KindPermission}
}

func permRequested(id string) event.Event {
	return event.New(event.SourceDaemon, &event.PermissionRequested{
		ID: id, Kind: event.PermCommand, Title: "run ls",
		Options: []event.PermissionOption{{ID: "allow", Kind: event.OptionAllowOnce, Label: "Allow"}},
	})
}

func permResolved(id string) event.Event {
	return event.New(event.SourceDaemon, &event.PermissionResolved{ID: id, Decision: event.DecisionAllow, By: event.ByUser})
}

func questionRequested(id string) event.Event {
	return event.New(event.SourceAgent, &event.QuestionRequested{ID: id, Prompt: "which?"})
}

func testRequestLifecycle(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	mustAppend(t, s, "ses_1", 2)

	requested := permRequested("perm_1")
	got, err := s.CreateRequest(ctx(t), permRequest("ses_1", "perm_1"), requested)
	if err != nil {
		t.Fatalf("CreateRequest: %v", err)
	}
	if got.Seq != 3 || got.SessionID != "ses_1" || got.ID == "" || got.Time.IsZero() ||
		got.Type != event.TypePermissionRequested || string(got.Data) != string(requested.Data) {
		t.Errorf("CreateRequest returned %+v", got)
	}
	if diff := cmp.Diff([]event.Event{got}, mustEvents(t, s, "ses_1")[2:]); diff != "" {
		t.Errorf("requested event not stored as returned (-returned +stored):\n%s", diff)
	}
	r, err := s.GetRequest(ctx(t), "ses_1", "perm_1")
	if err != nil {
		t.Fatalf("GetRequest: %v", err)
	}
	if r.SessionID != "ses_1" || r.ID != "perm_1" || r.Kind != store.KindPermission || r.State != store.StatePending ||
		string(r.Payload) != string(requested.Data) || r.CreatedAt.IsZero() || r.Resolution != nil || r.ResolvedAt != nil {
		t.Errorf("pending request: %+v", r)
	}

	resolved := permResolved("perm_1")
	res, err := s.ResolveRequest(ctx(t), "ses_1", "perm_1", resolved)
	if err != nil {
		t.Fatalf("ResolveRequest: %v", err)
	}
	if res.Seq != 4 || res.Type != event.TypePermissionResolved || string(res.Data) != string(resolved.Data) {
		t.Errorf("ResolveRequest returned %+v", res)
	}
	r, err = s.GetRequest(ctx(t), "ses_1", "perm_1")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != store.StateResolved || string(r.Resolution) != string(resolved.Data) ||
		r.ResolvedAt == nil || !r.ResolvedAt.Equal(res.Time) || string(r.Payload) != string(requested.Data) {
		t.Errorf("resolved request: %+v", r)
	}

	// Compare-and-set: the second answer is refused and appends nothing.
	_, err = s.ResolveRequest(ctx(t), "ses_1", "perm_1", permResolved("perm_1"))
	wantErr(t, "second ResolveRequest", err, store.ErrAlreadyResolved)
	if n := lastSeq(t, s, "ses_1"); n != 4 {
		t.Errorf("last seq %d after a refused resolve, want 4", n)
	}
	again, err := s.GetRequest(ctx(t), "ses_1", "perm_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(r, again); diff != "" {
		t.Errorf("refused resolve changed the request (-before +after):\n%s", diff)
	}

	// An explicit payload is kept as is.
	q := store.Request{SessionID: "ses_1", ID: "q_1", Kind: store.KindQuestion, Payload: json.RawMessage(`{"custom":true}`)}
	if _, err := s.CreateRequest(ctx(t), q, questionRequested("q_1")); err != nil {
		t.Fatal(err)
	}
	if r, err := s.GetRequest(ctx(t), "ses_1", "q_1"); err != nil || string(r.Payload) != `{"custom":true}` || r.Kind != store.KindQuestion {
		t.Errorf("GetRequest(q_1) = %+v, %v", r, err)
	}
}

func testRequestErrors(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	mustCreate(t, s, "ses_2")
	if _, err := s.CreateRequest(ctx(t), permRequest("ses_1", "perm_1"), permRequested("perm_1")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"create duplicate", func() error {
			_, err := s.CreateRequest(ctx(t), permRequest("ses_1", "perm_1"), permRequested("perm_1"))
			return err
		}, store.ErrExists},
		{"create in unknown session", func() error {
			_, err := s.CreateRequest(ctx(t), permRequest("ses_missing", "perm_1"), permRequested("perm_1"))
			return err
		}, store.ErrNotFound},
		{"resolve unknown request", func() error {
			_, err := s.ResolveRequest(ctx(t), "ses_1", "perm_missing", permResolved("perm_missing"))
			return err
		}, store.ErrNotFound},
		{"resolve in other session", func() error {
			_, err := s.ResolveRequest(ctx(t), "ses_2", "perm_1", permResolved("perm_1"))
			return err
		}, store.ErrNotFound},
		{"resolve in unknown session", func() error {
			_, err := s.ResolveRequest(ctx(t), "ses_missing", "perm_1", permResolved("perm_1"))
			return err
		}, store.ErrNotFound},
		{"get unknown request", func() error {
			_, err := s.GetRequest(ctx(t), "ses_1", "perm_missing")
			return err
		}, store.ErrNotFound},
		{"get in unknown session", func() error {
			_, err := s.GetRequest(ctx(t), "ses_missing", "perm_1")
			return err
		}, store.ErrNotFound},
		{"list unknown session", func() error {
			_, err := s.ListRequests(ctx(t), "ses_missing", "")
			return err
		}, store.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.name, tc.call(), tc.want)
			// Nothing was appended anywhere.
			if n := lastSeq(t, s, "ses_1"); n != 1 {
				t.Errorf("ses_1 last seq %d, want 1", n)
			}
			if n := lastSeq(t, s, "ses_2"); n != 0 {
				t.Errorf("ses_2 last seq %d, want 0", n)
			}
			if r, err := s.GetRequest(ctx(t), "ses_1", "perm_1"); err != nil || r.State != store.StatePending {
				t.Errorf("perm_1 = %+v, %v; want it pending", r, err)
			}
		})
	}

	// The same request ID may be used in another session.
	if _, err := s.CreateRequest(ctx(t), permRequest("ses_2", "perm_1"), permRequested("perm_1")); err != nil {
		t.Errorf("same request ID in another session: %v", err)
	}
}

func testRequestList(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	mustCreate(t, s, "ses_other")
	if list, err := s.ListRequests(ctx(t), "ses_1", ""); err != nil || len(list) != 0 {
		t.Errorf("ListRequests with none = %v, %v", list, err)
	}
	// IDs sort against creation order so that ordering by ID is caught.
	order := []string{"z_q", "y_perm", "x_perm", "w_perm"}
	for i, id := range order {
		r, e := permRequest("ses_1", id), permRequested(id)
		if i == 0 {
			r.Kind, e = store.KindQuestion, questionRequested(id)
		}
		if _, err := s.CreateRequest(ctx(t), r, e); err != nil {
			t.Fatal(err)
		}
		mustAppend(t, s, "ses_1", 1) // requests need not be adjacent
	}
	if _, err := s.CreateRequest(ctx(t), permRequest("ses_other", "v_perm"), permRequested("v_perm")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResolveRequest(ctx(t), "ses_1", "x_perm", permResolved("x_perm")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		state store.RequestState
		want  []string
	}{
		{"", order},
		{store.StatePending, []string{"z_q", "y_perm", "w_perm"}},
		{store.StateResolved, []string{"x_perm"}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("state=%q", tc.state), func(t *testing.T) {
			list, err := s.ListRequests(ctx(t), "ses_1", tc.state)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range list {
				got = append(got, r.ID)
				if tc.state != "" && r.State != tc.state {
					t.Errorf("%s: state %q", r.ID, r.State)
				}
				one, err := s.GetRequest(ctx(t), "ses_1", r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(one, r); diff != "" {
					t.Errorf("%s: ListRequests and GetRequest differ (-get +list):\n%s", r.ID, diff)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ListRequests(%q) (-want +got):\n%s", tc.state, diff)
			}
		})
	}
}

// testRequestConcurrentResolve races many answers to one request: exactly one
// wins and exactly one resolved event is appended.
func testRequestConcurrentResolve(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	if _, err := s.CreateRequest(ctx(t), permRequest("ses_1", "perm_1"), permRequested("perm_1")); err != nil {
		t.Fatal(err)
	}
	n := 16
	var mu sync.Mutex
	won, lost := 0, 0
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := s.ResolveRequest(ctx(t), "ses_1", "perm_1", permResolved("perm_1"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, store.ErrAlreadyResolved):
				lost++
			default:
				t.Errorf("ResolveRequest: %v", err)
			}
		})
	}
	wg.Wait()
	if won != 1 || lost != n-1 {
		t.Errorf("%d resolves won and %d were refused, want 1 and %d", won, lost, n-1)
	}
	if got := mustEvents(t, s, "ses_1"); len(got) != 2 {
		t.Errorf("%d events, want the requested and one resolved", len(got))
	}
}

// testRequestAtomic checks from a subscriber that a request and its event
// are one step: when the requested event is seen the request exists, and
// when the resolved event is seen it is resolved.
func testRequestAtomic(t *testing.T, f Factory) {
	s := open(t, f)
	mustCreate(t, s, "ses_1")
	ch, err := s.Subscribe(ctx(t), "ses_1", 0)
	if err != nil {
		t.Fatal(err)
	}
	n := Scale(40)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			id := fmt.Sprintf("perm_%d", i)
			if _, err := s.CreateRequest(ctx(t), permRequest("ses_1", id), permRequested(id)); err != nil {
				t.Errorf("CreateRequest: %v", err)
				return
			}
			if _, err := s.ResolveRequest(ctx(t), "ses_1", id, permResolved(id)); err != nil {
				t.Errorf("ResolveRequest: %v", err)
				return
			}
		}
	})
	for range 2 * n {
		got, err := tryRecv(ch, 1)
		if err != nil {
			t.Error(err)
			break
		}
		e := got[0]
		var id string
		switch e.Type {
		case event.TypePermissionRequested:
			var p event.PermissionRequested
			err = json.Unmarshal(e.Data, &p)
			id = p.ID
		case event.TypePermissionResolved:
			var p event.PermissionResolved
			err = json.Unmarshal(e.Data, &p)
			id = p.ID
		}
		if err != nil {
			t.Errorf("seq %d: decode %s: %v", e.Seq, e.Type, err)
			break
		}
		r, err := s.GetRequest(ctx(t), "ses_1", id)
		if err != nil {
			t.Errorf("seq %d (%s %s) delivered but GetRequest: %v", e.Seq, e.Type, id, err)
			break
		}
		if e.Type == event.TypePermissionResolved && r.State != store.StateResolved {
			t.Errorf("seq %d: resolved event delivered but %s is %s", e.Seq, id, r.State)
			break
		}
	}
	wg.Wait()
}
