package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Languages of ExecRequest.
const (
	LangPython = "python"
	LangNode   = "node"
	LangBash   = "bash"
)

// Error codes of ExecResult.Error and Process.Error.
const (
	ExecTimeout       = "timeout"
	ExecMemory        = "memory_limit_exceeded"
	ExecPids          = "pids_limit_exceeded"
	ExecDisk          = "disk_limit_exceeded"
	ExecFiles         = "files_limit_exceeded"
	ExecOutput        = "output_limit_exceeded"
	ExecPolicyDenied  = "policy_denied"
	ExecSandboxFailed = "sandbox_failed"
)

// PolicySource is a policy document sent as written in a file, so that
// errors name the file, line and field.
type PolicySource struct {
	Name string `json:"name" minLength:"1" maxLength:"256" doc:"The file's name, used in error messages." example:"policy.yaml"`
	Text string `json:"text" minLength:"1" maxLength:"262144" doc:"The policy document, YAML or JSON."`
}

// ExecRequest is the body of POST /v1/exec and POST /v1/exec/stream.
// Exactly one of Language (with Code) and Argv must be set.
type ExecRequest struct {
	Language string            `json:"language,omitempty" enum:"python,node,bash" doc:"Run code with python3, node or bash."`
	Code     string            `json:"code,omitempty" maxLength:"4194304" doc:"The program, for language."`
	Argv     []string          `json:"argv,omitempty" maxItems:"4096" doc:"The command to run instead of code; argv[0] is looked up in the sandbox's PATH."`
	Stdin    string            `json:"stdin,omitempty" maxLength:"4194304" doc:"The process's standard input; empty means /dev/null."`
	Files    map[string]string `json:"files,omitempty" doc:"Files to place in the fresh workspace before the start, by slash-separated relative path. Tasks with files do not use the warm pool."`
	// Policy is a preset name as a JSON string or an inline policy object.
	Policy       json.RawMessage `json:"policy,omitempty" doc:"Sandbox policy: a preset name (\"exec-default\", \"strict\") or an inline policy object (see docs/policy.md). Empty means exec-default. It is intersected with the operator's global policy."`
	PolicySource *PolicySource   `json:"policy_source,omitempty" doc:"A policy document as written in a file, instead of policy."`
	TimeoutMS    int64           `json:"timeout_ms,omitempty" minimum:"0" doc:"Wall-clock limit in milliseconds, when shorter than the policy's."`
	Provider     string          `json:"provider,omitempty" maxLength:"64" doc:"Sandbox provider to run in (see GET /v1/providers): a fresh sandbox is made there, the code runs through the agentbox daemon inside under this request's policy (resolved on this daemon), and the sandbox is destroyed afterwards. What neither the provider nor the daemon inside can enforce is a 422 provider-unsupported. Empty: this host." example:"docker"`
}

// ExecError is why an execution ended abnormally.
type ExecError struct {
	Code    string `json:"code" enum:"timeout,memory_limit_exceeded,pids_limit_exceeded,disk_limit_exceeded,files_limit_exceeded,output_limit_exceeded,policy_denied,sandbox_failed"`
	Message string `json:"message"`
}

// Resources is what a process tree used.
type Resources struct {
	MaxRSS int64 `json:"max_rss" doc:"Peak memory in bytes."`
	CPUMS  int64 `json:"cpu_ms" doc:"CPU time (user and system) in milliseconds."`
}

// Violation is one thing the sandbox refused.
type Violation struct {
	Kind   string `json:"kind" enum:"filesystem,syscall,resource,network"`
	Detail string `json:"detail"`
	Target string `json:"target,omitempty" doc:"Path or address, when there is one."`
	Host   string `json:"host,omitempty" doc:"A network violation's destination host."`
	Port   int    `json:"port,omitempty" doc:"A network violation's destination port."`
	// Process is the process that opened a refused connection, when known.
	Process *SandboxProcess `json:"process,omitempty"`
	Rule    string          `json:"rule,omitempty" doc:"The policy rule that decided." example:"protected:.mcp.json"`
	Action  string          `json:"action" enum:"blocked,asked,dropped"`
	// Count, FirstAt and LastAt describe a summary of repeated
	// violations (see docs/sandbox.md, Violations).
	Count   int        `json:"count,omitempty" doc:"How many violations this entry stands for when repeats were coalesced (absent: one)."`
	FirstAt *time.Time `json:"first_at,omitempty" doc:"When the first of the violations a summary counts happened."`
	LastAt  *time.Time `json:"last_at,omitempty" doc:"When the last of the violations a summary counts happened."`
}

// SandboxProcess is a process inside a sandbox.
type SandboxProcess struct {
	Pid         int    `json:"pid,omitempty" doc:"Its pid inside the sandbox."`
	Name        string `json:"name,omitempty"`
	CommandLine string `json:"command_line,omitempty"`
}

// SandboxInfo describes the sandbox a task ran in.
type SandboxInfo struct {
	ID         string   `json:"id"`
	Runtime    string   `json:"runtime" example:"process"`
	Mechanisms []string `json:"mechanisms,omitempty" doc:"What was in force, e.g. userns, landlock:abi5, seccomp, cgroup:v1."`
	Degraded   []string `json:"degraded,omitempty" doc:"What the policy asked for but the host could not do (only with allow-degraded)."`
	Warm       bool     `json:"warm" doc:"The sandbox came from the warm pool."`
	Provider   string   `json:"provider,omitempty" doc:"The provider the sandbox was on (the request's provider); id is then the provider's sandbox, runtime and mechanisms those of the agentbox daemon inside it."`
}

// ExecResult is the answer of POST /v1/exec and the result event of
// POST /v1/exec/stream.
type ExecResult struct {
	ExitCode   int         `json:"exit_code" doc:"Exit status; -1 when a signal ended the process."`
	Signal     string      `json:"signal,omitempty"`
	Stdout     string      `json:"stdout" doc:"Standard output, up to the policy's output limit (invalid UTF-8 becomes U+FFFD)."`
	Stderr     string      `json:"stderr"`
	Truncated  bool        `json:"truncated" doc:"An output stream reached the limit; the process was killed."`
	DurationMS int64       `json:"duration_ms"`
	Resources  Resources   `json:"resources"`
	Violations []Violation `json:"violations"`
	Error      *ExecError  `json:"error,omitempty" doc:"Set when the process hit a limit; absent when it ended on its own, whatever its exit status."`
	Sandbox    SandboxInfo `json:"sandbox"`
	// Adjusted lists every limit asked for that was lowered, so none is
	// lowered silently.
	Adjusted []LimitAdjustment `json:"adjusted,omitempty" doc:"Limits the request asked for (in its policy, or timeout_ms) that were lowered: what was asked, what applied and what lowered it. Absent when everything applied as asked."`
}

// LimitAdjustment is one limit asked for that was lowered on the way.
type LimitAdjustment struct {
	Field     string `json:"field" doc:"The policy field (resources.memory, ...) or the request's (timeout_ms)." example:"resources.memory"`
	Requested string `json:"requested" doc:"As asked, written as a policy writes it." example:"64Gi"`
	Applied   string `json:"applied" doc:"What applied." example:"8Gi"`
	By        string `json:"by" doc:"What lowered it: the operator's global policy, the policy's own limit, or a bound of the daemon." example:"global policy"`
}

// OutputChunk is a stdout or stderr event of an exec or process stream.
type OutputChunk struct {
	Seq    int64  `json:"seq" doc:"Numbers the events of the task from 1, across both streams."`
	Stream string `json:"stream" enum:"stdout,stderr"`
	Data   string `json:"data" doc:"The output; a chunk never ends inside a UTF-8 sequence."`
	Offset int64  `json:"offset,omitempty" doc:"Process streams: output bytes (both streams) written before this chunk."`
}

// StartProcess is the body of POST /v1/processes.
type StartProcess struct {
	Argv         []string          `json:"argv" minItems:"1" maxItems:"4096"`
	Env          map[string]string `json:"env,omitempty" doc:"Added to the environment the policy defines."`
	Cwd          string            `json:"cwd,omitempty" maxLength:"4096" doc:"Absolute inside the sandbox, or relative to the workspace."`
	Stdin        bool              `json:"stdin,omitempty" doc:"Keep standard input open for POST /v1/processes/{id}/stdin."`
	TTY          bool              `json:"tty,omitempty" doc:"Run the process on a pseudo-terminal: it is the process's standard input, output and error and its controlling terminal. The output is one stdout stream of the terminal's bytes (escape sequences included, for the client to interpret); standard input stays open; POST /v1/processes/{id}/resize changes the size."`
	Rows         int               `json:"rows,omitempty" minimum:"0" maximum:"1000" doc:"The terminal's height, with tty (default 24)."`
	Cols         int               `json:"cols,omitempty" minimum:"0" maximum:"1000" doc:"The terminal's width, with tty (default 80)."`
	Tag          string            `json:"tag,omitempty" maxLength:"128" doc:"A name to find the process by instead of its id; unique among running processes."`
	Files        map[string]string `json:"files,omitempty" doc:"Files to place in the fresh workspace before the start."`
	Policy       json.RawMessage   `json:"policy,omitempty" doc:"Sandbox policy: a preset name or an inline policy object; empty means exec-default."`
	PolicySource *PolicySource     `json:"policy_source,omitempty" doc:"A policy document as written in a file, instead of policy."`
	TimeoutMS    int64             `json:"timeout_ms,omitempty" minimum:"0" doc:"Wall-clock limit in milliseconds, when shorter than the policy's."`
	Provider     string            `json:"provider,omitempty" maxLength:"64" doc:"Sandbox provider to run in (see GET /v1/providers): a fresh sandbox is made there and the process runs through the processes API of the agentbox daemon inside, under this request's policy (resolved on this daemon); output, stdin, signals, resize and wait work as for a local process. The sandbox is destroyed when the process ends, after its workspace is copied back to this daemon (see /v1/processes/{id}/files). What neither the provider nor the daemon inside can enforce is a 422 provider-unsupported. Empty: this host." example:"e2b"`
}

// Process states.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// Process describes a started process.
type Process struct {
	ID         string      `json:"id" example:"prc_5f0c8e2a9b7d4c1e3a6f8b20"`
	Tag        string      `json:"tag,omitempty"`
	Argv       []string    `json:"argv"`
	Pid        int         `json:"pid,omitempty" doc:"Host pid of the process."`
	Status     string      `json:"status" enum:"running,exited"`
	StdinOpen  bool        `json:"stdin_open"`
	TTY        bool        `json:"tty,omitempty" doc:"The process runs on a pseudo-terminal."`
	Rows       int         `json:"rows,omitempty" doc:"The terminal's height, as last set (with tty)."`
	Cols       int         `json:"cols,omitempty" doc:"The terminal's width, as last set (with tty)."`
	StartedAt  time.Time   `json:"started_at"`
	EndedAt    *time.Time  `json:"ended_at,omitempty"`
	ExitCode   *int        `json:"exit_code,omitempty" doc:"Set once exited; -1 when a signal ended the process."`
	Signal     string      `json:"signal,omitempty"`
	Error      *ExecError  `json:"error,omitempty"`
	Resources  *Resources  `json:"resources,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
	LastSeq    int64       `json:"last_seq" doc:"Seq of the last event so far."`
	Sandbox    SandboxInfo `json:"sandbox"`
	// Adjusted: as in ExecResult.
	Adjusted []LimitAdjustment `json:"adjusted,omitempty" doc:"Limits the request asked for (in its policy, or timeout_ms) that were lowered: what was asked, what applied and what lowered it. Absent when everything applied as asked."`
}

// ProcessList is the answer of GET /v1/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// ProcessInput is the body of POST /v1/processes/{id}/stdin.
type ProcessInput struct {
	Data  string `json:"data,omitempty" maxLength:"1048576" doc:"Bytes to write to standard input."`
	Close bool   `json:"close,omitempty" doc:"Close standard input after writing data."`
}

// TerminalSize is the body of POST /v1/processes/{id}/resize.
type TerminalSize struct {
	Rows int `json:"rows" minimum:"1" maximum:"1000" doc:"Height in rows."`
	Cols int `json:"cols" minimum:"1" maximum:"1000" doc:"Width in columns."`
}

// ProcessSignal is the body of POST /v1/processes/{id}/signal.
type ProcessSignal struct {
	Signal string `json:"signal" minLength:"1" maxLength:"16" doc:"SIGTERM, SIGKILL (the whole tree), SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGSTOP, SIGCONT or SIGWINCH; the SIG prefix is optional." example:"SIGTERM"`
}

// OutputGap is the data of a dropped event: output the server's buffer no
// longer holds.
type OutputGap struct {
	FromSeq int64 `json:"from_seq"`
	ToSeq   int64 `json:"to_seq"`
}

// Exec runs code or a command in a sandbox and returns its result. Limits
// the process hit are in the result's Error; a policy that is invalid or
// cannot be enforced is an *APIError (ProblemPolicy).
func (c *Client) Exec(ctx context.Context, req ExecRequest) (ExecResult, error) {
	var out ExecResult
	err := c.do(ctx, http.MethodPost, "/v1/exec", nil, req, &out)
	return out, err
}

// ExecStream is Exec that calls onOutput for each chunk of output as it
// arrives (in seq order, on the calling goroutine), then returns the
// result. It does not reconnect: an exec cannot be resumed.
func (c *Client) ExecStream(ctx context.Context, req ExecRequest, onOutput func(OutputChunk)) (ExecResult, error) {
	const path = "/v1/exec/stream"
	b, err := json.Marshal(req)
	if err != nil {
		return ExecResult{}, fmt.Errorf("client: encode POST %s: %w", path, err)
	}
	var res ExecResult
	got := false
	err = c.sse(ctx, http.MethodPost, path, nil, b, "", func(m sseMessage) error {
		switch m.Event {
		case "stdout", "stderr":
			var ch OutputChunk
			if err := json.Unmarshal([]byte(m.Data), &ch); err != nil {
				return fmt.Errorf("decode %s event: %w", m.Event, err)
			}
			if onOutput != nil {
				onOutput(ch)
			}
		case "result":
			if err := json.Unmarshal([]byte(m.Data), &res); err != nil {
				return fmt.Errorf("decode result event: %w", err)
			}
			got = true
			return errStopSSE
		case "error":
			// The exec failed after the stream had started.
			e := &APIError{Method: http.MethodPost, Path: path}
			if err := json.Unmarshal([]byte(m.Data), &e.Problem); err != nil {
				return fmt.Errorf("decode error event: %w", err)
			}
			return e
		}
		return nil
	})
	if err != nil {
		return ExecResult{}, err
	}
	if !got {
		return ExecResult{}, fmt.Errorf("POST %s: the stream ended without a result", path)
	}
	return res, nil
}

// StartProcess starts a process in a sandbox and returns at once.
func (c *Client) StartProcess(ctx context.Context, req StartProcess) (Process, error) {
	var out Process
	err := c.do(ctx, http.MethodPost, "/v1/processes", nil, req, &out)
	return out, err
}

// Processes lists the daemon's processes, running and recently ended.
func (c *Client) Processes(ctx context.Context) (ProcessList, error) {
	var out ProcessList
	err := c.do(ctx, http.MethodGet, "/v1/processes", nil, nil, &out)
	return out, err
}

// GetProcess describes a process found by id or tag.
func (c *Client) GetProcess(ctx context.Context, idOrTag string) (Process, error) {
	p, err := processPath(idOrTag)
	if err != nil {
		return Process{}, err
	}
	var out Process
	err = c.do(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// SendStdin writes data to a process's standard input, closing it
// afterwards when closeStdin is set.
func (c *Client) SendStdin(ctx context.Context, idOrTag, data string, closeStdin bool) error {
	p, err := processPath(idOrTag, "stdin")
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, p, nil, ProcessInput{Data: data, Close: closeStdin}, nil)
}

// Resize sets the size of a tty process's terminal; the process gets
// SIGWINCH. A process without a terminal is a 409 conflict.
func (c *Client) Resize(ctx context.Context, idOrTag string, rows, cols int) error {
	p, err := processPath(idOrTag, "resize")
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, p, nil, TerminalSize{Rows: rows, Cols: cols}, nil)
}

// Signal sends a signal ("SIGTERM", "SIGKILL", ...) to a process.
func (c *Client) Signal(ctx context.Context, idOrTag, signal string) error {
	p, err := processPath(idOrTag, "signal")
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, p, nil, ProcessSignal{Signal: signal}, nil)
}

// Wait waits until a process has exited and describes it. It polls the
// server's bounded wait until the process ends or ctx does.
func (c *Client) Wait(ctx context.Context, idOrTag string) (Process, error) {
	p, err := processPath(idOrTag, "wait")
	if err != nil {
		return Process{}, err
	}
	return c.waitAt(ctx, p)
}

// waitAt polls the wait operation at path p until the process exits.
func (c *Client) waitAt(ctx context.Context, p string) (Process, error) {
	for {
		var out Process
		if err := c.do(ctx, http.MethodPost, p, url.Values{"timeout_ms": {"30000"}}, nil, &out); err != nil {
			return Process{}, err
		}
		if out.Status == ProcessExited {
			return out, nil
		}
	}
}

// DeleteProcess kills a process if it runs and forgets it.
func (c *Client) DeleteProcess(ctx context.Context, idOrTag string) error {
	p, err := processPath(idOrTag)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, p, nil, nil, nil)
}

// ProcessEvent is one event of a process stream: Type is "stdout" or
// "stderr" (Output set), "dropped" (Gap set: output the server no longer
// had) or "exit" (Exit set; the last event).
type ProcessEvent struct {
	Seq    int64
	Type   string
	Output *OutputChunk
	Gap    *OutputGap
	Exit   *Process
}

// ProcessStream follows a process's output from after the given seq (0:
// from the start of what the server still holds) to its exit event,
// reconnecting with Last-Event-ID when the connection drops, so that each
// event is seen once. It ends after the exit event, on a permanent error
// (unknown process: 404) or when ctx ends.
func (c *Client) ProcessStream(ctx context.Context, idOrTag string, after int64) iter.Seq2[ProcessEvent, error] {
	p, err := processPath(idOrTag, "stream")
	if err != nil {
		return func(yield func(ProcessEvent, error) bool) { yield(ProcessEvent{}, err) }
	}
	return c.processStreamAt(ctx, p, after)
}

// processStreamAt follows the process stream at path p (ProcessStream).
func (c *Client) processStreamAt(ctx context.Context, p string, after int64) iter.Seq2[ProcessEvent, error] {
	return func(yield func(ProcessEvent, error) bool) {
		last := max(after, 0)
		backoff := DefaultMinBackoff
		for {
			done, stopped := false, false
			err := c.sse(ctx, http.MethodGet, p, nil, nil, strconv.FormatInt(last, 10), func(m sseMessage) error {
				ev, err := decodeProcessEvent(m)
				if err != nil {
					return err
				}
				if ev.Seq <= last {
					return nil // already delivered before a reconnect
				}
				backoff = DefaultMinBackoff
				last = ev.Seq
				if !yield(ev, nil) {
					stopped = true
					return errStopSSE
				}
				if ev.Type == "exit" {
					done = true
					return errStopSSE
				}
				return nil
			})
			if stopped || done {
				return
			}
			if err == nil {
				err = errors.New("the stream ended before the process's exit event")
			}
			var ae *APIError
			if ctx.Err() != nil || (errors.As(err, &ae) && !ae.Temporary()) {
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(ProcessEvent{}, err)
				return
			}
			select {
			case <-ctx.Done():
				yield(ProcessEvent{}, ctx.Err())
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, DefaultMaxBackoff)
		}
	}
}

func decodeProcessEvent(m sseMessage) (ProcessEvent, error) {
	seq, err := strconv.ParseInt(m.ID, 10, 64)
	if err != nil {
		return ProcessEvent{}, fmt.Errorf("process stream: event id %q: %w", m.ID, err)
	}
	ev := ProcessEvent{Seq: seq, Type: m.Event}
	var target any
	switch m.Event {
	case "stdout", "stderr":
		ev.Output = &OutputChunk{}
		target = ev.Output
	case "dropped":
		ev.Gap = &OutputGap{}
		target = ev.Gap
	case "exit":
		ev.Exit = &Process{}
		target = ev.Exit
	default:
		return ProcessEvent{}, fmt.Errorf("process stream: unknown event %q", m.Event)
	}
	if err := json.Unmarshal([]byte(m.Data), target); err != nil {
		return ProcessEvent{}, fmt.Errorf("process stream: decode %s event: %w", m.Event, err)
	}
	return ev, nil
}

// errStopSSE ends an sse loop without error.
var errStopSSE = errors.New("stop")

// sse sends one request whose answer is an event stream and calls fn for
// each event until the stream ends, fn returns an error (errStopSSE: stop
// without error) or ctx ends. lastEventID, when set, is sent as
// Last-Event-ID.
func (c *Client) sse(ctx context.Context, method, path string, q url.Values, body []byte, lastEventID string, fn func(sseMessage) error) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := c.newRequest(ctx, method, path, q, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream, application/problem+json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer drainClose(resp)
		return c.readAPIError(resp, method, path)
	}
	// Never drained: the stream may go on long after the caller stopped
	// reading it (draining would wait for it).
	defer resp.Body.Close()
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return fmt.Errorf("%s %s: answer is %q, not an event stream", method, path, mt)
	}
	p := c.newSSEParser(resp.Body)
	for {
		m, err := p.Next()
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		if err := fn(m); err != nil {
			var ae *APIError
			switch {
			case errors.Is(err, errStopSSE):
				return nil
			case errors.As(err, &ae):
				return err // names the request already
			}
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
}

// processPath builds /v1/processes/{id}[/more] with the id escaped.
func processPath(idOrTag string, more ...string) (string, error) {
	if idOrTag == "" {
		return "", errors.New("client: empty process id")
	}
	p := "/v1/processes/" + url.PathEscape(idOrTag)
	for _, s := range more {
		p += "/" + s
	}
	return p, nil
}
