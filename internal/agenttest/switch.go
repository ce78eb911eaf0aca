package agenttest

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// SwitchCase is how one agent shows a model and mode switch.
type SwitchCase struct {
	// Model is the model to switch to, Wire (part of) the model name the
	// fake LLM then sees in the agent's requests.
	Model, Wire string
	// Mode is the mode to switch to; ModeMark is text the agent's next
	// model request carries only in that mode ("": mode not tested).
	Mode, ModeMark string
	// Resume: the agent can resume; after the switch the session is ended
	// and resumed, and its next turn still asks for the new model.
	Resume bool
	// NoList: the agent does not list its models (model_list false); the
	// model goes to it as given.
	NoList bool
	// ListOnly: the agent lists its models but cannot switch them
	// (model_switch false); only the list is checked.
	ListOnly bool
	// Handoff is text of the request an agent makes with the old model
	// when it switches, to hand the history over to the new one (codex
	// compacts the thread first). Only a request carrying it may still
	// name the old model after the switch, and the agent must make it.
	Handoff string
	// OpenList: the agent takes models its list does not name
	// (models_open): a create naming one is not refused.
	OpenList bool
}

// Switch backs model_list, model_switch and mode_switch with the real
// agent: session.started carries the agent's own lists, GET
// /v1/agents/{name} shows them, a create naming a model not on them fails
// with 422 before any process starts (is taken, for an open list), PATCH /v1/sessions/{id} between turns
// switches the model (and mode), which is recorded (session.configured,
// the session's model) and reaches the agent: its next model request names
// the new model (and carries the mode's mark).
func Switch(t *testing.T, st *Stack, name string, sc SwitchCase) {
	ctx := t.Context()
	ses, _ := st.Create(t, client.PermissionDefault, nil)
	defer func() { _ = st.C.DeleteSession(context.Background(), ses.ID, false) }()
	page, err := st.C.Events(ctx, ses.ID, 0, 10)
	if err != nil || len(page.Events) == 0 {
		t.Fatalf("events: %v %+v", err, page)
	}
	p, _ := page.Events[0].Decode()
	started, ok := p.(*event.SessionStarted)
	if !ok {
		t.Fatalf("first event %s, want session.started", page.Events[0].Type)
	}
	det, err := st.C.Agent(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if det.Capabilities.ModelSwitch == sc.ListOnly || sc.Mode != "" && !det.Capabilities.ModeSwitch || det.Capabilities.ModelList == sc.NoList {
		t.Fatalf("GET /v1/agents/%s capabilities %+v do not match the case %+v", name, det.Capabilities, sc)
	}
	if sc.NoList {
		if len(started.Models)+len(det.Models) != 0 || det.CatalogNote == "" {
			t.Fatalf("an agent without model_list: session.started models %v, agent %+v", started.Models, det)
		}
	} else {
		t.Logf("%s offers models %v (current %q), modes %v (current %q)", name, started.Models, started.Model, started.Modes, started.Mode)
		if !slices.ContainsFunc(started.Models, func(c event.Choice) bool { return c.ID == sc.Model }) {
			t.Fatalf("session.started models %v do not include %q", started.Models, sc.Model)
		}
		if sc.Mode != "" && !slices.ContainsFunc(started.Modes, func(c event.Choice) bool { return c.ID == sc.Mode }) {
			t.Fatalf("session.started modes %v do not include %q", started.Modes, sc.Mode)
		}
		if det.CatalogSession != ses.ID || !slices.Equal(det.Models, started.Models) || !slices.Equal(det.Modes, started.Modes) {
			t.Fatalf("GET /v1/agents/%s = %+v, want the lists of session %s", name, det, ses.ID)
		}
		if det.ModelsOpen != sc.OpenList {
			t.Fatalf("GET /v1/agents/%s models_open = %v, want %v", name, det.ModelsOpen, sc.OpenList)
		}
		// The list is known: a model not on it fails before any process,
		// unless the list is open.
		other, err := st.C.CreateSession(ctx, client.CreateSession{Agent: name, Model: "no-such-model", Cwd: st.Host.Workspace(t)})
		switch {
		case sc.OpenList && err != nil:
			t.Fatalf("create with a model the open list does not name: %v, want it taken", err)
		case sc.OpenList:
			_ = st.C.DeleteSession(ctx, other.ID, false)
		case !client.HasProblemType(err, client.ProblemUnknownModel) || !strings.Contains(err.Error(), sc.Model):
			t.Fatalf("create with an unknown model: %v, want 422 unknown-model naming the offered ones", err)
		}
	}

	if sc.ListOnly {
		if _, err := st.C.UpdateSession(ctx, ses.ID, client.UpdateSession{Model: sc.Model}); !client.HasProblemType(err, client.ProblemSwitchUnsupported) {
			t.Fatalf("switch of an agent without model_switch: %v, want 422 switch-unsupported", err)
		}
		return
	}
	st.SetScenario(fakellm.ScenarioText)
	if tc, evs := st.Turn(t, ses.ID, "hello", nil); tc.StopReason != event.StopEndTurn {
		t.Fatalf("first turn: %+v\n%s", tc, Dump(evs))
	}
	// The agent's main model so far: that of the turn's last request (an
	// agent may make side requests with a small model).
	var prev string
	for _, r := range st.LLM.Requests() {
		if r.Model == "" {
			continue
		}
		if strings.Contains(r.Model, sc.Wire) || sc.ModeMark != "" && strings.Contains(string(r.Body)+r.BodyText, sc.ModeMark) {
			t.Fatalf("the agent asked for %s or in mode %s before the switch: the test cannot tell", sc.Wire, sc.Mode)
		}
		prev = r.Model
	}
	before := len(st.LLM.Requests())
	upd, err := st.C.UpdateSession(ctx, ses.ID, client.UpdateSession{Model: sc.Model, Mode: sc.Mode})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if upd.Model != sc.Model || upd.Mode != sc.Mode {
		t.Fatalf("updated session %+v, want model %q mode %q", upd, sc.Model, sc.Mode)
	}
	if tc, evs := st.Turn(t, ses.ID, "hello again", nil); tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn after the switch: %+v\n%s", tc, Dump(evs))
	}
	// After the switch the agent asks for the new model and no longer for
	// the old one, and (in the new mode) carries its mark.
	var wire, marked, handoff bool
	for _, r := range st.LLM.Requests()[before:] {
		switch {
		case r.Model == "":
			continue
		case sc.Handoff != "" && r.Model == prev && strings.Contains(string(r.Body)+r.BodyText, sc.Handoff):
			handoff = true
			continue
		case r.Model == prev:
			t.Errorf("after the switch the agent still asked for %q (%s %s, prompt %d)", prev, r.API, r.Path, r.Prompt)
		case strings.Contains(r.Model, sc.Wire):
			wire = true
		}
		marked = marked || strings.Contains(string(r.Body)+r.BodyText, sc.ModeMark)
	}
	if !wire {
		t.Errorf("after the switch no request asked for %q", sc.Wire)
	}
	if sc.Handoff != "" && !handoff {
		t.Errorf("after the switch no request with the old model %q carried the hand-off %q", prev, sc.Handoff)
	}
	if sc.ModeMark != "" && !marked {
		t.Errorf("after the switch to mode %s no request carries %q", sc.Mode, sc.ModeMark)
	}
	if sc.Resume {
		if err := st.C.DeleteSession(ctx, ses.ID, false); err != nil {
			t.Fatal(err)
		}
		res, err := st.C.Resume(ctx, ses.ID, client.ResumeSession{})
		if err != nil || res.Model != sc.Model {
			t.Fatalf("resume: %+v %v, want model %q", res, err, sc.Model)
		}
		before = len(st.LLM.Requests())
		if tc, evs := st.Turn(t, ses.ID, "hello after the resume", nil); tc.StopReason != event.StopEndTurn {
			t.Fatalf("turn after the resume: %+v\n%s", tc, Dump(evs))
		}
		for _, r := range st.LLM.Requests()[before:] {
			if r.Model != "" && !strings.Contains(r.Model, sc.Wire) {
				t.Errorf("after the resume the agent asked for %q, want %q", r.Model, sc.Wire)
			}
		}
	}
	var configured []event.SessionConfigured
	err = st.C.EventsAll(ctx, ses.ID, 0, func(e event.Event) error {
		if p, _ := e.Decode(); p != nil {
			if c, ok := p.(*event.SessionConfigured); ok {
				configured = append(configured, *c)
			}
		}
		return nil
	})
	if err != nil || len(configured) != 1 || configured[0].Model != sc.Model || configured[0].Mode != sc.Mode {
		t.Fatalf("session.configured events %+v (%v), want one with model %q mode %q", configured, err, sc.Model, sc.Mode)
	}
}
