package event_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// compileSchema compiles the embedded schema, asserting formats (date-time).
func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(event.JSONSchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(schemaID, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(schemaID)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func validate(sch *jsonschema.Schema, b []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// TestSamplesCoverEverything keeps the samples complete: every event type,
// every item kind started and completed, every delta field.
func TestSamplesCoverEverything(t *testing.T) {
	types := map[event.Type]bool{}
	started, completed := map[event.ItemKind]bool{}, map[event.ItemKind]bool{}
	fields := map[event.DeltaField]bool{}
	for _, s := range samples() {
		types[s.Event.Type] = true
		switch p := s.Payload.(type) {
		case *event.ItemStarted:
			started[p.Item.Kind] = true
		case *event.ItemCompleted:
			completed[p.Item.Kind] = true
		case *event.ItemDelta:
			fields[p.Field] = true
		}
	}
	for _, typ := range event.Types {
		if !types[typ] {
			t.Errorf("no sample of type %s", typ)
		}
	}
	for _, k := range event.ItemKinds {
		if !started[k] || !completed[k] {
			t.Errorf("item kind %s: started sample %v, completed sample %v", k, started[k], completed[k])
		}
	}
	for _, f := range event.DeltaFields {
		if !fields[f] {
			t.Errorf("no item.delta sample for field %s", f)
		}
	}
}

func TestSamplesValidate(t *testing.T) {
	sch := compileSchema(t)
	for _, s := range samples() {
		b, err := json.Marshal(s.Event)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(sch, b); err != nil {
			t.Errorf("sample seq %d (%s) does not validate: %v\n%s", s.Event.Seq, s.Event.Type, err, b)
		}
	}
}

// sampleJSON returns the first sample that match accepts, as a generic JSON
// object.
func sampleJSON(t *testing.T, match func(sample) bool) map[string]any {
	t.Helper()
	for _, s := range samples() {
		if !match(s) {
			continue
		}
		b, err := json.Marshal(s.Event)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Fatal("no sample matches")
	return nil
}

func ofType(typ event.Type) func(sample) bool {
	return func(s sample) bool { return s.Event.Type == typ }
}

func completedKind(k event.ItemKind) func(sample) bool {
	return func(s sample) bool {
		p, ok := s.Payload.(*event.ItemCompleted)
		return ok && p.Item.Kind == k
	}
}

func TestSchemaRejectsInvalid(t *testing.T) {
	sch := compileSchema(t)
	data := func(m map[string]any) map[string]any { return m["data"].(map[string]any) }
	item := func(m map[string]any) map[string]any { return data(m)["item"].(map[string]any) }
	first := func(m map[string]any, key string) map[string]any { return m[key].([]any)[0].(map[string]any) }
	cases := []struct {
		name   string
		of     func(sample) bool
		mutate func(m map[string]any)
		want   string // a fragment of the validation error
	}{
		{"data of another type", ofType(event.TypeTurnCompleted), func(m map[string]any) {
			m["data"] = sampleJSON(t, ofType(event.TypeItemDelta))["data"]
		}, "missing properties"},
		{"type const swapped", ofType(event.TypeItemDelta), func(m map[string]any) { m["type"] = string(event.TypeError) }, "missing properties"},
		{"unknown event type", ofType(event.TypeError), func(m map[string]any) { m["type"] = "error.v2" }, "'/type'"},
		{"missing envelope field", ofType(event.TypeError), func(m map[string]any) { delete(m, "seq") }, "missing property 'seq'"},
		{"seq zero", ofType(event.TypeError), func(m map[string]any) { m["seq"] = 0 }, "'/seq': minimum"},
		{"wrong schema version", ofType(event.TypeError), func(m map[string]any) { m["schema"] = 2 }, "'/schema'"},
		{"bad time", ofType(event.TypeError), func(m map[string]any) { m["time"] = "yesterday" }, "not valid date-time"},
		{"bad source", ofType(event.TypeError), func(m map[string]any) { m["source"] = "user" }, "'/source'"},
		{"data not an object", ofType(event.TypeError), func(m map[string]any) { m["data"] = "boom" }, "'/data': got string, want object"},
		{"missing required payload field", ofType(event.TypeError), func(m map[string]any) { delete(data(m), "message") }, "missing property 'message'"},
		{"missing delta item_id", ofType(event.TypeItemDelta), func(m map[string]any) { delete(data(m), "item_id") }, "missing property 'item_id'"},
		{"wrong field type", ofType(event.TypeTurnCompleted), func(m map[string]any) { data(m)["duration_ms"] = "48s" }, "'/data/duration_ms': got string, want integer"},
		{"native without native_type", ofType(event.TypeNative), func(m map[string]any) { delete(data(m), "native_type") }, "missing property 'native_type'"},
		{"bad item kind", ofType(event.TypeItemCompleted), func(m map[string]any) { item(m)["kind"] = "memo" }, "'/data/item/kind'"},
		{"bad item status", ofType(event.TypeItemCompleted), func(m map[string]any) { item(m)["status"] = "done" }, "'/data/item/status'"},
		{"bad role", ofType(event.TypeItemStarted), func(m map[string]any) { item(m)["role"] = "robot" }, "'/data/item/role'"},
		{"bad part type", ofType(event.TypeItemStarted), func(m map[string]any) { first(item(m), "content")["type"] = "video" }, "'/data/item/content/0/type'"},
		{"bad plan status", completedKind(event.ItemPlan), func(m map[string]any) { first(item(m), "entries")["status"] = "someday" }, "'/data/item/entries/0/status'"},
		{"bad file change kind", completedKind(event.ItemFileChange), func(m map[string]any) { first(item(m), "changes")["kind"] = "rename" }, "'/data/item/changes/0/kind'"},
		{"bad stop reason", ofType(event.TypeTurnCompleted), func(m map[string]any) { data(m)["stop_reason"] = "done" }, "'/data/stop_reason'"},
		{"bad end reason", ofType(event.TypeSessionEnded), func(m map[string]any) { data(m)["reason"] = "bored" }, "'/data/reason'"},
		{"bad permission kind", ofType(event.TypePermissionRequested), func(m map[string]any) { data(m)["kind"] = "sudo" }, "'/data/kind'"},
		{"missing permission options", ofType(event.TypePermissionRequested), func(m map[string]any) { delete(data(m), "options") }, "missing property 'options'"},
		{"bad option kind", ofType(event.TypePermissionRequested), func(m map[string]any) { first(data(m), "options")["kind"] = "maybe" }, "'/data/options/0/kind'"},
		{"bad decision", ofType(event.TypePermissionResolved), func(m map[string]any) { data(m)["decision"] = "maybe" }, "'/data/decision'"},
		{"bad decider", ofType(event.TypeQuestionResolved), func(m map[string]any) { data(m)["by"] = "cat" }, "'/data/by'"},
		{"bad violation kind", ofType(event.TypeSandboxViolation), func(m map[string]any) { data(m)["kind"] = "ptrace" }, "'/data/kind'"},
		{"bad violation action", ofType(event.TypeSandboxViolation), func(m map[string]any) { data(m)["action"] = "logged" }, "'/data/action'"},
		{"bad delta field", ofType(event.TypeItemDelta), func(m map[string]any) { data(m)["field"] = "title" }, "'/data/field'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := sampleJSON(t, c.of)
			b, _ := json.Marshal(m)
			if err := validate(sch, b); err != nil {
				t.Fatalf("unmodified sample is invalid: %v", err)
			}
			c.mutate(m)
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			err = validate(sch, b)
			if err == nil {
				t.Fatalf("schema accepted an invalid event:\n%s", b)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error does not mention %q:\n%v", c.want, err)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	for _, s := range samples() {
		b, err := json.Marshal(s.Event)
		if err != nil {
			t.Fatal(err)
		}
		var e event.Event
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(s.Event, e); diff != "" {
			t.Errorf("seq %d envelope round trip (-want +got):\n%s", s.Event.Seq, diff)
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatalf("seq %d: %v", s.Event.Seq, err)
		}
		if diff := cmp.Diff(s.Payload, p); diff != "" {
			t.Errorf("seq %d payload round trip (-want +got):\n%s", s.Event.Seq, diff)
		}
		if p.EventType() != e.Type {
			t.Errorf("seq %d: decoded %T for type %s", s.Event.Seq, p, e.Type)
		}
	}
}

func TestDecodeUnknownTypeIsNative(t *testing.T) {
	e := event.Event{Type: "agent.thinking_budget", Data: json.RawMessage(`{"native_type":"thinking_budget","payload":{"tokens":1024}}`)}
	p, err := e.Decode()
	if err != nil {
		t.Fatal(err)
	}
	n, ok := p.(*event.Native)
	if !ok {
		t.Fatalf("Decode of unknown type = %T, want *event.Native", p)
	}
	want := &event.Native{NativeType: "thinking_budget", Payload: json.RawMessage(`{"tokens":1024}`)}
	if diff := cmp.Diff(want, n); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// Without data it is still a (zero) Native.
	p, err = event.Event{Type: "something.new"}.Decode()
	if _, ok := p.(*event.Native); err != nil || !ok {
		t.Errorf("Decode without data = %T, %v", p, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	e := event.Event{ID: "evt_1", Seq: 3, Type: event.TypeTurnCompleted, Data: json.RawMessage(`{"duration_ms":"soon"}`)}
	p, err := e.Decode()
	if err == nil || p != nil {
		t.Fatalf("Decode = %v, %v; want an error", p, err)
	}
	if !strings.Contains(err.Error(), "turn.completed") {
		t.Errorf("error does not name the type: %v", err)
	}
}

func TestJSONSchemaIsACopy(t *testing.T) {
	a := event.JSONSchema()
	a[0] = 'X'
	if event.JSONSchema()[0] != '{' {
		t.Fatal("JSONSchema returned the embedded bytes, not a copy")
	}
}

// FuzzDecode feeds untrusted event JSON through Unmarshal and Decode: no
// panics, and a decoded payload always matches the envelope's type.
func FuzzDecode(f *testing.F) {
	for _, s := range samples() {
		b, err := json.Marshal(s.Event)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, seed := range []string{
		`{}`, `null`, `[]`, `{"type":"item.started","data":null}`, `{"type":"item.completed","data":{"item":null}}`,
		`{"type":"native","data":[1,2]}`, `{"type":"x.y","data":{"native_type":7}}`, `{"type":"item.delta","data":"\u0000"}`,
		`{"type":"turn.completed","data":{"usage":{"cost_usd":1e400}}}`, `{"type":"permission.requested","data":{"expires_at":"0000-00-00"}}`,
	} {
		f.Add([]byte(seed))
	}
	known := map[event.Type]bool{}
	for _, typ := range event.Types {
		known[typ] = true
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var e event.Event
		if err := json.Unmarshal(b, &e); err != nil {
			return
		}
		p, err := e.Decode()
		if err != nil {
			if p != nil {
				t.Fatalf("Decode returned %T with error %v", p, err)
			}
			return
		}
		switch {
		case known[e.Type] && p.EventType() != e.Type:
			t.Fatalf("type %s decoded as %T", e.Type, p)
		case !known[e.Type] && p.EventType() != event.TypeNative:
			t.Fatalf("unknown type %q decoded as %T", e.Type, p)
		}
		if _, err := json.Marshal(p); err != nil {
			t.Fatalf("decoded payload does not marshal: %v", err)
		}
	})
}
