package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/store"
)

// TestLostLeaseStopsAgent: a daemon whose lease of a session was taken
// over while it was not renewing it (paused) stops driving the session as
// soon as it finds out, and nothing it writes on the way reaches the log.
func TestLostLeaseStopsAgent(t *testing.T) {
	st := openStore(t, t.TempDir())
	reg := agent.NewRegistry()
	reg.Register("test", &testAgent{exit: make(chan struct{})})
	const ttl = 300 * time.Millisecond
	m := engine.New(engine.Config{Store: st, Agents: reg, WorkspaceDir: t.TempDir(), LeaseTTL: ttl})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	s, err := m.Create(t.Context(), engine.CreateParams{Agent: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ls := st.(store.Leases)
	l, err := ls.GetLease(t.Context(), s.ID)
	if err != nil || l.Owner != m.DaemonID() || !l.Held {
		t.Fatalf("lease after create = %+v, %v; want %s's", l, err, m.DaemonID())
	}
	// m has not started renewing (no Recover yet): its lease lapses and
	// another daemon takes the session.
	var other store.Lease
	for {
		if other, err = ls.AcquireLease(t.Context(), s.ID, "dmn_other", "http://other.test", time.Hour); err == nil {
			break
		}
		if !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatal(err)
		}
		time.Sleep(ttl / 4)
	}
	before, err := st.Events(t.Context(), s.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Now m renews, finds the lease lost and stops the agent.
	if _, err := m.Recover(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := m.Interrupt(t.Context(), s.ID)
		if errors.Is(err, engine.ErrNotLive) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Interrupt on the daemon that lost the lease: %v; want not live", err)
		}
		time.Sleep(ttl / 4)
	}
	if _, err := m.Send(t.Context(), s.ID, []event.ContentPart{event.TextPart("hi")}); err == nil {
		t.Fatal("Send on the daemon that lost the lease started a turn")
	}
	// Its teardown's session.ended and status were fenced off.
	after, err := st.Events(t.Context(), s.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("the old owner wrote %d events after losing the lease: %+v", len(after)-len(before), after[len(before):])
	}
	if got, err := st.GetSession(t.Context(), s.ID); err != nil || got.Status != store.StatusIdle {
		t.Errorf("session after the old owner's teardown = %s, %v; want idle, as the new owner has it", got.Status, err)
	}
	if got, err := ls.GetLease(t.Context(), s.ID); err != nil || got.Owner != "dmn_other" || got.Epoch != other.Epoch {
		t.Errorf("lease = %+v, %v; want the new owner's", got, err)
	}
	owner, ok, err := m.SessionOwner(t.Context(), s.ID)
	if err != nil || !ok || owner.Daemon != "dmn_other" || owner.Addr != "http://other.test" {
		t.Errorf("SessionOwner = %+v, %v, %v; want dmn_other at http://other.test", owner, ok, err)
	}
}
