package agenttest

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/event"
)

// log builds a session log with seqs, session id and turn ids filled in
// as the engine would.
func mklog(payloads ...event.Payload) []event.Event {
	var out []event.Event
	turn := ""
	for i, p := range payloads {
		e := event.New(event.SourceAgent, p)
		e.Seq, e.SessionID = int64(i+1), "ses_1"
		if ts, ok := p.(*event.TurnStarted); ok {
			turn = ts.TurnID
		}
		e.TurnID = turn
		if _, ok := p.(*event.TurnCompleted); ok {
			turn = ""
		}
		out = append(out, e)
	}
	return out
}

func msg(id string, role event.Role, status event.ItemStatus, text string) event.Item {
	return event.Item{ID: id, Kind: event.ItemMessage, Role: role, Status: status, Content: []event.ContentPart{event.TextPart(text)}}
}

func goodLog() []event.Event {
	cmd := event.Item{ID: "i3", Kind: event.ItemCommand, Status: event.StatusInProgress, Command: "ls"}
	done := cmd
	done.Status = event.StatusDeclined
	return mklog(
		&event.SessionStarted{Agent: "x"},
		&event.Native{NativeType: "init"},
		&event.TurnStarted{TurnID: "t1"},
		&event.ItemStarted{Item: msg("i1", event.RoleUser, event.StatusCompleted, "hi")},
		&event.ItemCompleted{Item: msg("i1", event.RoleUser, event.StatusCompleted, "hi")},
		&event.ItemStarted{Item: cmd},
		&event.PermissionRequested{ID: "p1", Kind: event.PermCommand},
		&event.PermissionResolved{ID: "p1", Decision: event.DecisionDeny, By: event.ByUser},
		&event.ItemCompleted{Item: done},
		&event.ItemStarted{Item: event.Item{ID: "i2", Kind: event.ItemMessage, Role: event.RoleAssistant, Status: event.StatusInProgress}},
		&event.ItemDelta{ItemID: "i2", Field: event.DeltaText, Delta: "do"},
		&event.Native{NativeType: "ping"},
		&event.ItemDelta{ItemID: "i2", Field: event.DeltaText, Delta: "ne"},
		&event.ItemCompleted{Item: msg("i2", event.RoleAssistant, event.StatusCompleted, "done")},
		&event.TurnCompleted{TurnID: "t1", StopReason: event.StopEndTurn},
		&event.SessionEnded{Reason: event.EndTerminated},
	)
}

func TestShape(t *testing.T) {
	got := strings.Join(Shape(goodLog()), " ")
	want := "session.started turn.started item.started:message/user item.completed:message/user " +
		"item.started:command permission.requested:command permission.resolved:deny/user item.completed:command(declined) " +
		"item.started:message/assistant item.delta:message/assistant:text item.completed:message/assistant " +
		"turn.completed:end_turn session.ended:terminated"
	if got != want {
		t.Errorf("shape\n got %s\nwant %s", got, want)
	}
}

func TestMatchShape(t *testing.T) {
	sh := Shape(goodLog())
	for _, c := range []struct {
		pattern []string
		ok      bool
	}{
		{[]string{"session.started", "turn.started", Gap, "permission.requested:tool|permission.requested:command", Gap,
			"permission.resolved:deny/user", Gap, "item.delta:message/assistant:text+", Gap, "turn.completed:end_turn", "session.ended:terminated"}, true},
		{[]string{"session.started", Gap, "turn.completed:end_turn", "session.ended:terminated"}, false},          // a gap never hides a permission
		{[]string{"session.started", Gap, "turn.started", Gap, "error*", Gap, "session.ended:terminated"}, false}, // nor a turn end
		{[]string{"session.started", Gap}, false},
		{[]string{"session.started"}, false},
	} {
		if err := MatchShape(sh, c.pattern...); (err == nil) != c.ok {
			t.Errorf("pattern %q: %v, want ok=%v", c.pattern, err, c.ok)
		}
	}
	if err := MatchShape(nil); err != nil {
		t.Errorf("an empty shape against an empty pattern: %v", err)
	}
}

func TestCheckInvariantsGood(t *testing.T) {
	if errs := CheckInvariants(goodLog()); len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
}

func TestCheckInvariantsBad(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func([]event.Event) []event.Event
		want string
	}{
		{"gap", func(l []event.Event) []event.Event { return append(l[:3:3], l[4:]...) }, "gap or reorder"},
		{"after end", func(l []event.Event) []event.Event {
			e := l[1]
			e.Seq = int64(len(l) + 1)
			return append(l, e)
		}, "after session.ended"},
		{"open item", func(l []event.Event) []event.Event { return append(l[:13:13], renumber(l[14:], 14)...) }, "never completed"},
		{"deltas differ", func(l []event.Event) []event.Event {
			l[12].Data = []byte(`{"item_id":"i2","field":"text","delta":"NE"}`)
			return l
		}, "add up"},
		{"unresolved", func(l []event.Event) []event.Event { return append(l[:7:7], renumber(l[8:], 8)...) }, "never resolved"},
		{"resolved twice", func(l []event.Event) []event.Event {
			e := l[7]
			return append(l[:8:8], renumber(append([]event.Event{e}, l[8:]...), 9)...)
		}, "not pending"},
		{"nested turn", func(l []event.Event) []event.Event {
			e := l[2]
			return append(l[:3:3], renumber(append([]event.Event{e}, l[3:]...), 4)...)
		}, "inside turn"},
		{"delta before start", func(l []event.Event) []event.Event {
			d := l[10]
			return append(l[:9:9], renumber(append([]event.Event{d}, l[9:]...), 10)...)
		}, "not started"},
		{"kind changes", func(l []event.Event) []event.Event {
			l[8].Data = []byte(`{"item":{"id":"i3","kind":"tool_call","status":"completed"}}`)
			return l
		}, "started as command"},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := CheckInvariants(c.edit(goodLog()))
			if err := errors.Join(errs...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
	// An open item is reported as an *OpenItemError.
	l := goodLog()
	var open *OpenItemError
	if errs := CheckInvariants(append(l[:13:13], renumber(l[14:], 14)...)); len(errs) != 1 || !errors.As(errs[0], &open) || open.ItemID != "i2" {
		t.Errorf("open item: %v", errs)
	}
}

// renumber sets consecutive seqs from first.
func renumber(evs []event.Event, first int64) []event.Event {
	out := make([]event.Event, len(evs))
	for i, e := range evs {
		e.Seq = first + int64(i)
		out[i] = e
	}
	return out
}
