package agenttest

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// Patterns (see MatchShape) of the parts of a session log, built from the
// target's capabilities only.

// turnHead is how every turn opens: the user's input as a message item.
var turnHead = []string{"turn.started", "item.started:message/user", "item.completed:message/user"}

// answer is the assistant's final message: streamed (≥1 text delta) when
// the agent claims Deltas.
func (s *suite) answer() []string {
	if !s.tg.Caps.Text {
		return []string{Gap}
	}
	if s.tg.Caps.Deltas {
		return []string{Gap, "item.started:message/assistant", Gap, "item.delta:message/assistant:text", Gap, "item.completed:message/assistant", Gap}
	}
	return []string{Gap, "item.started:message/assistant?", Gap, "item.completed:message/assistant", Gap}
}

// okTurn is a turn that ends normally with the given middle part.
func (s *suite) okTurn(middle ...string) []string {
	p := append(append([]string{}, turnHead...), middle...)
	p = append(p, s.answer()...)
	return append(p, "turn.completed:end_turn")
}

// toolItem is the completed item of the scenario's write call.
func (s *suite) writeItem() []string {
	switch {
	case s.tg.Caps.FileChanges:
		return []string{Gap, "item.completed:file_change"}
	case s.tg.Caps.ToolCalls:
		return []string{Gap, "item.completed:tool_call|item.completed:command|item.completed:mcp_tool_call"}
	}
	return nil
}

func session(turns ...[]string) []string {
	p := []string{"session.started", Gap}
	for _, t := range turns {
		p = append(p, t...)
		p = append(p, Gap)
	}
	return p
}

// expectShape checks the whole log against the pattern.
func expectShape(pattern []string) sessionCheck { return sessionCheck{shape: pattern} }

func ended(reason string) []string { return []string{"session.ended:" + reason} }

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// checkProtocol checks that the agent called the fake LLM with the
// target's protocol and key since request number from.
func (s *suite) checkProtocol(t *testing.T, from int) {
	t.Helper()
	reqs := s.LLM.Requests()[from:]
	n := 0
	for _, r := range reqs {
		if s.tg.Protocol != "" && r.API != s.tg.Protocol {
			continue
		}
		n++
		if !r.HasKey(s.LLM.Key()) {
			t.Errorf("request %d %s %s without the key LLM.Key() gives", r.Seq, r.Method, r.Path)
		}
	}
	if n == 0 {
		t.Errorf("the fake LLM got no %q request (%d others)", s.tg.Protocol, len(reqs))
	}
}

func (s *suite) testWrite(t *testing.T) {
	caps := s.tg.Caps
	s.SetScenario(fakellm.ScenarioWrite)
	from := len(s.LLM.Requests())
	ses, cwd := s.session(t, client.PermissionAcceptEdits, expectShape(session(
		s.okTurn(s.writeItem()...), ended("terminated"))))
	// accept_edits allows the write without asking; a request is answered
	// (so the turn does not hang) but fails the shape.
	tc, evs := s.Turn(t, ses.ID, "Create the file please", s.Answer(t, ses.ID, "allow"))
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("stop reason %s\n%s", tc.StopReason, Dump(evs))
	}
	// Agents may end the file with a newline (Codex's apply_patch does).
	if got, ok := fileContent(cwd, "hello.txt"); strings.TrimSuffix(got, "\n") != "hi" {
		t.Errorf("hello.txt = %q (exists %v), want \"hi\"", got, ok)
	}
	its := Items(t, evs)
	switch {
	case caps.FileChanges:
		fc := FindItem(its, event.ItemFileChange)
		if fc == nil || fc.Status != event.StatusCompleted || len(fc.Changes) != 1 ||
			filepath.Base(fc.Changes[0].Path) != "hello.txt" || fc.Changes[0].Kind != event.FileAdd {
			t.Errorf("file_change item %+v, want one completed add of hello.txt", fc)
		} else if caps.Diffs && !strings.Contains(fc.Changes[0].Diff, "+hi") {
			t.Errorf("Diffs: the change has no diff adding hi: %q", fc.Changes[0].Diff)
		} else if !caps.Diffs {
			t.Log("Diffs is false: the diff is not checked")
		}
	case caps.ToolCalls:
		t.Log("FileChanges is false: want a tool_call, command or mcp_tool_call item instead")
		if FindItem(its, event.ItemToolCall, event.ItemCommand, event.ItemMCPToolCall) == nil {
			t.Errorf("no tool item for the write")
		}
	default:
		t.Log("FileChanges and ToolCalls are false: no tool item is checked")
	}
	if caps.Text {
		m := lastAssistant(its)
		if m == nil || m.Text() != "done" {
			t.Errorf("the last assistant message is %+v, want \"done\"", m)
		} else if caps.Deltas && textDeltas(evs, m.ID) == 0 {
			t.Errorf("Deltas: the assistant message %s has no text delta", m.ID)
		}
	} else {
		t.Log("Text is false: the answer is not checked")
	}
	if caps.Usage {
		if tc.Usage == nil || tc.Usage.InputTokens <= 0 || tc.Usage.OutputTokens <= 0 {
			t.Errorf("Usage: turn.completed usage %+v, want input and output tokens", tc.Usage)
		}
	} else {
		t.Log("Usage is false: turn usage is not checked")
	}
	s.checkProtocol(t, from)
}

func (s *suite) testPermission(t *testing.T, allow bool) {
	caps := s.tg.Caps
	if !caps.Permissions {
		t.Skip("Permissions is false: approvals through the API are not checked")
	}
	decision, itemTok := "deny", "item.completed:command(declined)"
	if allow {
		decision, itemTok = "allow", "item.completed:command"
	}
	middle := []string{Gap, "permission.requested:command|permission.requested:tool", Gap,
		"permission.resolved:" + decision + "/user"}
	if caps.CommandOutput {
		middle = append(middle, Gap, itemTok)
	}
	s.SetScenario(fakellm.ScenarioPermission)
	ses, cwd := s.session(t, client.PermissionDefault, expectShape(session(s.okTurn(middle...), ended("terminated"))))
	tc, evs := s.Turn(t, ses.ID, "Create the file please", s.Answer(t, ses.ID, decision))
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("stop reason %s (the agent must carry on after a %s)\n%s", tc.StopReason, decision, Dump(evs))
	}
	reqs, ress := ofType(evs, event.TypePermissionRequested), ofType(evs, event.TypePermissionResolved)
	if len(reqs) != 1 || len(ress) != 1 {
		t.Fatalf("%d permission requests and %d resolutions, want one each\n%s", len(reqs), len(ress), Dump(evs))
	}
	req, res := decode[event.PermissionRequested](reqs[0]), decode[event.PermissionResolved](ress[0])
	if req.Kind != event.PermCommand && req.Kind != event.PermTool {
		t.Errorf("permission kind %q, want command or tool", req.Kind)
	}
	if req.Title == "" || len(req.Options) == 0 {
		t.Errorf("permission request without title or options: %+v", req)
	}
	if res.ID != req.ID || string(res.Decision) != decision || res.By != event.ByUser || ress[0].Seq < reqs[0].Seq {
		t.Errorf("resolution %+v (seq %d) of request %s (seq %d), want %s by user after it", res, ress[0].Seq, req.ID, reqs[0].Seq, decision)
	}
	got, exists := fileContent(cwd, "approved.txt")
	if allow && got != "approved" {
		t.Errorf("allowed, but approved.txt = %q (exists %v)", got, exists)
	}
	if !allow && exists {
		t.Errorf("denied, but approved.txt exists (%q)", got)
	}
	its := Items(t, evs)
	if req.ItemID != "" {
		var it *event.Item
		for i := range its {
			if its[i].ID == req.ItemID {
				it = &its[i]
			}
		}
		want := event.StatusDeclined
		if allow {
			want = event.StatusCompleted
		}
		if it == nil || it.Status != want {
			t.Errorf("the request's item %s is %+v, want status %s", req.ItemID, it, want)
		}
	} else {
		t.Log("the permission request names no item")
	}
	if caps.CommandOutput {
		cmd := FindItem(its, event.ItemCommand)
		if cmd == nil || !strings.Contains(cmd.Command+strings.Join(cmd.Argv, " "), "approved.txt") {
			t.Errorf("CommandOutput: command item %+v, want the printf command", cmd)
		} else if allow && cmd.ExitCode != nil && *cmd.ExitCode != 0 {
			t.Errorf("command exit code %d", *cmd.ExitCode)
		}
	} else {
		t.Log("CommandOutput is false: the command item is not checked")
	}
	if caps.Text && LastMessage(its) != "done" {
		t.Errorf("the last assistant message is %q, want \"done\"", LastMessage(its))
	}
}

func (s *suite) testTwoTurns(t *testing.T) {
	s.SetScenario(fakellm.ScenarioMulti)
	ses, cwd := s.session(t, client.PermissionAcceptEdits, expectShape(session(
		s.okTurn(s.writeItem()...), s.okTurn(), ended("terminated"))))
	tc1, evs1 := s.Turn(t, ses.ID, "first", s.Answer(t, ses.ID, "allow"))
	if tc1.StopReason != event.StopEndTurn {
		t.Fatalf("first turn: %+v\n%s", tc1, Dump(evs1))
	}
	if got, _ := fileContent(cwd, "hello.txt"); strings.TrimSuffix(got, "\n") != "hi" {
		t.Errorf("hello.txt = %q", got)
	}
	tc2, evs2 := s.Turn(t, ses.ID, "second", nil)
	if tc2.StopReason != event.StopEndTurn {
		t.Fatalf("second turn: %+v\n%s", tc2, Dump(evs2))
	}
	// The fake model answers "second answer" only to a history holding the
	// first exchange: the conversation went on in the same agent session.
	if caps := s.tg.Caps; caps.Text {
		a1, a2 := LastMessage(Items(t, evs1)), LastMessage(Items(t, evs2))
		if a1 != "done" || a2 != "second answer" {
			t.Errorf("answers %q then %q, want \"done\" then \"second answer\"", a1, a2)
		}
	}
	if tc1.TurnID == tc2.TurnID || evs2[0].Seq != evs1[len(evs1)-1].Seq+1 {
		t.Errorf("turn 2 (%s) starts at seq %d, turn 1 (%s) ended at %d", tc2.TurnID, evs2[0].Seq, tc1.TurnID, evs1[len(evs1)-1].Seq)
	}
	for _, e := range append(evs1, evs2...) {
		if e.SessionID != ses.ID {
			t.Fatalf("event %d of session %s", e.Seq, e.SessionID)
		}
	}
	got, err := s.C.GetSession(context.Background(), ses.ID)
	if err != nil || got.Status != client.StatusIdle || got.NativeSessionID != ses.NativeSessionID {
		t.Errorf("session after two turns %+v (%v); native id was %q", got, err, ses.NativeSessionID)
	}
}

// midTurn sends text and calls act once the turn is under way: at the
// first item.delta when the agent streams, else 1.5s after the send. It
// returns when act was called; follow the turn with the returned after.
func (s *suite) midTurn(t *testing.T, sid, text string, act func()) (turnID string, after int64, acted time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	after, err := s.C.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	tr, err := s.C.Send(ctx, sid, text)
	if err != nil {
		t.Fatal(err)
	}
	if !s.tg.Caps.Deltas {
		time.Sleep(1500 * time.Millisecond)
		act()
		return tr.TurnID, after, time.Now()
	}
	st := s.C.Stream(ctx, sid, after, client.Until(func(e event.Event) bool {
		return e.Type == event.TypeItemDelta || e.Type == event.TypeTurnCompleted || e.Type == event.TypeSessionEnded
	}))
	defer func() { _ = st.Close() }()
	for st.Next() {
		if e := st.Event(); e.Type == event.TypeItemDelta {
			act()
			return tr.TurnID, after, time.Now()
		}
	}
	t.Fatalf("the turn ended before any delta: %v\nmodel requests carried since the message was sent:\n%s", st.Err(), s.sw.since(sent))
	return "", 0, time.Time{}
}

func (s *suite) testInterrupt(t *testing.T) {
	if !s.tg.Caps.Interrupt {
		t.Skip("Interrupt is false: interrupting a turn is not checked")
	}
	s.SetScenario(fakellm.ScenarioSlow)
	ses, _ := s.session(t, client.PermissionDefault, expectShape(session(
		cat(turnHead, []string{Gap, "turn.completed:interrupted"}), s.okTurn(), ended("terminated"))))
	var sent time.Time
	turnID, after, _ := s.midTurn(t, ses.ID, "talk slowly", func() {
		sent = time.Now()
		if _, err := s.C.Interrupt(context.Background(), ses.ID); err != nil {
			t.Errorf("interrupt: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	var evs []event.Event
	tc, err := s.C.WaitTurn(ctx, ses.ID, turnID, after, func(e event.Event) error { evs = append(evs, e); return nil })
	took := time.Since(sent)
	if err != nil {
		t.Fatalf("interrupted turn: %v\n%s", err, Dump(evs))
	}
	t.Logf("interrupt → turn.completed in %s", took.Round(time.Millisecond))
	if tc.StopReason != event.StopInterrupted {
		t.Fatalf("stop reason %s, want interrupted\n%s", tc.StopReason, Dump(evs))
	}
	if took > s.tg.InterruptWithin {
		t.Errorf("the turn ended %s after the interrupt, want ≤ %s", took, s.tg.InterruptWithin)
	}
	for _, e := range ofType(evs, event.TypeError) {
		t.Errorf("an interrupt reported an error: %s", e.Data)
	}
	s.SetScenario(fakellm.ScenarioText)
	tc, evs = s.Turn(t, ses.ID, "again", nil)
	if tc.StopReason != event.StopEndTurn || (s.tg.Caps.Text && LastMessage(Items(t, evs)) != "done") {
		t.Fatalf("turn after the interrupt: %+v\n%s", tc, Dump(evs))
	}
}

func (s *suite) testCrash(t *testing.T) {
	s.SetScenario(fakellm.ScenarioSlow)
	ses, cwd := s.session(t, client.PermissionDefault, sessionCheck{shape: session(
		cat(turnHead, []string{Gap, "error*", Gap, "turn.completed:error"}), ended("error"))})
	turnID, after, _ := s.midTurn(t, ses.ID, "talk slowly", func() { s.tg.KillAgent(t, cwd) })
	ctx, cancel := context.WithTimeout(context.Background(), s.tg.Timeout)
	defer cancel()
	var (
		evs     []event.Event
		end     *event.SessionEnded
		turnEnd *event.TurnCompleted
	)
	st := s.C.Stream(ctx, ses.ID, after, client.Until(func(e event.Event) bool { return e.Type == event.TypeSessionEnded }))
	for st.Next() {
		e := st.Event()
		evs = append(evs, e)
		switch e.Type {
		case event.TypeTurnCompleted:
			tc := decode[event.TurnCompleted](e)
			turnEnd = &tc
		case event.TypeSessionEnded:
			se := decode[event.SessionEnded](e)
			end = &se
		}
	}
	if end == nil {
		t.Fatalf("no session.ended after the kill: %v\n%s", st.Err(), Dump(evs))
	}
	if turnEnd == nil || turnEnd.TurnID != turnID || turnEnd.StopReason != event.StopError {
		t.Errorf("turn.completed %+v, want turn %s with stop_reason error", turnEnd, turnID)
	}
	exit := "none"
	if end.ExitCode != nil {
		exit = strconv.Itoa(*end.ExitCode)
	}
	t.Logf("session.ended: reason %s, exit code %s, message %q, stderr tail %d bytes", end.Reason, exit, end.Message, len(end.StderrTail))
	if end.Reason != event.EndError || (end.ExitCode == nil && end.StderrTail == "") {
		t.Errorf("session.ended %+v, want reason error with an exit code or a stderr tail", end)
	}
	got, err := s.C.GetSession(ctx, ses.ID)
	if err != nil || got.Status != client.StatusFailed {
		t.Errorf("session status %q (%v), want failed", got.Status, err)
	}
	if _, err := s.C.Send(ctx, ses.ID, "still there?"); !client.IsNotLive(err) {
		t.Errorf("send to the crashed session: %v, want not-live", err)
	}
	// A new session works.
	s.SetScenario(fakellm.ScenarioText)
	ses2, _ := s.session(t, client.PermissionDefault, expectShape(session(s.okTurn(), ended("terminated"))))
	tc, evs2 := s.Turn(t, ses2.ID, "hello", nil)
	if tc.StopReason != event.StopEndTurn || (s.tg.Caps.Text && LastMessage(Items(t, evs2)) != "done") {
		t.Errorf("a new session after the crash: %+v\n%s", tc, Dump(evs2))
	}
}

func (s *suite) testUpstreamError(t *testing.T) {
	s.SetScenario(fakellm.ScenarioError500)
	ses, _ := s.session(t, client.PermissionDefault, expectShape(session(
		cat(turnHead, []string{Gap, "error+", Gap, "turn.completed:error"}), s.okTurn(), ended("terminated"))))
	start := time.Now()
	tc, evs := s.Turn(t, ses.ID, "hello", nil)
	t.Logf("the failed turn took %s", time.Since(start).Round(time.Millisecond))
	if tc.StopReason != event.StopError {
		t.Fatalf("stop reason %s, want error\n%s", tc.StopReason, Dump(evs))
	}
	errs := ofType(evs, event.TypeError)
	if len(errs) == 0 {
		t.Fatalf("no error event\n%s", Dump(evs))
	}
	var msgs []string
	for _, e := range errs {
		p := decode[event.Error](e)
		msgs = append(msgs, p.Message)
	}
	if all := strings.Join(msgs, " | "); !strings.Contains(all, "500") && !strings.Contains(all, "internal error") {
		t.Errorf("the error events do not say what failed (500 / internal error): %q", all)
	}
	s.SetScenario(fakellm.ScenarioText)
	tc, evs = s.Turn(t, ses.ID, "hello again", nil)
	if tc.StopReason != event.StopEndTurn || (s.tg.Caps.Text && LastMessage(Items(t, evs)) != "done") {
		t.Fatalf("turn after the error: %+v\n%s", tc, Dump(evs))
	}
}
