package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// TestLastRelayed: the cursor is the inner seq of the last relayed event
// of the host's log, found in a real store by reading from the log's end:
// for a long log it reads a few hundred events, not the log.
func TestLastRelayed(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "agentbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	host := func(n int) []event.Event { // n events of the host's own
		evs := make([]event.Event, n)
		for i := range evs {
			evs[i] = event.Event{Type: event.TypeTurnStarted, Source: event.SourceDaemon, Data: json.RawMessage(`{}`)}
		}
		return evs
	}
	relayed := func(seqs ...int64) []event.Event {
		evs := make([]event.Event, len(seqs))
		for i, s := range seqs {
			evs[i] = Relayed(event.Event{ID: fmt.Sprintf("evt_%d", s), Seq: s, Type: event.TypeItemDelta, Source: event.SourceAgent, Data: json.RawMessage(`{"d":1}`)})
		}
		return evs
	}
	many := func(n int) []event.Event { // n relayed events of inner seqs 1..n, a host event between each
		var evs []event.Event
		for s := range int64(n) {
			evs = append(evs, relayed(s+1)...)
			evs = append(evs, host(1)...)
		}
		return evs
	}
	tests := []struct {
		name    string
		log     [][]event.Event
		want    int64
		maxRead int // events read at most (0: unchecked)
	}{
		{name: "empty", want: 0},
		{name: "no relayed event", log: [][]event.Event{host(700)}, want: 0},
		{name: "one relayed event first", log: [][]event.Event{relayed(9), host(1000)}, want: 9},
		{name: "last event relayed", log: [][]event.Event{host(3), relayed(4, 7, 8)}, want: 8},
		{name: "a long log", log: [][]event.Event{many(15000), host(12)}, want: 15000, maxRead: 2 * tailWindow},
		{name: "a long log, a restart's bookkeeping after", log: [][]event.Event{many(15000), relayed(15001), host(300)}, want: 15001, maxRead: 3 * tailWindow},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("ses_%d", i)
			if err := st.CreateSession(t.Context(), store.Session{ID: id, Agent: "mock", Status: store.StatusIdle}); err != nil {
				t.Fatal(err)
			}
			for _, part := range tt.log {
				for len(part) > 0 {
					n := min(len(part), 1000)
					if _, err := st.Append(t.Context(), id, part[:n]...); err != nil {
						t.Fatal(err)
					}
					part = part[n:]
				}
			}
			read, calls := 0, 0
			got, err := LastRelayed(t.Context(), func(ctx context.Context, after int64, limit int) ([]event.Event, error) {
				evs, err := st.Events(ctx, id, after, limit)
				read += len(evs)
				calls++
				return evs, err
			})
			if err != nil || got != tt.want {
				t.Fatalf("LastRelayed = %d, %v; want %d", got, err, tt.want)
			}
			if tt.maxRead > 0 && read > tt.maxRead {
				t.Fatalf("LastRelayed read %d events in %d reads; want at most %d", read, calls, tt.maxRead)
			}
			t.Logf("%d events read in %d reads", read, calls)
		})
	}
}
