package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// ExecService is what the API needs for code execution and processes;
// *execution.Service implements it. A nil ExecService in Config answers
// those routes with 503.
type ExecService interface {
	Exec(ctx context.Context, req execution.Request) (execution.Result, error)
	ExecStream(ctx context.Context, req execution.Request, hooks execution.Hooks) (execution.Result, error)
	Start(ctx context.Context, req execution.StartRequest) (execution.ProcessInfo, error)
	List() []execution.ProcessInfo
	Get(idOrTag string) (execution.ProcessInfo, error)
	Subscribe(ctx context.Context, idOrTag string, after int64) (<-chan execution.Event, error)
	SendStdin(ctx context.Context, idOrTag string, data []byte) error
	CloseStdin(idOrTag string) error
	Resize(idOrTag string, rows, cols int) error
	Signal(idOrTag string, sig os.Signal) error
	Wait(ctx context.Context, idOrTag string) (execution.ProcessInfo, error)
	Remove(ctx context.Context, idOrTag string) error
}

var _ ExecService = (*execution.Service)(nil)

// errExecDisabled answers the exec routes of a daemon without an
// ExecService.
var errExecDisabled = newProblem(http.StatusServiceUnavailable, client.ProblemUnavailable, "Code execution is not enabled on this daemon.")

// retryAfterBusy is the Retry-After of a 429: tasks are short, as a rule.
const retryAfterBusy = "1"

// Default and longest server-side wait of POST /v1/processes/{id}/wait.
const (
	defaultWait = 30 * time.Second
	maxWait     = 5 * time.Minute
)

type execInput struct{ Body client.ExecRequest }

// check enforces what the schema cannot: exactly one of language and
// argv, code only with language, one way to name the policy.
func (in *execInput) check() []error {
	b := in.Body
	var errs []error
	switch {
	case (b.Language == "") == (len(b.Argv) == 0):
		errs = append(errs, &fieldError{Location: "body", Message: "exactly one of language (with code) and argv must be set"})
	case len(b.Argv) > 0 && b.Code != "":
		errs = append(errs, &fieldError{Location: "body.code", Message: "code goes with language, not with argv"})
	case len(b.Argv) > 0 && b.Argv[0] == "":
		errs = append(errs, &fieldError{Location: "body.argv[0]", Message: "the command is empty"})
	}
	return append(errs, checkPolicy(b.Policy, b.PolicySource)...)
}

type execOutput struct{ Body client.ExecResult }

type startProcessInput struct{ Body client.StartProcess }

func (in *startProcessInput) check() []error {
	if len(in.Body.Argv) == 0 || in.Body.Argv[0] == "" {
		return []error{&fieldError{Location: "body.argv[0]", Message: "the command is empty"}}
	}
	return checkPolicy(in.Body.Policy, in.Body.PolicySource)
}

type processCreatedOutput struct {
	Location string `header:"Location" doc:"URL of the new process."`
	Body     client.Process
}

type processOutput struct{ Body client.Process }

type processListOutput struct{ Body client.ProcessList }

type processPath struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Process ID or tag (the newest process with that tag)."`
}

type processStdinInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Process ID or tag."`
	Body client.ProcessInput
}

type processSignalInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Process ID or tag."`
	Body client.ProcessSignal
}

type processResizeInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Process ID or tag."`
	Body client.TerminalSize
}

type processWaitInput struct {
	ID        string `path:"id" minLength:"1" maxLength:"128" doc:"Process ID or tag."`
	TimeoutMS int64  `query:"timeout_ms" minimum:"0" maximum:"300000" doc:"How long to wait at most (default 30000); the answer then describes the process still running."`
}

type processStreamInput struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Process ID or tag."`
	ResumeParams
}

// checkPolicy accepts a policy that is a preset name or an object, not
// both a policy and a policy source.
func checkPolicy(raw json.RawMessage, src *client.PolicySource) []error {
	if _, err := policyRef(raw, nil); err != nil {
		return []error{&fieldError{Location: "body.policy", Message: err.Error()}}
	}
	if src != nil && len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		return []error{&fieldError{Location: "body.policy_source", Message: "set policy or policy_source, not both"}}
	}
	return nil
}

var errPolicyShape = errors.New("expected a preset name (a string) or a policy object")

// policyRef reads the request's policy fields.
func policyRef(raw json.RawMessage, src *client.PolicySource) (execution.PolicyRef, error) {
	if src != nil {
		return execution.PolicyRef{Name: src.Name, Source: src.Text}, nil
	}
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return execution.PolicyRef{}, nil
	case raw[0] == '"':
		var name string
		if err := json.Unmarshal(raw, &name); err != nil || name == "" {
			return execution.PolicyRef{}, errPolicyShape
		}
		return execution.PolicyRef{Preset: name}, nil
	case raw[0] == '{':
		return execution.PolicyRef{Inline: raw}, nil
	}
	return execution.PolicyRef{}, errPolicyShape
}

func toExecRequest(b client.ExecRequest) execution.Request {
	ref, _ := policyRef(b.Policy, b.PolicySource) // checked in check
	return execution.Request{
		Language: b.Language, Code: b.Code, Argv: b.Argv,
		Stdin: []byte(b.Stdin), Files: toFiles(b.Files), Policy: ref,
		Timeout:  time.Duration(b.TimeoutMS) * time.Millisecond,
		Provider: b.Provider,
	}
}

func toFiles(m map[string]string) map[string][]byte {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out
}

func toExecError(e *execution.ErrorInfo) *client.ExecError {
	if e == nil {
		return nil
	}
	return &client.ExecError{Code: e.Code, Message: e.Message}
}

func toViolations(vs []sandbox.Violation) []client.Violation {
	out := make([]client.Violation, len(vs))
	for i, v := range vs {
		out[i] = client.Violation{Kind: v.Kind, Detail: v.Detail, Target: v.Target, Host: v.Host, Port: v.Port, Rule: v.Rule, Action: v.Action}
		if v.Count > 1 {
			first, last := v.First, v.Last
			out[i].Count, out[i].FirstAt, out[i].LastAt = v.Count, &first, &last
		}
		if p := v.Process; p != nil {
			out[i].Process = &client.SandboxProcess{Pid: p.Pid, Name: p.Name, CommandLine: p.CommandLine}
		}
	}
	return out
}

func toSandboxInfo(in execution.SandboxInfo) client.SandboxInfo {
	return client.SandboxInfo{ID: in.ID, Runtime: in.Runtime, Mechanisms: in.Mechanisms, Degraded: in.Degraded, Warm: in.Warm, Provider: in.Provider}
}

func toExecResult(r execution.Result) client.ExecResult {
	return client.ExecResult{
		ExitCode: r.ExitCode, Signal: r.Signal,
		Stdout: string(r.Stdout), Stderr: string(r.Stderr), Truncated: r.Truncated,
		DurationMS: r.Duration.Milliseconds(),
		Resources:  client.Resources{MaxRSS: r.Usage.MaxRSSBytes, CPUMS: r.Usage.CPUMillis},
		Violations: toViolations(r.Violations),
		Error:      toExecError(r.Error),
		Sandbox:    toSandboxInfo(r.Sandbox),
		Adjusted:   toAdjustments(r.Adjusted),
	}
}

func toAdjustments(in []policy.Adjustment) []client.LimitAdjustment {
	var out []client.LimitAdjustment
	for _, a := range in {
		out = append(out, client.LimitAdjustment{Field: a.Field, Requested: a.Requested, Applied: a.Applied, By: a.By})
	}
	return out
}

func toProcess(in execution.ProcessInfo) client.Process {
	p := client.Process{
		ID: in.ID, Tag: in.Tag, Argv: nonNil(in.Argv), Pid: in.Pid, Status: client.ProcessRunning,
		StdinOpen: in.StdinOpen, TTY: in.TTY, Rows: in.Rows, Cols: in.Cols, StartedAt: in.StartedAt.UTC(), LastSeq: in.LastSeq, Sandbox: toSandboxInfo(in.Sandbox),
		Adjusted: toAdjustments(in.Adjusted),
	}
	if !in.Running {
		ended, code := in.EndedAt.UTC(), in.ExitCode
		p.Status, p.EndedAt, p.ExitCode, p.Signal = client.ProcessExited, &ended, &code, in.Signal
		p.Error = toExecError(in.Error)
		p.Resources = &client.Resources{MaxRSS: in.Usage.MaxRSSBytes, CPUMS: in.Usage.CPUMillis}
		p.Violations = toViolations(in.Violations)
	}
	return p
}

// execErrs are the errors of the operations that start a sandbox.
func execErrs(more ...int) []int {
	return append(errs(http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType,
		http.StatusTooManyRequests, http.StatusServiceUnavailable), more...)
}

func execOps() []route {
	return []route{
		&op[execInput, execOutput]{h: (*server).exec, opSpec: opSpec{
			ID: "exec", Method: http.MethodPost, Path: "/v1/exec", Tag: "exec",
			Summary: "Run code in a sandbox",
			Description: "Runs code (python, node or bash) or a command in a fresh sandbox under a policy and answers when it has ended. " +
				"Limits the process hits are reported in error (timeout, memory_limit_exceeded, pids_limit_exceeded, disk_limit_exceeded, files_limit_exceeded, output_limit_exceeded); " +
				"a policy that is invalid, refused by the operator's global policy or not enforceable here is a 422 policy problem. " +
				"With provider, the code runs in a fresh sandbox of that provider (destroyed afterwards) through the agentbox daemon inside it; what neither can enforce is a 422 provider-unsupported, a failing provider a 502. " +
				"Beyond the concurrency limit the answer is 429 with Retry-After. The process is killed if the client goes away.",
			Limit:       limitMessage,
			ReadTimeout: 30 * time.Second,
			Errors:      execErrs(http.StatusBadGateway),
		}},

		&op[execInput, streamOutput]{h: (*server).execStream, opSpec: opSpec{
			ID: "execStream", Method: http.MethodPost, Path: "/v1/exec/stream", Tag: "exec",
			Summary: "Run code in a sandbox, streaming its output (SSE)",
			Description: "Like POST /v1/exec, but answers with a Server-Sent Events stream once the process runs: a start event, " +
				"stdout and stderr events as output arrives, then one result event (or an error event with a problem if the execution failed), " +
				"after which the stream ends. Problems found before the start (policy, validation, 429) are ordinary problem answers. " +
				"The stream carries `: ping` comment lines while idle. It cannot be resumed; the process is killed if the client goes away.",
			Limit:       limitMessage,
			ReadTimeout: 30 * time.Second,
			Errors:      execErrs(http.StatusBadGateway),
			Stream:      streamExec,
		}},

		&op[startProcessInput, processCreatedOutput]{h: (*server).startProcess, opSpec: opSpec{
			ID: "startProcess", Method: http.MethodPost, Path: "/v1/processes", Tag: "processes",
			Summary: "Start a process in a sandbox",
			Description: "Starts a command in a fresh sandbox and returns at once. The process runs until it exits, hits its timeout or is signalled; " +
				"its output is kept in a bounded buffer to stream and replay. Beyond the concurrency limit the answer is 429 with Retry-After. " +
				"With provider, the process runs in a fresh sandbox of that provider through the agentbox daemon inside it, destroyed when the process ends; " +
				"what neither can enforce is a 422 provider-unsupported, a failing provider a 502.",
			Status:      http.StatusCreated,
			Limit:       limitMessage,
			ReadTimeout: 30 * time.Second,
			Errors:      execErrs(http.StatusConflict, http.StatusBadGateway),
		}},

		&op[struct{}, processListOutput]{h: (*server).listProcesses, opSpec: opSpec{
			ID: "listProcesses", Method: http.MethodGet, Path: "/v1/processes", Tag: "processes",
			Summary: "List processes", Description: "Running processes and those that ended recently, oldest first.",
			Errors: errs(http.StatusServiceUnavailable),
		}},

		&op[processPath, processOutput]{h: (*server).getProcess, opSpec: opSpec{
			ID: "getProcess", Method: http.MethodGet, Path: "/v1/processes/{id}", Tag: "processes",
			Summary: "Get a process", Description: "By ID or by tag.",
			Errors: errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},

		&op[processPath, struct{}]{h: (*server).deleteProcess, opSpec: opSpec{
			ID: "deleteProcess", Method: http.MethodDelete, Path: "/v1/processes/{id}", Tag: "processes",
			Summary: "Kill and forget a process", Description: "Kills the process's whole tree if it runs, waits for the end and forgets it.",
			Status: http.StatusNoContent,
			Errors: errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},

		&op[processStdinInput, struct{}]{h: (*server).processStdin, opSpec: opSpec{
			ID: "sendProcessInput", Method: http.MethodPost, Path: "/v1/processes/{id}/stdin", Tag: "processes",
			Summary: "Write to a process's standard input", Description: "Needs a process started with stdin true. With close, standard input is closed after data.",
			Status: http.StatusNoContent,
			Limit:  limitMessage,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge,
				http.StatusUnsupportedMediaType, http.StatusServiceUnavailable),
		}},

		&op[processSignalInput, struct{}]{h: (*server).signalProcess, opSpec: opSpec{
			ID: "signalProcess", Method: http.MethodPost, Path: "/v1/processes/{id}/signal", Tag: "processes",
			Summary: "Signal a process", Description: "SIGKILL kills the process's whole tree; other signals go to the process itself.",
			Status: http.StatusNoContent,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnsupportedMediaType, http.StatusServiceUnavailable),
		}},

		&op[processResizeInput, struct{}]{h: (*server).resizeProcess, opSpec: opSpec{
			ID: "resizeProcess", Method: http.MethodPost, Path: "/v1/processes/{id}/resize", Tag: "processes",
			Summary: "Resize a process's terminal",
			Description: "Sets the size of the pseudo-terminal of a process started with tty; the process gets SIGWINCH. " +
				"A process without a terminal, or one that has ended, is a 409 conflict; a size out of 1 to 1000 is a 422.",
			Status: http.StatusNoContent,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnsupportedMediaType, http.StatusServiceUnavailable),
		}},

		&op[processWaitInput, processOutput]{h: (*server).waitProcess, opSpec: opSpec{
			ID: "waitProcess", Method: http.MethodPost, Path: "/v1/processes/{id}/wait", Tag: "processes",
			Summary:     "Wait for a process to exit",
			Description: "Answers when the process has exited, or after timeout_ms with the process still running (status running); call again to keep waiting.",
			Errors:      errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},

		&op[processStreamInput, streamOutput]{h: (*server).streamProcess, opSpec: opSpec{
			ID: "streamProcess", Method: http.MethodGet, Path: "/v1/processes/{id}/stream", Tag: "processes",
			Summary: "Follow a process's output (SSE)",
			Description: "A Server-Sent Events stream of the process's output: what the buffer still holds after the resume point, then new output " +
				"as it comes, then an exit event, after which the stream ends. Each event is sent as\n\n" +
				"    id: <seq>\n    event: stdout | stderr | dropped | exit\n    data: <JSON, on one line>\n\n" +
				"A dropped event stands for output the bounded buffer no longer holds (the daemon keeps the last 1 MiB of each process's output by default). " +
				"A tty process's output is one stdout stream of the terminal's bytes, so a reconnecting terminal replays the screen output the buffer holds. To resume, reconnect with Last-Event-ID " +
				"(EventSource does this by itself) or ?after= set to the last seq received.",
			Errors: errs(http.StatusNotFound, http.StatusServiceUnavailable),
			Stream: streamProcess,
		}},
	}
}

// execSvc returns the service or the 503 problem.
func (s *server) execSvc() (ExecService, error) {
	if s.cfg.Exec == nil {
		return nil, errExecDisabled
	}
	return s.cfg.Exec, nil
}

func (s *server) exec(ctx context.Context, in *execInput) (*execOutput, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	res, err := svc.Exec(ctx, toExecRequest(in.Body))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &execOutput{Body: toExecResult(res)}, nil
}

func (s *server) execStream(ctx context.Context, in *execInput) (*streamOutput, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	req := toExecRequest(in.Body)
	return &streamOutput{Body: func(w http.ResponseWriter) {
		c := s.newSSE(w)
		defer c.finish()
		// The stream opens when the process runs, so that problems found
		// before (policy, 429) are answered as problems with a status.
		hooks := execution.Hooks{
			Started: func(sb execution.SandboxInfo) {
				if c.begin(0) {
					c.event("", "start", map[string]any{"sandbox": toSandboxInfo(sb)})
				}
			},
			Output: func(o execution.Output) {
				c.event("", o.Stream, client.OutputChunk{Seq: o.Seq, Stream: o.Stream, Data: string(o.Data)})
			},
		}
		res, err := svc.ExecStream(ctx, req, hooks)
		switch {
		case err != nil && !c.begun():
			writeProblem(w, errorProblem(ctx, err))
		case err != nil:
			c.event("", "error", errorProblem(ctx, err))
		default:
			c.begin(0) // normally begun already by Started
			c.event("", "result", toExecResult(res))
		}
	}}, nil
}

func (s *server) startProcess(ctx context.Context, in *startProcessInput) (*processCreatedOutput, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	b := in.Body
	ref, _ := policyRef(b.Policy, b.PolicySource) // checked in check
	info, err := svc.Start(ctx, execution.StartRequest{
		Argv: b.Argv, Env: b.Env, Cwd: b.Cwd, Stdin: b.Stdin, TTY: b.TTY, Rows: b.Rows, Cols: b.Cols, Tag: b.Tag, Files: toFiles(b.Files),
		Policy: ref, Timeout: time.Duration(b.TimeoutMS) * time.Millisecond, Provider: b.Provider,
	})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &processCreatedOutput{Location: "/v1/processes/" + url.PathEscape(info.ID), Body: toProcess(info)}, nil
}

func (s *server) listProcesses(ctx context.Context, _ *struct{}) (*processListOutput, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	list := svc.List()
	out := client.ProcessList{Processes: make([]client.Process, len(list))}
	for i, p := range list {
		out.Processes[i] = toProcess(p)
	}
	return &processListOutput{Body: out}, nil
}

func (s *server) getProcess(ctx context.Context, in *processPath) (*processOutput, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	info, err := svc.Get(in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &processOutput{Body: toProcess(info)}, nil
}

func (s *server) deleteProcess(ctx context.Context, in *processPath) (*struct{}, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	if err := svc.Remove(ctx, in.ID); err != nil {
		return nil, s.fail(ctx, err)
	}
	return &struct{}{}, nil
}

func (s *server) processStdin(ctx context.Context, in *processStdinInput) (*struct{}, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	if in.Body.Data != "" {
		if err := svc.SendStdin(ctx, in.ID, []byte(in.Body.Data)); err != nil {
			return nil, s.fail(ctx, err)
		}
	}
	if in.Body.Close {
		if err := svc.CloseStdin(in.ID); err != nil {
			return nil, s.fail(ctx, err)
		}
	}
	return &struct{}{}, nil
}

func (s *server) signalProcess(ctx context.Context, in *processSignalInput) (*struct{}, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	sig, err := execution.ParseSignal(in.Body.Signal)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	if err := svc.Signal(in.ID, sig); err != nil {
		return nil, s.fail(ctx, err)
	}
	return &struct{}{}, nil
}

func (s *server) resizeProcess(ctx context.Context, in *processResizeInput) (*struct{}, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	if err := svc.Resize(in.ID, in.Body.Rows, in.Body.Cols); err != nil {
		return nil, s.fail(ctx, err)
	}
	return &struct{}{}, nil
}

func (s *server) waitProcess(ctx context.Context, in *processWaitInput) (*processOutput, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	d := defaultWait
	if in.TimeoutMS > 0 {
		d = min(time.Duration(in.TimeoutMS)*time.Millisecond, maxWait)
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	info, err := svc.Wait(wctx, in.ID)
	// Running out of the wait's own time is an answer, not an error.
	if err != nil && (!errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil) {
		return nil, s.fail(ctx, err)
	}
	return &processOutput{Body: toProcess(info)}, nil
}

func (s *server) streamProcess(ctx context.Context, in *processStreamInput) (*streamOutput, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	return resumableStream(ctx, s, func(sctx context.Context) (<-chan execution.Event, error) {
		return svc.Subscribe(sctx, in.ID, in.from)
	}, func(sctx context.Context, c *sseWriter, ch <-chan execution.Event) {
		for {
			select {
			case <-sctx.Done():
				return
			case ev, ok := <-ch:
				if !ok || !c.event(strconv.FormatInt(ev.Seq, 10), ev.Type, processEventData(ev)) {
					return
				}
			}
		}
	})
}

func processEventData(ev execution.Event) any {
	switch ev.Type {
	case execution.EventDropped:
		return client.OutputGap{FromSeq: ev.Gap.FromSeq, ToSeq: ev.Gap.ToSeq}
	case execution.EventExit:
		return toProcess(*ev.Exit)
	}
	return client.OutputChunk{Seq: ev.Seq, Stream: ev.Type, Data: string(ev.Data), Offset: ev.Offset}
}
