package agenttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/agentbox/agentbox/event"
)

// Shape normalises a session's universal events to a list of tokens that
// say what happened and nothing about ids, times, texts or native events:
//
//	session.started
//	session.ended:<reason>
//	turn.started
//	turn.completed:<stop_reason>
//	item.started:<kind>[/<role>]
//	item.delta:<kind>[/<role>]:<field>      (a run of identical tokens is one)
//	item.completed:<kind>[/<role>][(<status>)]  (status only when not "completed")
//	permission.requested:<kind>
//	permission.resolved:<decision>/<by>
//	question.requested, question.resolved
//	sandbox.violation:<kind>
//	error
//
// The role is given for message items only. Native events are dropped. A
// delta whose item was never started has the kind "?".
func Shape(evs []event.Event) []string {
	kinds := map[string]string{} // item id → kind[/role]
	var out []string
	for _, e := range evs {
		tok := token(e, kinds)
		if tok == "" {
			continue
		}
		if e.Type == event.TypeItemDelta && len(out) > 0 && out[len(out)-1] == tok {
			continue
		}
		out = append(out, tok)
	}
	return out
}

func itemLabel(it event.Item) string {
	if it.Kind == event.ItemMessage && it.Role != "" {
		return string(it.Kind) + "/" + string(it.Role)
	}
	return string(it.Kind)
}

func token(e event.Event, kinds map[string]string) string {
	t := string(e.Type)
	switch e.Type {
	case event.TypeNative:
		return ""
	case event.TypeSessionStarted, event.TypeTurnStarted, event.TypeQuestionRequested,
		event.TypeQuestionResolved, event.TypeError:
		return t
	}
	p, err := e.Decode()
	if err != nil {
		return t + ":!undecodable"
	}
	switch p := p.(type) {
	case *event.SessionEnded:
		return t + ":" + string(p.Reason)
	case *event.TurnCompleted:
		return t + ":" + string(p.StopReason)
	case *event.ItemStarted:
		l := itemLabel(p.Item)
		kinds[p.Item.ID] = l
		return t + ":" + l
	case *event.ItemDelta:
		l, ok := kinds[p.ItemID]
		if !ok {
			l = "?"
		}
		return t + ":" + l + ":" + string(p.Field)
	case *event.ItemCompleted:
		l := itemLabel(p.Item)
		kinds[p.Item.ID] = l
		if p.Item.Status != event.StatusCompleted {
			l += "(" + string(p.Item.Status) + ")"
		}
		return t + ":" + l
	case *event.PermissionRequested:
		return t + ":" + string(p.Kind)
	case *event.PermissionResolved:
		return t + ":" + string(p.Decision) + "/" + string(p.By)
	case *event.SandboxViolation:
		return t + ":" + string(p.Kind)
	}
	return t
}

// Gap in a shape pattern stands for any number of item, question and
// sandbox tokens, but never a session, turn, permission or error token:
// those must be spelled out.
const Gap = "..."

var gapRE = `(?:(?:item|question|sandbox)\.[^;]*;)*?`

// MatchShape reports whether shape matches pattern, a list of elements
// each of which is
//
//   - a token, matched exactly;
//   - alternatives "a|b";
//   - either followed by a quantifier "?", "*" or "+" (the tokens never end
//     in one of those);
//   - [Gap].
//
// The whole shape must match. The error shows both on a mismatch.
func MatchShape(shape []string, pattern ...string) error {
	var re strings.Builder
	re.WriteString("^")
	for _, el := range pattern {
		if el == Gap {
			re.WriteString(gapRE)
			continue
		}
		q := ""
		if n := len(el); n > 0 && strings.ContainsAny(el[n-1:], "?*+") {
			el, q = el[:n-1], el[n-1:]
		}
		alts := strings.Split(el, "|")
		for i, a := range alts {
			alts[i] = regexp.QuoteMeta(a) + ";"
		}
		fmt.Fprintf(&re, "(?:%s)%s", strings.Join(alts, "|"), q)
	}
	re.WriteString("$")
	rx, err := regexp.Compile(re.String())
	if err != nil {
		return fmt.Errorf("shape pattern %q: %w", pattern, err)
	}
	if rx.MatchString(strings.Join(shape, ";") + semicolonIf(len(shape) > 0)) {
		return nil
	}
	return fmt.Errorf("the stream's shape does not match the expected pattern\nshape:\n  %s\npattern:\n  %s",
		strings.Join(shape, "\n  "), strings.Join(pattern, "\n  "))
}

func semicolonIf(b bool) string {
	if b {
		return ";"
	}
	return ""
}

// CheckInvariants checks what must hold for the whole log of any session
// of any agent, and returns every violation found (nil if none):
//
//   - seqs start at 1 and have no gaps; every event has the session's id;
//   - the log starts with session.started; nothing but a new
//     session.started (a resume) follows a session.ended;
//   - turns do not nest: turn.started … turn.completed bracket each turn,
//     with the same turn id in the payloads and envelopes, and every
//     event stamped with a turn id lies inside that turn;
//   - item and permission events occur only inside a turn;
//   - every item.started has exactly one item.completed with the same id
//     and kind, later in the same turn; an item id is started at most once
//     and completed at most once; an item.delta follows its item's
//     item.started and precedes its item.completed;
//   - the text deltas of a message or reasoning item add up to the text
//     of its item.completed;
//   - every permission.requested is followed, within its turn, by exactly
//     one permission.resolved with the same id (and no resolution comes
//     without a request); questions likewise.
func CheckInvariants(evs []event.Event) []error {
	var errs []error
	bad := func(e event.Event, format string, args ...any) {
		errs = append(errs, fmt.Errorf("seq %d %s: %s", e.Seq, e.Type, fmt.Sprintf(format, args...)))
	}
	type itemState struct {
		kind      event.ItemKind
		turn      string
		started   bool
		completed bool
		text      strings.Builder
		deltas    bool
	}
	var (
		sid      string
		ended    bool
		turn     string // the open turn, "" between turns
		items    = map[string]*itemState{}
		pending  = map[string]string{} // permission/question id → turn
		resolved = map[string]bool{}
		open     = map[string]bool{} // item ids started in the open turn, not completed
	)
	for i, e := range evs {
		if want := int64(i + 1); e.Seq != want {
			bad(e, "seq %d, want %d (gap or reorder)", e.Seq, want)
		}
		if i == 0 {
			sid = e.SessionID
			if e.Type != event.TypeSessionStarted {
				bad(e, "the log does not start with session.started")
			}
		} else if e.SessionID != sid {
			bad(e, "session id %q, want %q", e.SessionID, sid)
		}
		if ended && e.Type != event.TypeSessionStarted {
			bad(e, "event after session.ended")
		}
		if e.TurnID != "" && e.TurnID != turn && e.Type != event.TypeTurnStarted {
			bad(e, "stamped with turn %s outside it (open turn %q)", e.TurnID, turn)
		}
		p, err := e.Decode()
		if err != nil {
			bad(e, "%v", err)
			continue
		}
		switch p := p.(type) {
		case *event.SessionStarted:
			ended = false
		case *event.SessionEnded:
			if turn != "" {
				bad(e, "session ended inside turn %s", turn)
			}
			ended = true
		case *event.TurnStarted:
			if turn != "" {
				bad(e, "turn %s starts inside turn %s", p.TurnID, turn)
			}
			if p.TurnID == "" || (e.TurnID != "" && e.TurnID != p.TurnID) {
				bad(e, "turn id %q, envelope %q", p.TurnID, e.TurnID)
			}
			turn = p.TurnID
		case *event.TurnCompleted:
			if turn == "" || p.TurnID != turn {
				bad(e, "completes turn %q, open turn %q", p.TurnID, turn)
			}
			for id := range open {
				errs = append(errs, &OpenItemError{Seq: e.Seq, TurnID: p.TurnID, StopReason: p.StopReason, ItemID: id, Kind: items[id].kind})
			}
			clear(open)
			for id, t := range pending {
				if t == turn {
					bad(e, "request %s of the turn never resolved", id)
					delete(pending, id)
				}
			}
			turn = ""
		case *event.ItemStarted:
			id := p.Item.ID
			if turn == "" {
				bad(e, "item %s outside a turn", id)
			}
			if id == "" {
				bad(e, "item without an id")
			}
			if st := items[id]; st != nil {
				bad(e, "item %s started twice or after its completion", id)
			}
			items[id] = &itemState{kind: p.Item.Kind, turn: turn, started: true}
			open[id] = true
		case *event.ItemDelta:
			st := items[p.ItemID]
			switch {
			case st == nil || !st.started:
				bad(e, "delta for item %s that was not started", p.ItemID)
			case st.completed:
				bad(e, "delta for item %s after its completion", p.ItemID)
			case p.Field == event.DeltaText:
				st.text.WriteString(p.Delta)
				st.deltas = true
			}
		case *event.ItemCompleted:
			id := p.Item.ID
			if turn == "" {
				bad(e, "item %s outside a turn", id)
			}
			st := items[id]
			switch {
			case st == nil:
				items[id] = &itemState{kind: p.Item.Kind, turn: turn, completed: true}
			case st.completed:
				bad(e, "item %s completed twice", id)
			default:
				if st.kind != p.Item.Kind {
					bad(e, "item %s started as %s, completed as %s", id, st.kind, p.Item.Kind)
				}
				if st.turn != turn {
					bad(e, "item %s started in turn %s, completed in %s", id, st.turn, turn)
				}
				if st.deltas && (p.Item.Kind == event.ItemMessage || p.Item.Kind == event.ItemReasoning) &&
					st.text.String() != p.Item.Text() {
					bad(e, "item %s: text deltas add up to %q, the completed item says %q", id, st.text.String(), p.Item.Text())
				}
				st.completed = true
				delete(open, id)
			}
			if p.Item.Status == event.StatusInProgress {
				bad(e, "item %s completed with status in_progress", id)
			}
		case *event.PermissionRequested:
			req(bad, e, turn, p.ID, pending, resolved)
		case *event.QuestionRequested:
			req(bad, e, turn, p.ID, pending, resolved)
		case *event.PermissionResolved:
			res(bad, e, p.ID, pending, resolved)
		case *event.QuestionResolved:
			res(bad, e, p.ID, pending, resolved)
		}
	}
	if turn != "" && len(evs) > 0 {
		bad(evs[len(evs)-1], "the log ends inside turn %s", turn)
	}
	return errs
}

func req(bad func(event.Event, string, ...any), e event.Event, turn, id string, pending map[string]string, resolved map[string]bool) {
	if turn == "" {
		bad(e, "request %s outside a turn", id)
	}
	if _, dup := pending[id]; dup || resolved[id] || id == "" {
		bad(e, "request id %q empty or reused", id)
	}
	pending[id] = turn
}

func res(bad func(event.Event, string, ...any), e event.Event, id string, pending map[string]string, resolved map[string]bool) {
	if _, ok := pending[id]; !ok {
		bad(e, "resolution of %s, which is not pending", id)
	}
	delete(pending, id)
	resolved[id] = true
}

// OpenItemError is the violation of an item started in a turn and not
// completed by the turn's end. It is a type of its own so that a caller can
// tell it apart (the crash subtest tolerates it, with a message, for the
// turn an agent's death ended).
type OpenItemError struct {
	Seq        int64 // of the turn.completed
	TurnID     string
	StopReason event.StopReason
	ItemID     string
	Kind       event.ItemKind
}

func (e *OpenItemError) Error() string {
	return fmt.Sprintf("seq %d turn.completed (%s): item %s (%s) started in the turn but never completed", e.Seq, e.StopReason, e.ItemID, e.Kind)
}

// joinErrs is errors.Join that reads well in a test failure.
func joinErrs(errs []error) error { return errors.Join(errs...) }

// decode unmarshals e's data into v, for the suite's checks.
func decode[T any](e event.Event) T {
	var v T
	_ = json.Unmarshal(e.Data, &v)
	return v
}
