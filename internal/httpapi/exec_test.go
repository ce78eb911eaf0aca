package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/execution/exectest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// testResolve knows the presets exec-default and unenforceable, refuses
// "refused", and fails a policy source with a positioned error.
func testResolve(ref execution.PolicyRef) (execution.Policy, error) {
	switch {
	case ref.Source != "":
		return nil, fmt.Errorf("%w: %s:3:5: resources.memory: expected a size such as 512MiB", execution.ErrPolicyInvalid, ref.Name)
	case len(ref.Inline) > 0:
		var in struct {
			Output int64 `json:"output"`
		}
		if err := json.Unmarshal(ref.Inline, &in); err != nil {
			return nil, fmt.Errorf("%w: %w", execution.ErrPolicyInvalid, err)
		}
		return &exectest.Policy{Runtime: "host", Key: "inline", Limits: sandbox.Limits{OutputBytes: in.Output}}, nil
	}
	switch ref.Preset {
	case "exec-default":
		return &exectest.Policy{Runtime: "host", Key: "default", Limits: sandbox.Limits{Timeout: time.Minute}}, nil
	case "unenforceable":
		return &exectest.Policy{Runtime: "broken", Key: "broken"}, nil
	case "refused":
		return nil, fmt.Errorf("%w: network host is not allowed by the global policy", execution.ErrPolicyDenied)
	}
	return nil, fmt.Errorf("%w: unknown preset %q", execution.ErrPolicyInvalid, ref.Preset)
}

// newExecHarness serves the API with an execution service over the host
// runtime double.
func newExecHarness(t *testing.T, maxConcurrent int) (*harness, *exectest.Runtime) {
	t.Helper()
	rt := &exectest.Runtime{}
	reg := sandbox.NewRegistry()
	reg.Register(rt)
	reg.Register(&exectest.Runtime{Key: "broken", CreateErr: fmt.Errorf("%w: landlock is not available (kernel without CONFIG_SECURITY_LANDLOCK)", sandbox.ErrUnenforceable)})
	svc, err := execution.New(execution.Options{Runtimes: reg, Resolve: testResolve, WorkDir: t.TempDir(), MaxConcurrent: maxConcurrent})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Config{Exec: svc})
	// Registered after the harness: cleanups run in reverse, so the
	// service closes before the server does.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Close(ctx); err != nil {
			t.Error(err)
		}
		if n := rt.Open(); n != 0 {
			t.Errorf("%d sandboxes left open", n)
		}
	})
	return h, rt
}

func TestExecDisabled(t *testing.T) {
	h := newHarness(t, Config{})
	for _, r := range []response{
		h.do("POST", "/v1/exec", `{"argv":["true"]}`),
		h.do("POST", "/v1/exec/stream", `{"argv":["true"]}`),
		h.do("GET", "/v1/processes", ""),
		h.do("GET", "/v1/processes/x/stream", ""),
	} {
		p := r.problem(t, 503, client.ProblemUnavailable)
		if !strings.Contains(p.Detail, "not enabled") {
			t.Fatalf("detail = %q", p.Detail)
		}
	}
}

func TestExecRoute(t *testing.T) {
	h, _ := newExecHarness(t, 0)
	var res client.ExecResult
	h.do("POST", "/v1/exec", `{"language":"python","code":"import sys; print(sys.stdin.read() * 2); sys.exit(4)","stdin":"ab"}`).ok(t, 200, &res)
	if res.ExitCode != 4 || res.Stdout != "abab\n" || res.Stderr != "" || res.Truncated || res.Error != nil ||
		res.Violations == nil || res.Sandbox.Runtime != "host" || res.Sandbox.ID == "" {
		t.Fatalf("result = %+v", res)
	}
	// The raw JSON has the documented names.
	r := h.do("POST", "/v1/exec", `{"argv":["sh","-c","cat f; exit 1"],"files":{"f":"data"},"timeout_ms":60000}`)
	var raw map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"exit_code", "stdout", "stderr", "truncated", "duration_ms", "resources", "violations", "sandbox"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("result lacks %q: %s", k, r.body)
		}
	}
	if raw["stdout"] != "data" || raw["exit_code"] != float64(1) {
		t.Fatalf("result = %s", r.body)
	}
	// Limits are results, not errors.
	h.do("POST", "/v1/exec", `{"language":"bash","code":"yes","policy":{"output":100}}`).ok(t, 200, &res)
	if !res.Truncated || len(res.Stdout) != 100 || res.Error == nil || res.Error.Code != client.ExecOutput ||
		len(res.Violations) != 1 || res.Violations[0].Kind != "resource" {
		t.Fatalf("output limit: %+v", res)
	}
}

func TestExecRouteProblems(t *testing.T) {
	h, _ := newExecHarness(t, 0)
	tests := []struct {
		name, body string
		status     int
		typ        string
		detail     string
	}{
		{"empty", `{}`, 422, client.ProblemValidation, ""},
		{"both", `{"language":"bash","code":"true","argv":["true"]}`, 422, client.ProblemValidation, ""},
		{"code with argv", `{"argv":["true"],"code":"x"}`, 422, client.ProblemValidation, ""},
		{"language", `{"language":"cobol","code":"x"}`, 422, client.ProblemValidation, ""},
		{"policy shape", `{"argv":["true"],"policy":5}`, 422, client.ProblemValidation, ""},
		{"policy twice", `{"argv":["true"],"policy":"strict","policy_source":{"name":"p.yaml","text":"x"}}`, 422, client.ProblemValidation, ""},
		{"file escape", `{"argv":["true"],"files":{"../x":""}}`, 422, client.ProblemValidation, "workspace"},
		{"unknown preset", `{"argv":["true"],"policy":"nope"}`, 422, client.ProblemPolicy, `unknown preset "nope"`},
		{"policy source", `{"argv":["true"],"policy_source":{"name":"p.yaml","text":"x"}}`, 422, client.ProblemPolicy, "p.yaml:3:5: resources.memory"},
		{"refused", `{"argv":["true"],"policy":"refused"}`, 422, client.ProblemPolicy, "global policy"},
		{"unenforceable", `{"argv":["true"],"policy":"unenforceable"}`, 422, client.ProblemPolicy, "landlock"},
		{"not json", `nope`, 400, client.ProblemBadRequest, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, path := range []string{"/v1/exec", "/v1/exec/stream"} {
				p := h.do("POST", path, tt.body).problem(t, tt.status, tt.typ)
				if !strings.Contains(p.Detail+fmt.Sprint(p.Errors), tt.detail) {
					t.Fatalf("%s: problem %+v does not mention %q", path, p, tt.detail)
				}
			}
		})
	}
	h.do("POST", "/v1/exec", `{"argv":["true"]}`, "Content-Type", "text/plain").problem(t, 415, client.ProblemUnsupportedMediaType)
}

func TestExecConcurrencyLimit(t *testing.T) {
	h, _ := newExecHarness(t, 1)
	var p client.Process
	h.do("POST", "/v1/processes", `{"argv":["sleep","60"]}`).ok(t, 201, &p)
	for _, r := range []response{
		h.do("POST", "/v1/exec", `{"argv":["true"]}`),
		h.do("POST", "/v1/exec/stream", `{"argv":["true"]}`),
		h.do("POST", "/v1/processes", `{"argv":["true"]}`),
	} {
		r.problem(t, 429, client.ProblemTooManyRequests)
		if r.Header.Get("Retry-After") != "1" {
			t.Fatalf("Retry-After = %q", r.Header.Get("Retry-After"))
		}
	}
	h.do("DELETE", "/v1/processes/"+p.ID, "").ok(t, 204, nil)
	h.do("POST", "/v1/exec", `{"argv":["true"]}`).ok(t, 200, &client.ExecResult{})
}

// postStream posts to an SSE route and returns its frames to the end.
func (h *harness) postStream(path, body string) []sseFrame {
	h.t.Helper()
	req, err := http.NewRequestWithContext(h.t.Context(), "POST", h.srv.URL+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.hc.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		h.t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ctx, cancel := context.WithCancel(h.t.Context())
	c := &sseConn{t: h.t, resp: resp, frames: make(chan sseFrame, 1024), ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go c.read()
	defer c.close()
	var out []sseFrame
	for {
		f, ok := c.next(60 * time.Second)
		if !ok {
			return out
		}
		out = append(out, f)
	}
}

func TestExecStreamRoute(t *testing.T) {
	h, _ := newExecHarness(t, 0)
	frames := h.postStream("/v1/exec/stream", `{"language":"bash","code":"echo one; sleep 0.2; echo two >&2; echo three"}`)
	if len(frames) < 3 || frames[0].event != "start" || frames[len(frames)-1].event != "result" {
		t.Fatalf("frames = %+v", frames)
	}
	var out, errOut strings.Builder
	var seq int64
	for _, f := range frames[1 : len(frames)-1] {
		var ch client.OutputChunk
		if err := json.Unmarshal([]byte(f.data), &ch); err != nil {
			t.Fatal(err)
		}
		if ch.Stream != f.event || ch.Seq != seq+1 {
			t.Fatalf("chunk %+v in a %s event after seq %d", ch, f.event, seq)
		}
		seq = ch.Seq
		if ch.Stream == "stdout" {
			out.WriteString(ch.Data)
		} else {
			errOut.WriteString(ch.Data)
		}
	}
	var res client.ExecResult
	if err := json.Unmarshal([]byte(frames[len(frames)-1].data), &res); err != nil {
		t.Fatal(err)
	}
	if out.String() != "one\nthree\n" || errOut.String() != "two\n" || res.Stdout != out.String() || res.ExitCode != 0 {
		t.Fatalf("streamed %q / %q; result %+v", out.String(), errOut.String(), res)
	}
}

func TestProcessRoutes(t *testing.T) {
	h, rt := newExecHarness(t, 0)
	var p client.Process
	r := h.do("POST", "/v1/processes", `{"argv":["cat"],"stdin":true,"tag":"echo"}`)
	r.ok(t, 201, &p)
	if r.Header.Get("Location") != "/v1/processes/"+p.ID || p.Status != client.ProcessRunning || !p.StdinOpen || p.Tag != "echo" || p.ExitCode != nil {
		t.Fatalf("created %+v (Location %q)", p, r.Header.Get("Location"))
	}
	h.do("POST", "/v1/processes", `{"argv":["true"],"tag":"echo"}`).problem(t, 409, client.ProblemConflict)

	var got client.Process
	h.do("GET", "/v1/processes/echo", "").ok(t, 200, &got)
	if got.ID != p.ID {
		t.Fatalf("by tag: %+v", got)
	}
	stream := h.openStream("/v1/processes/echo/stream")
	h.do("POST", "/v1/processes/echo/stdin", `{"data":"hello\n"}`).ok(t, 204, nil)
	h.do("POST", "/v1/processes/"+p.ID+"/stdin", `{"data":"bye\n","close":true}`).ok(t, 204, nil)

	var text strings.Builder
	var exit client.Process
	var last int64
	for exit.ID == "" {
		f, ok := stream.next(30 * time.Second)
		if !ok {
			t.Fatalf("the stream ended early; got %q", text.String())
		}
		if f.data == "" {
			continue // retry and pings
		}
		seq, err := strconv.ParseInt(f.id, 10, 64)
		if err != nil || seq <= last {
			t.Fatalf("id %q after %d", f.id, last)
		}
		last = seq
		switch f.event {
		case "stdout":
			var ch client.OutputChunk
			_ = json.Unmarshal([]byte(f.data), &ch)
			text.WriteString(ch.Data)
		case "exit":
			if err := json.Unmarshal([]byte(f.data), &exit); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("event %+v", f)
		}
	}
	if _, ok := stream.next(5 * time.Second); ok {
		t.Fatal("the stream went on after the exit event")
	}
	if text.String() != "hello\nbye\n" || exit.Status != client.ProcessExited || *exit.ExitCode != 0 || exit.LastSeq != last {
		t.Fatalf("output %q, exit %+v", text.String(), exit)
	}

	var waited client.Process
	h.do("POST", "/v1/processes/echo/wait", "").ok(t, 200, &waited)
	if waited.Status != client.ProcessExited || waited.EndedAt == nil || waited.Resources == nil {
		t.Fatalf("wait = %+v", waited)
	}
	// Resume after the first event: everything after it, then the end.
	resumed := h.openStream("/v1/processes/"+p.ID+"/stream", "Last-Event-ID", "1")
	var ids []string
	for {
		f, ok := resumed.next(10 * time.Second)
		if !ok {
			break
		}
		if f.data != "" {
			ids = append(ids, f.id)
		}
	}
	if len(ids) == 0 || ids[0] != "2" || ids[len(ids)-1] != strconv.FormatInt(last, 10) {
		t.Fatalf("resumed ids %v, want 2..%d", ids, last)
	}

	h.do("POST", "/v1/processes/echo/signal", `{"signal":"SIGTERM"}`).problem(t, 409, client.ProblemConflict)
	h.do("POST", "/v1/processes/echo/stdin", `{"data":"x"}`).problem(t, 409, client.ProblemConflict)
	h.do("GET", "/v1/processes/echo/stream?after=x", "").problem(t, 422, client.ProblemValidation)

	var list client.ProcessList
	h.do("GET", "/v1/processes", "").ok(t, 200, &list)
	if len(list.Processes) != 1 || list.Processes[0].ID != p.ID {
		t.Fatalf("list = %+v", list)
	}
	h.do("DELETE", "/v1/processes/echo", "").ok(t, 204, nil)
	for _, path := range []string{"/v1/processes/echo", "/v1/processes/echo/stream"} {
		h.do("GET", path, "").problem(t, 404, client.ProblemNotFound)
	}
	h.do("POST", "/v1/processes/echo/wait", "").problem(t, 404, client.ProblemNotFound)
	if n := rt.Open(); n != 0 {
		t.Fatalf("%d sandboxes open", n)
	}
}

func TestProcessSignalAndWaitTimeout(t *testing.T) {
	h, _ := newExecHarness(t, 0)
	var p client.Process
	h.do("POST", "/v1/processes", `{"argv":["sleep","60"]}`).ok(t, 201, &p)
	var w client.Process
	h.do("POST", "/v1/processes/"+p.ID+"/wait?timeout_ms=50", "").ok(t, 200, &w)
	if w.Status != client.ProcessRunning {
		t.Fatalf("wait with a timeout: %+v", w)
	}
	h.do("POST", "/v1/processes/"+p.ID+"/signal", `{"signal":"SIGFOO"}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", "/v1/processes/"+p.ID+"/signal", `{"signal":"term"}`).ok(t, 204, nil)
	h.do("POST", "/v1/processes/"+p.ID+"/wait", "").ok(t, 200, &w)
	if w.Status != client.ProcessExited || w.Signal != "terminated" || *w.ExitCode != -1 {
		t.Fatalf("after SIGTERM: %+v", w)
	}
	h.do("POST", "/v1/processes", `{"argv":[]}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", "/v1/processes", `{"argv":["true"],"cwd":"../x"}`).problem(t, 422, client.ProblemValidation)
}

func TestExecOpenAPI(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(specDocument())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"/v1/exec", "/v1/exec/stream", "/v1/processes", "/v1/processes/{id}", "/v1/processes/{id}/stream",
		"/v1/processes/{id}/stdin", "/v1/processes/{id}/signal", "/v1/processes/{id}/wait",
	} {
		if doc.Paths.Find(p) == nil {
			t.Errorf("path %s is not documented", p)
		}
	}
	for _, op := range []*openapi3.Operation{doc.Paths.Find("/v1/exec/stream").Post, doc.Paths.Find("/v1/processes/{id}/stream").Get} {
		if op.Responses.Status(200).Value.Content.Get("text/event-stream") == nil {
			t.Errorf("%s is not documented as text/event-stream", op.OperationID)
		}
	}
	if doc.Paths.Find("/v1/exec").Post.Responses.Status(429) == nil {
		t.Error("the 429 of /v1/exec is not documented")
	}
}

// FuzzPolicyRef: a request's policy field is a preset name, an object or
// nothing, and anything else is refused.
func FuzzPolicyRef(f *testing.F) {
	for _, s := range []string{``, `null`, `"strict"`, `""`, `{"version":1}`, `5`, `[1]`, `"a\"b"`, ` {} `, `"\u0000"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		ref, err := policyRef(json.RawMessage(raw), nil)
		if err != nil {
			return
		}
		switch {
		case ref.Preset != "":
			if len(ref.Inline) > 0 {
				t.Fatalf("%q: both a preset and an inline policy", raw)
			}
			var name string
			if json.Unmarshal([]byte(raw), &name) != nil || name != ref.Preset {
				t.Fatalf("%q: preset %q", raw, ref.Preset)
			}
		case len(ref.Inline) > 0:
			if ref.Inline[0] != '{' {
				t.Fatalf("%q: inline %q is not an object", raw, ref.Inline)
			}
		default:
			if s := strings.TrimSpace(raw); s != "" && s != "null" {
				t.Fatalf("%q: accepted as no policy", raw)
			}
		}
	})
}

// TestProcessTerminalRoutes: a tty process through the API, resize and
// its problems; the terminal itself is tested in internal/execution.
func TestProcessTerminalRoutes(t *testing.T) {
	h, _ := newExecHarness(t, 0)
	var p client.Process
	h.do("POST", "/v1/processes", `{"argv":["sh","-c","stty size; read x; stty size"],"tty":true,"rows":30,"cols":90}`).ok(t, 201, &p)
	if !p.TTY || p.Rows != 30 || p.Cols != 90 || !p.StdinOpen {
		t.Fatalf("created %+v", p)
	}
	// The first stty must have run before the resize: read up to its line.
	var text strings.Builder
	stream := h.openStream("/v1/processes/" + p.ID + "/stream")
	read := func(until string) {
		t.Helper()
		for !strings.Contains(text.String(), until) {
			f, ok := stream.next(30 * time.Second)
			if !ok {
				return
			}
			if f.event == "stderr" {
				t.Fatalf("a terminal process has one stream: %+v", f)
			}
			if f.event == "stdout" {
				var ch client.OutputChunk
				_ = json.Unmarshal([]byte(f.data), &ch)
				text.WriteString(ch.Data)
			}
		}
	}
	read("30 90\r\n")
	var piped client.Process
	h.do("POST", "/v1/processes", `{"argv":["sleep","60"]}`).ok(t, 201, &piped)

	h.do("POST", "/v1/processes", `{"argv":["true"],"rows":30}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", "/v1/processes", `{"argv":["true"],"tty":true,"rows":100000}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", "/v1/processes/"+piped.ID+"/resize", `{"rows":40,"cols":100}`).problem(t, 409, client.ProblemConflict)
	h.do("POST", "/v1/processes/"+p.ID+"/resize", `{"rows":0,"cols":100}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", "/v1/processes/"+p.ID+"/resize", `{"rows":40,"cols":5000}`).problem(t, 422, client.ProblemValidation)
	h.do("POST", "/v1/processes/prc_unknown/resize", `{"rows":40,"cols":100}`).problem(t, 404, client.ProblemNotFound)
	h.do("POST", "/v1/processes/"+p.ID+"/stdin", `{"close":true}`).problem(t, 409, client.ProblemConflict)

	h.do("POST", "/v1/processes/"+p.ID+"/resize", `{"rows":40,"cols":100}`).ok(t, 204, nil)
	var got client.Process
	h.do("GET", "/v1/processes/"+p.ID, "").ok(t, 200, &got)
	if got.Rows != 40 || got.Cols != 100 {
		t.Fatalf("after resize %+v", got)
	}
	h.do("POST", "/v1/processes/"+p.ID+"/stdin", `{"data":"\n"}`).ok(t, 204, nil)
	h.do("POST", "/v1/processes/"+p.ID+"/wait", "").ok(t, 200, &got)
	read("\x00") // to the stream's end
	if text.String() != "30 90\r\n\r\n40 100\r\n" {
		t.Fatalf("output %q", text.String())
	}
	h.do("POST", "/v1/processes/"+p.ID+"/resize", `{"rows":40,"cols":100}`).problem(t, 409, client.ProblemConflict)
}
