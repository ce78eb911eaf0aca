package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/claude"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/sandbox/process"
	"github.com/agentbox/agentbox/internal/tracing/tracingtest"
)

// lockedBuffer is a log sink the daemon's goroutines write concurrently.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestTraces: a whole daemon configured by the OTEL_* variables exports,
// to a real OTLP/HTTP receiver, the spans of a session's create (with its
// sandbox's start), of a message request carrying a client's traceparent,
// of the turn it starts, of the turn's tool call and of its permission
// wait, linked parent to child; the server spans are named by route, not
// by path; the exporter's header values appear in no log; and the
// daemon's shutdown sends what is queued (the batch interval is an hour).
func TestTraces(t *testing.T) {
	sandboxed := process.New(process.Options{}).Probe(t.Context()).Available
	const secret = "otlp-header-s3cret"
	rcv := tracingtest.NewReceiver(t)
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20" + secret,
		"OTEL_SERVICE_NAME":          "agentbox-test",
		"OTEL_BSP_SCHEDULE_DELAY":    "3600000",
	}
	var logs lockedBuffer
	d, err := New(t.Context(), Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), OTLPEndpoint: rcv.URL,
		Getenv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Log:    slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	c, shutdown := serveTraced(t, d)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	create := client.CreateSession{Agent: mock.Name}
	if sandboxed {
		create.Policy = json.RawMessage(`"agent-default"`)
	}
	s, err := c.CreateSession(ctx, create)
	if err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, s.ID, 0, event.TypeSessionStarted)

	// The message, with a client's trace context.
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	script, err := json.Marshal([]mock.Step{
		{Kind: mock.KindPermission, Text: "may I read?"},
		{Kind: mock.KindTool, Name: "Read", Input: json.RawMessage(`{"path":"x"}`), Output: "contents"},
		{Kind: mock.KindText, Text: "done"},
	})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": "/mock " + string(script)}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL()+"/v1/sessions/"+s.ID+"/messages", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.Token())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var turn client.Turn
	_ = json.NewDecoder(resp.Body).Decode(&turn)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("message: %s", resp.Status)
	}
	if tp := resp.Header.Get("Traceparent"); !strings.HasPrefix(tp, "00-"+clientTrace+"-") {
		t.Errorf("response traceparent %q is not in the client's trace", tp)
	}
	evs := waitEvent(t, c, s.ID, 0, event.TypePermissionRequested)
	p, _ := evs[len(evs)-1].Decode()
	if _, err := c.AnswerPermission(ctx, s.ID, p.(*event.PermissionRequested).ID, client.PermissionAnswer{Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
	if _, err := c.GetSession(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if sandboxed {
		// An execution's sandbox: created in the request (no pool).
		if _, err := c.Exec(ctx, client.ExecRequest{Argv: []string{"true"}}); err != nil {
			t.Fatal(err)
		}
	}

	// Nothing is sent before the shutdown (an hour's interval, a batch
	// far from full); the shutdown sends it all.
	shutdown()
	spans := rcv.Spans()
	names := tracingtest.Names(spans)
	one := func(name string) tracingtest.Span {
		t.Helper()
		got := tracingtest.Named(spans, name)
		if len(got) != 1 {
			t.Fatalf("%d spans named %q; got %q", len(got), name, names)
		}
		return got[0]
	}
	parentName := func(s tracingtest.Span) string {
		p, ok := tracingtest.ParentOf(spans, s)
		if !ok {
			return fmt.Sprintf("(none: %x)", s.ParentSpanId)
		}
		return p.Name
	}

	msg := one("POST /v1/sessions/{id}/messages")
	if fmt.Sprintf("%x", msg.TraceId) != clientTrace || fmt.Sprintf("%x", msg.ParentSpanId) != clientSpan || msg.Flags&0x200 == 0 {
		t.Errorf("the message's span is not the child of the client's: trace %x parent %x flags %#x", msg.TraceId, msg.ParentSpanId, msg.Flags)
	}
	if msg.Kind != 2 || msg.Attr("http.route") != "/v1/sessions/{id}/messages" || msg.Attr("http.response.status_code") != "202" && msg.Attr("http.response.status_code") != "200" {
		t.Errorf("message span: kind %v route %q status %q", msg.Kind, msg.Attr("http.route"), msg.Attr("http.response.status_code"))
	}
	if msg.Attr("url.path") != "/v1/sessions/"+s.ID+"/messages" {
		t.Errorf("url.path %q", msg.Attr("url.path"))
	}
	turnSpan := one("agentbox.turn")
	if parentName(turnSpan) != msg.Name || turnSpan.Attr("agentbox.turn.id") != turn.TurnID || turnSpan.Attr("agentbox.turn.stop_reason") != "end_turn" {
		t.Errorf("turn span: parent %q turn %q (want %q) stop %q", parentName(turnSpan), turnSpan.Attr("agentbox.turn.id"), turn.TurnID, turnSpan.Attr("agentbox.turn.stop_reason"))
	}
	tool := one("agentbox.tool_call")
	if parentName(tool) != "agentbox.turn" || tool.Attr("gen_ai.tool.name") != "Read" || tool.Attr("agentbox.item.status") != "completed" {
		t.Errorf("tool span: parent %q tool %q status %q", parentName(tool), tool.Attr("gen_ai.tool.name"), tool.Attr("agentbox.item.status"))
	}
	perm := one("agentbox.permission.wait")
	if parentName(perm) != "agentbox.turn" || perm.Attr("agentbox.permission.decision") != "allow" || perm.Attr("agentbox.permission.decided_by") != "user" {
		t.Errorf("permission span: parent %q decision %q by %q", parentName(perm), perm.Attr("agentbox.permission.decision"), perm.Attr("agentbox.permission.decided_by"))
	}
	for _, in := range []tracingtest.Span{perm, tool} {
		if in.StartTimeUnixNano < turnSpan.StartTimeUnixNano || in.EndTimeUnixNano > turnSpan.EndTimeUnixNano {
			t.Errorf("span %s is not within its turn's time", in.Name)
		}
	}
	one("POST /v1/sessions/{id}/permissions/{pid}")
	if sandboxed {
		sbs := tracingtest.Named(spans, "agentbox.sandbox.create")
		var parents []string
		for _, sb := range sbs {
			parents = append(parents, parentName(sb))
			if sb.Attr("agentbox.sandbox.runtime") != "process" || sb.Attr("agentbox.sandbox.id") == "" || sb.Status != nil {
				t.Errorf("sandbox span: runtime %q id %q status %v", sb.Attr("agentbox.sandbox.runtime"), sb.Attr("agentbox.sandbox.id"), sb.Status)
			}
		}
		if strings.Join(parents, ",") != "POST /v1/sessions,POST /v1/exec" {
			t.Errorf("sandbox spans' parents %q, want the session's create and the exec", parents)
		}
	} else {
		t.Log("this host cannot build sandboxes: no sandbox span checked")
	}
	for _, sp := range spans {
		if strings.Contains(sp.Name, s.ID) || strings.Contains(sp.Name, turn.TurnID) {
			t.Errorf("span name %q holds an id", sp.Name)
		}
		if sp.Resource["service.name"] != "agentbox-test" {
			t.Errorf("resource %v", sp.Resource)
		}
	}
	if got := rcv.Requests()[0].Header.Get("Authorization"); got != "Bearer "+secret {
		t.Errorf("the collector got Authorization %q", got)
	}
	if strings.Contains(logs.String(), secret) {
		t.Errorf("a header value is in the log")
	}
	if !strings.Contains(logs.String(), "exporting traces over OTLP/HTTP") {
		t.Errorf("the start does not say where traces go")
	}
}

// TestNoTracesWhenNotConfigured: without an endpoint, no tracer (so no
// exporter goroutine) and the API handler is not wrapped.
func TestNoTracesWhenNotConfigured(t *testing.T) {
	d, err := New(t.Context(), Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: slog.New(slog.DiscardHandler),
		Getenv: func(k string) (string, bool) {
			// Everything else a shell might have: still no endpoint.
			v, ok := map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}[k]
			return v, ok
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Shutdown(context.Background()) }()
	if d.tracer != nil {
		t.Fatal("a tracer without an endpoint")
	}
	if _, ok := d.srv.Handler.(http.HandlerFunc); ok {
		t.Error("the API handler is wrapped although tracing is off")
	}
}

// TestTracingConfigRefused: an OTLP protocol other than http/protobuf is
// refused at start, naming it.
func TestTracingConfigRefused(t *testing.T) {
	_, err := New(t.Context(), Config{
		Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: slog.New(slog.DiscardHandler),
		OTLPEndpoint: "http://127.0.0.1:4318",
		Getenv: func(k string) (string, bool) {
			v, ok := map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}[k]
			return v, ok
		},
	})
	if err == nil || !strings.Contains(err.Error(), `OTEL_EXPORTER_OTLP_PROTOCOL="grpc"`) {
		t.Fatalf("New = %v, want the grpc protocol refused", err)
	}
}

// TestTracesRealAgent: the Claude Code CLI, against the fake LLM's
// permission scenario (one shell call, which the CLI asks permission
// for), gives the turn, tool-call and permission-wait spans of a real
// agent, linked to the request that sent the message.
func TestTracesRealAgent(t *testing.T) {
	agenttest.RequireInstalled(t, claude.Name)
	llm, err := fakellm.Start(t.Context(), fakellm.Options{Default: fakellm.ScenarioPermission})
	if err != nil {
		t.Fatal(err)
	}
	defer llm.Close()
	rcv := tracingtest.NewReceiver(t)
	dataDir := t.TempDir()
	agentEnv := map[string]string{"ANTHROPIC_BASE_URL": llm.URL(), "ANTHROPIC_API_KEY": "sk-fake-traces"}
	d, err := New(t.Context(), Config{
		Listen: "127.0.0.1:0", DataDir: dataDir, OTLPEndpoint: rcv.URL,
		Agents: Agents(dataDir, func(k string) string { return agentEnv[k] }, nil),
		Getenv: func(string) (string, bool) { return "", false },
		Log:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	c, shutdown := serveTraced(t, d)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: claude.Name, PermissionMode: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SendMessage(ctx, s.ID, client.SendMessage{Content: []event.ContentPart{event.TextPart("approve this")}}); err != nil {
		t.Fatal(err)
	}
	evs := waitEvent(t, c, s.ID, 0, event.TypePermissionRequested)
	p, _ := evs[len(evs)-1].Decode()
	if _, err := c.AnswerPermission(ctx, s.ID, p.(*event.PermissionRequested).ID, client.PermissionAnswer{Decision: "allow"}); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, c, s.ID, evs[len(evs)-1].Seq, event.TypeTurnCompleted)
	shutdown()

	spans := rcv.Spans()
	parentName := func(s tracingtest.Span) string {
		p, _ := tracingtest.ParentOf(spans, s)
		return p.Name
	}
	turns := tracingtest.Named(spans, "agentbox.turn")
	if len(turns) != 1 || parentName(turns[0]) != "POST /v1/sessions/{id}/messages" || turns[0].Attr("agentbox.agent") != claude.Name {
		t.Fatalf("turn spans %d in %q", len(turns), tracingtest.Names(spans))
	}
	perms := tracingtest.Named(spans, "agentbox.permission.wait")
	if len(perms) != 1 || parentName(perms[0]) != "agentbox.turn" || perms[0].Attr("agentbox.permission.decision") != "allow" {
		t.Errorf("permission spans %+v", perms)
	}
	var kinds []string
	for _, tool := range tracingtest.Named(spans, "agentbox.tool_call") {
		if parentName(tool) != "agentbox.turn" {
			t.Errorf("tool span %s parent %q", tool.Attr("agentbox.item.kind"), parentName(tool))
		}
		kinds = append(kinds, tool.Attr("agentbox.item.kind")+"/"+tool.Attr("agentbox.item.status"))
	}
	if !slices.Contains(kinds, "command/completed") {
		t.Errorf("tool spans %q, want the completed shell command", kinds)
	}
}

// serveTraced serves d until t ends and returns its client and a shutdown
// that may be called earlier (the spans arrive at shutdown).
func serveTraced(t *testing.T, d *Daemon) (*client.Client, func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.Serve(context.Background()) }()
	shutdown := sync.OnceFunc(func() {
		if err := d.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-done
	})
	t.Cleanup(shutdown)
	c, err := client.New(d.URL(), client.WithToken(d.Token()))
	if err != nil {
		t.Fatal(err)
	}
	return c, shutdown
}
