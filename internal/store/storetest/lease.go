package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
)

var leaseTests = []test{
	{"Acquire", testLeaseAcquire},
	{"Renew", testLeaseRenew},
	{"ExpiryTakeover", testLeaseExpiryTakeover},
	{"Release", testLeaseRelease},
	{"FencedWritesRejected", testFencedWrites},
	{"FencedOldOwnerWritesNothingAfterTakeover", testFenceConcurrent},
}

// leases returns s's store.Leases; every store of the project has them.
func leases(t *testing.T, s store.Store) store.Leases {
	t.Helper()
	l, ok := s.(store.Leases)
	if !ok {
		t.Fatalf("%T does not implement store.Leases", s)
	}
	return l
}

// longTTL outlives any test; shortTTL expires soon after it is taken.
const (
	longTTL  = time.Hour
	shortTTL = 20 * time.Millisecond
)

// waitExpired polls until the session's lease is no longer held.
func waitExpired(t *testing.T, ls store.Leases, sessionID string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l, err := ls.GetLease(ctx(t), sessionID)
		if err != nil {
			t.Fatalf("GetLease: %v", err)
		}
		if !l.Held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %+v still held after %s", l, timeout)
		}
		time.Sleep(shortTTL / 2)
	}
}

func testLeaseAcquire(t *testing.T, f Factory) {
	s := open(t, f)
	ls := leases(t, s)
	mustCreate(t, s, "ses_1")
	l, err := ls.GetLease(ctx(t), "ses_1")
	if err != nil || l.Owner != "" || l.Epoch != 0 || l.Held {
		t.Fatalf("GetLease of a session never leased = %+v, %v; want no owner, epoch 0", l, err)
	}
	a, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a.test", longTTL)
	if err != nil {
		t.Fatalf("AcquireLease(a): %v", err)
	}
	if a.SessionID != "ses_1" || a.Owner != "daemon-a" || a.Addr != "http://a.test" || a.Epoch != 1 || !a.Held ||
		!a.Expires.After(time.Now().Add(longTTL/2)) {
		t.Errorf("AcquireLease(a) = %+v", a)
	}
	if got, err := ls.GetLease(ctx(t), "ses_1"); err != nil || got.Owner != a.Owner || got.Addr != a.Addr ||
		got.Epoch != a.Epoch || !got.Held || !got.Expires.Equal(a.Expires) {
		t.Errorf("GetLease = %+v, %v; want %+v", got, err, a)
	}
	_, err = ls.AcquireLease(ctx(t), "ses_1", "daemon-b", "http://b.test", longTTL)
	wantErr(t, "AcquireLease(b) of a held lease", err, store.ErrLeaseHeld)
	var held *store.HeldError
	if !errors.As(err, &held) || held.Lease.Owner != "daemon-a" || held.Lease.Addr != "http://a.test" || held.Lease.Epoch != 1 {
		t.Errorf("AcquireLease(b) error %v does not say daemon-a at http://a.test holds epoch 1", err)
	}
	again, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a2.test", longTTL)
	if err != nil || again.Epoch != 1 || again.Addr != "http://a2.test" {
		t.Errorf("AcquireLease(a) again = %+v, %v; want epoch 1 kept, the new address", again, err)
	}
	_, err = ls.AcquireLease(ctx(t), "ses_none", "daemon-a", "", longTTL)
	wantErr(t, "AcquireLease of an unknown session", err, store.ErrNotFound)
	_, err = ls.GetLease(ctx(t), "ses_none")
	wantErr(t, "GetLease of an unknown session", err, store.ErrNotFound)
}

func testLeaseRenew(t *testing.T, f Factory) {
	s := open(t, f)
	ls := leases(t, s)
	mustCreate(t, s, "ses_1")
	a, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a.test", shortTTL)
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	r, err := ls.RenewLease(ctx(t), a, longTTL)
	if err != nil || r.Epoch != a.Epoch || r.Owner != a.Owner || !r.Held || !r.Expires.After(a.Expires) {
		t.Fatalf("RenewLease = %+v, %v; want the same epoch, a later expiry", r, err)
	}
	// Nobody else may renew it, nor its owner at another epoch.
	_, err = ls.RenewLease(ctx(t), store.Lease{SessionID: "ses_1", Owner: "daemon-b", Epoch: 1}, longTTL)
	wantErr(t, "RenewLease by another owner", err, store.ErrLeaseLost)
	_, err = ls.RenewLease(ctx(t), store.Lease{SessionID: "ses_1", Owner: "daemon-a", Epoch: 2}, longTTL)
	wantErr(t, "RenewLease at another epoch", err, store.ErrLeaseLost)
	// An expired lease nobody took is still its owner's to renew.
	short, err := ls.RenewLease(ctx(t), a, shortTTL)
	if err != nil {
		t.Fatalf("RenewLease(short): %v", err)
	}
	waitExpired(t, ls, "ses_1")
	if r, err := ls.RenewLease(ctx(t), short, longTTL); err != nil || r.Epoch != 1 || !r.Held {
		t.Errorf("RenewLease of an expired lease nobody took = %+v, %v; want it renewed at epoch 1", r, err)
	}
}

func testLeaseExpiryTakeover(t *testing.T, f Factory) {
	s := open(t, f)
	ls := leases(t, s)
	mustCreate(t, s, "ses_1")
	a, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a.test", shortTTL)
	if err != nil {
		t.Fatalf("AcquireLease(a): %v", err)
	}
	waitExpired(t, ls, "ses_1")
	b, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-b", "http://b.test", longTTL)
	if err != nil {
		t.Fatalf("AcquireLease(b) of an expired lease: %v", err)
	}
	if b.Owner != "daemon-b" || b.Addr != "http://b.test" || b.Epoch != a.Epoch+1 || !b.Held {
		t.Errorf("takeover = %+v; want daemon-b at epoch %d", b, a.Epoch+1)
	}
	_, err = ls.RenewLease(ctx(t), a, longTTL)
	wantErr(t, "RenewLease by the old owner", err, store.ErrLeaseLost)
	wantErr(t, "ReleaseLease by the old owner", ls.ReleaseLease(ctx(t), a), store.ErrLeaseLost)
	_, err = ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a.test", longTTL)
	wantErr(t, "AcquireLease by the old owner", err, store.ErrLeaseHeld)
	if got, err := ls.GetLease(ctx(t), "ses_1"); err != nil || got.Owner != "daemon-b" || got.Epoch != b.Epoch {
		t.Errorf("GetLease after the takeover = %+v, %v", got, err)
	}
}

func testLeaseRelease(t *testing.T, f Factory) {
	s := open(t, f)
	ls := leases(t, s)
	mustCreate(t, s, "ses_1")
	a, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a.test", longTTL)
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if err := ls.ReleaseLease(ctx(t), a); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if got, err := ls.GetLease(ctx(t), "ses_1"); err != nil || got.Owner != "" || got.Held || got.Epoch != 1 {
		t.Errorf("GetLease after release = %+v, %v; want no owner, epoch 1 kept", got, err)
	}
	wantErr(t, "ReleaseLease twice", ls.ReleaseLease(ctx(t), a), store.ErrLeaseLost)
	// The next owner, even the same daemon, takes the next epoch.
	again, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a.test", longTTL)
	if err != nil || again.Epoch != 2 {
		t.Errorf("AcquireLease after release = %+v, %v; want epoch 2", again, err)
	}
}

// takeOverFrom lets ses_1's lease expire and gives it to daemon-b.
func takeOverFrom(t *testing.T, ls store.Leases) store.Lease {
	t.Helper()
	waitExpired(t, ls, "ses_1")
	b, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-b", "http://b.test", longTTL)
	if err != nil {
		t.Fatalf("AcquireLease(b): %v", err)
	}
	return b
}

func testFencedWrites(t *testing.T, f Factory) {
	s := open(t, f)
	ls := leases(t, s)
	mustCreate(t, s, "ses_1")
	a, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a.test", shortTTL)
	if err != nil {
		t.Fatalf("AcquireLease(a): %v", err)
	}
	actx := store.WithFence(ctx(t), "ses_1", a.Epoch)
	if _, err := s.Append(actx, "ses_1", ev(0)); err != nil {
		t.Fatalf("Append at the current epoch: %v", err)
	}
	if _, err := s.CreateRequest(actx, permRequest("ses_1", "perm_1"), permRequested("perm_1")); err != nil {
		t.Fatalf("CreateRequest at the current epoch: %v", err)
	}
	b := takeOverFrom(t, ls)
	before := mustEvents(t, s, "ses_1")

	// The old owner, woken up: every write is refused, nothing written.
	_, err = s.Append(actx, "ses_1", ev(1), ev(2))
	wantErr(t, "Append at the old epoch", err, store.ErrFenced)
	_, err = s.CreateRequest(actx, permRequest("ses_1", "perm_2"), permRequested("perm_2"))
	wantErr(t, "CreateRequest at the old epoch", err, store.ErrFenced)
	_, err = s.ResolveRequest(actx, "ses_1", "perm_1", permResolved("perm_1"))
	wantErr(t, "ResolveRequest at the old epoch", err, store.ErrFenced)
	_, err = s.UpdateSession(actx, "ses_1", func(s *store.Session) error {
		s.Status = store.StatusFailed
		return nil
	})
	wantErr(t, "UpdateSession at the old epoch", err, store.ErrFenced)
	if diff := diffEvents(before, mustEvents(t, s, "ses_1")); diff != "" {
		t.Errorf("fenced writes changed the log: %s", diff)
	}
	if r, err := s.GetRequest(ctx(t), "ses_1", "perm_1"); err != nil || r.State != store.StatePending {
		t.Errorf("request after a fenced resolution = %+v, %v; want pending", r, err)
	}
	if _, err := s.GetRequest(ctx(t), "ses_1", "perm_2"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a fenced CreateRequest stored its request: %v", err)
	}
	if got, err := s.GetSession(ctx(t), "ses_1"); err != nil || got.Status != store.StatusIdle {
		t.Errorf("session after a fenced update = %+v, %v; want idle", got, err)
	}

	// The new owner writes; so do writes without a fence, and fenced
	// writes to other sessions are not checked against this one.
	bctx := store.WithFence(ctx(t), "ses_1", b.Epoch)
	if _, err := s.Append(bctx, "ses_1", ev(3)); err != nil {
		t.Errorf("Append at the new epoch: %v", err)
	}
	if _, err := s.ResolveRequest(bctx, "ses_1", "perm_1", permResolved("perm_1")); err != nil {
		t.Errorf("ResolveRequest at the new epoch: %v", err)
	}
	if _, err := s.UpdateSession(bctx, "ses_1", func(s *store.Session) error { return nil }); err != nil {
		t.Errorf("UpdateSession at the new epoch: %v", err)
	}
	if _, err := s.Append(ctx(t), "ses_1", ev(4)); err != nil {
		t.Errorf("Append without a fence: %v", err)
	}
	mustCreate(t, s, "ses_2")
	if _, err := s.Append(actx, "ses_2", ev(5)); err != nil {
		t.Errorf("Append to another session under ses_1's old fence: %v", err)
	}
	if got := seqs(mustEvents(t, s, "ses_1")); len(got) != len(before)+3 || got[len(got)-1] != int64(len(before)+3) {
		t.Errorf("seqs after the new owner's writes: %v", got)
	}
}

// testFenceConcurrent is the paused-then-woken owner: daemon-a keeps
// appending while its lease expires and daemon-b takes the session over and
// writes. Once daemon-b has written, nothing of daemon-a may follow in the
// log, and daemon-a learns it lost the session.
func testFenceConcurrent(t *testing.T, f Factory) {
	s := open(t, f)
	ls := leases(t, s)
	mustCreate(t, s, "ses_1")
	a, err := ls.AcquireLease(ctx(t), "ses_1", "daemon-a", "http://a.test", shortTTL)
	if err != nil {
		t.Fatalf("AcquireLease(a): %v", err)
	}
	tagged := func(owner string, n int) event.Event {
		e := ev(n)
		e.Raw = json.RawMessage(fmt.Sprintf(`{"owner":%q}`, owner))
		return e
	}
	// After the takeover daemon-a keeps trying a bounded number of times.
	taken := make(chan struct{})
	var wg sync.WaitGroup
	var aErr error
	wg.Go(func() {
		actx := store.WithFence(ctx(t), "ses_1", a.Epoch)
		after := 0
		for i := 0; ; i++ {
			select {
			case <-taken:
				after++
			default:
			}
			if after > Scale(200) {
				return
			}
			if _, err := s.Append(actx, "ses_1", tagged("a", i)); err != nil {
				aErr = err
				return
			}
		}
	})
	b := takeOverFrom(t, ls)
	mark, err := s.Append(store.WithFence(ctx(t), "ses_1", b.Epoch), "ses_1", tagged("b", 0))
	if err != nil {
		t.Fatalf("Append by the new owner: %v", err)
	}
	close(taken)
	wg.Wait()
	if !errors.Is(aErr, store.ErrFenced) {
		t.Errorf("the old owner's appends after the takeover ended with %v, want ErrFenced", aErr)
	}
	for _, e := range mustEvents(t, s, "ses_1") {
		if e.Seq > mark[0].Seq && string(e.Raw) == `{"owner":"a"}` {
			t.Fatalf("the old owner's event seq %d follows the new owner's seq %d", e.Seq, mark[0].Seq)
		}
	}
}
