package mock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// fakeHost plays the engine: it records emitted events the way the store
// would number them, answers permissions and questions from queues and
// records those exchanges as the daemon's events.
type fakeHost struct {
	t *testing.T

	mu        sync.Mutex
	events    []event.Event
	perms     []agent.PermissionAnswer
	answers   []agent.Answer
	requests  []agent.PermissionRequest
	questions []agent.Question
	nativeID  string
	// block makes RequestPermission and AskQuestion wait for ctx.
	block bool
	// onEmit sees each emitted event after it is recorded.
	onEmit func(event.Event)
}

var fixedTime = time.Date(2026, 1, 15, 10, 0, 0, 0, time.UTC)

func (h *fakeHost) record(e event.Event) {
	e.Seq = int64(len(h.events) + 1)
	e.ID = fmt.Sprintf("evt_%d", e.Seq)
	e.SessionID = "ses_test"
	e.Time = fixedTime
	e.Schema = event.SchemaVersion
	e.TurnID = "turn_test"
	h.events = append(h.events, e)
}

func (h *fakeHost) Emit(ctx context.Context, evs ...event.Event) error {
	// Like a store append, a cancelled context fails.
	if err := ctx.Err(); err != nil {
		return err
	}
	h.append(evs...)
	return nil
}

// append records events and shows them to onEmit.
func (h *fakeHost) append(evs ...event.Event) {
	h.mu.Lock()
	for _, e := range evs {
		h.record(e)
	}
	recorded := h.events[len(h.events)-len(evs):]
	hook := h.onEmit
	h.mu.Unlock()
	if hook != nil {
		for _, e := range recorded {
			hook(e)
		}
	}
}

func (h *fakeHost) RequestPermission(ctx context.Context, req agent.PermissionRequest) (agent.PermissionAnswer, error) {
	h.mu.Lock()
	req.ID = fmt.Sprintf("perm_%d", len(h.requests)+1)
	h.requests = append(h.requests, req)
	block, ok := h.block, len(h.perms) > 0
	var ans agent.PermissionAnswer
	if ok && !block {
		ans, h.perms = h.perms[0], h.perms[1:]
	}
	h.mu.Unlock()
	h.append(event.New(event.SourceDaemon, &req))
	switch {
	case block:
		<-ctx.Done()
		return agent.PermissionAnswer{}, ctx.Err()
	case !ok:
		h.t.Errorf("unexpected permission request %q", req.Title)
		return agent.PermissionAnswer{}, errors.New("fake host: no answer queued")
	}
	h.append(event.New(event.SourceDaemon, &event.PermissionResolved{ID: req.ID, Decision: ans.Decision, By: ans.By, OptionID: ans.OptionID, Message: ans.Message}))
	return ans, nil
}

func (h *fakeHost) AskQuestion(ctx context.Context, q agent.Question) (agent.Answer, error) {
	h.mu.Lock()
	q.ID = fmt.Sprintf("q_%d", len(h.questions)+1)
	h.questions = append(h.questions, q)
	block, ok := h.block, len(h.answers) > 0
	var ans agent.Answer
	if ok && !block {
		ans, h.answers = h.answers[0], h.answers[1:]
	}
	h.mu.Unlock()
	h.append(event.New(event.SourceDaemon, &q))
	switch {
	case block:
		<-ctx.Done()
		return agent.Answer{}, ctx.Err()
	case !ok:
		h.t.Errorf("unexpected question %q", q.Prompt)
		return agent.Answer{}, errors.New("fake host: no answer queued")
	}
	h.append(event.New(event.SourceDaemon, &event.QuestionResolved{ID: q.ID, Answer: ans.Text, OptionID: ans.OptionID, Cancelled: ans.Cancelled, By: event.ByUser}))
	return ans, nil
}

func (h *fakeHost) SetNativeSessionID(_ context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nativeID = id
	return nil
}

func (h *fakeHost) snapshot() []event.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]event.Event(nil), h.events...)
}

var (
	allow = agent.PermissionAnswer{Decision: event.DecisionAllow, OptionID: "allow", By: event.ByUser}
	deny  = agent.PermissionAnswer{Decision: event.DecisionDeny, OptionID: "deny", By: event.ByUser}
)

// start starts a mock session in a fresh directory.
func start(t *testing.T, h *fakeHost, mode string) (agent.Session, string) {
	t.Helper()
	h.t = t
	cwd := t.TempDir()
	s, err := New().Start(t.Context(), agent.Config{SessionID: "ses_test", PermissionMode: mode, Cwd: cwd}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s, cwd
}

func prompt(ctx context.Context, s agent.Session, text string) (agent.Result, error) {
	return s.Prompt(ctx, agent.Input{TurnID: "turn_test", Content: []event.ContentPart{event.TextPart(text)}})
}

// run starts a session, runs one turn and checks the events it produced.
func run(t *testing.T, h *fakeHost, mode, text string) (agent.Result, string) {
	t.Helper()
	s, cwd := start(t, h, mode)
	res, err := prompt(t.Context(), s, text)
	if err != nil {
		t.Fatalf("Prompt: %v", err)
	}
	checkEvents(t, h.snapshot())
	return res, cwd
}

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

func eventSchema() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event.JSONSchema()))
		if err != nil {
			schemaErr = err
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		const url = "event.v1.json"
		if schemaErr = c.AddResource(url, doc); schemaErr == nil {
			schema, schemaErr = c.Compile(url)
		}
	})
	return schema, schemaErr
}

// checkEvents checks what any run must satisfy: every event is valid under
// the universal schema; items start once, get deltas only while open and
// complete once; the deltas of a text or output add up to the final item.
func checkEvents(t *testing.T, evs []event.Event) {
	t.Helper()
	sch, err := eventSchema()
	if err != nil {
		t.Fatal(err)
	}
	type state struct {
		item            event.Item
		text, output    string
		started, closed bool
	}
	items := map[string]*state{}
	for _, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("event %d is not valid: %v\n%s", e.Seq, err, b)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *event.ItemStarted:
			if items[p.Item.ID] != nil {
				t.Errorf("item %s started twice", p.Item.ID)
			}
			items[p.Item.ID] = &state{item: p.Item, started: true}
		case *event.ItemDelta:
			st := items[p.ItemID]
			if st == nil || st.closed {
				t.Errorf("delta for item %s that is not open", p.ItemID)
				continue
			}
			switch p.Field {
			case event.DeltaText:
				st.text += p.Delta
			case event.DeltaOutput:
				st.output += p.Delta
			}
		case *event.ItemCompleted:
			st := items[p.Item.ID]
			if st == nil || st.closed {
				t.Errorf("item %s completed without being open", p.Item.ID)
				continue
			}
			st.closed = true
			if p.Item.Kind != st.item.Kind {
				t.Errorf("item %s changed kind from %s to %s", p.Item.ID, st.item.Kind, p.Item.Kind)
			}
			if p.Item.Status == event.StatusInProgress {
				t.Errorf("item %s completed in progress", p.Item.ID)
			}
			if got := p.Item.Text(); (p.Item.Kind == event.ItemMessage || p.Item.Kind == event.ItemReasoning) && got != st.text {
				t.Errorf("item %s: deltas %q add up to something else than its text %q", p.Item.ID, st.text, got)
			}
			if p.Item.Kind == event.ItemCommand && p.Item.Output != st.output {
				t.Errorf("item %s: deltas %q add up to something else than its output %q", p.Item.ID, st.output, p.Item.Output)
			}
		}
	}
	for id, st := range items {
		if !st.closed {
			t.Errorf("item %s never completed", id)
		}
	}
}

// completed returns the completed items in order.
func completed(t *testing.T, evs []event.Event) []event.Item {
	t.Helper()
	var out []event.Item
	for _, e := range evs {
		if e.Type != event.TypeItemCompleted {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.(*event.ItemCompleted).Item)
	}
	return out
}

// messages returns the text of the completed assistant messages.
func messages(t *testing.T, evs []event.Event) []string {
	var out []string
	for _, it := range completed(t, evs) {
		if it.Kind == event.ItemMessage {
			out = append(out, it.Text())
		}
	}
	return out
}

var itemID = regexp.MustCompile(`item_[0-9a-f]{32}`)

// transcript renders a run as golden text: one line per event without the
// fields the fake host makes up, item ids numbered by first appearance,
// the working directory as $CWD, and adjacent output deltas of an item
// merged (how a command's output is split into reads is not
// deterministic). The last line is the turn's result.
func transcript(t *testing.T, evs []event.Event, res agent.Result, cwd string) []byte {
	t.Helper()
	type line struct {
		Type   event.Type      `json:"type"`
		Source event.Source    `json:"source"`
		Data   json.RawMessage `json:"data"`
		Raw    json.RawMessage `json:"raw,omitempty"`
	}
	var lines []line
	for _, e := range evs {
		if e.Type == event.TypeItemDelta && len(lines) > 0 {
			var d, prev event.ItemDelta
			last := &lines[len(lines)-1]
			if json.Unmarshal(e.Data, &d) == nil && d.Field == event.DeltaOutput && last.Type == event.TypeItemDelta &&
				json.Unmarshal(last.Data, &prev) == nil && prev.Field == d.Field && prev.ItemID == d.ItemID {
				prev.Delta += d.Delta
				last.Data, _ = json.Marshal(prev)
				continue
			}
		}
		lines = append(lines, line{e.Type, e.Source, e.Data, e.Raw})
	}
	var b bytes.Buffer
	for _, l := range lines {
		j, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	j, err := json.Marshal(map[string]agent.Result{"result": res})
	if err != nil {
		t.Fatal(err)
	}
	b.Write(j)
	b.WriteByte('\n')

	out := strings.ReplaceAll(b.String(), cwd, "$CWD")
	seen := map[string]string{}
	out = itemID.ReplaceAllStringFunc(out, func(id string) string {
		if n, ok := seen[id]; ok {
			return n
		}
		seen[id] = fmt.Sprintf("item_%d", len(seen)+1)
		return seen[id]
	})
	return []byte(out)
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	agenttest.Golden(t, filepath.Join("testdata", name+".golden"), got, *update)
}
