package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// SandboxLender is an optional ability of an Engine beside
// SessionWorkspaces: it says when a session's sandbox, lent through
// Exec to a process that outlives the call, begins to close, so that the
// process is killed first and says why. Without it the session process
// routes answer 503.
type SandboxLender interface {
	SandboxClosing(id string, sb sandbox.Sandbox) <-chan struct{}
}

var _ SandboxLender = (*engine.Manager)(nil)

// ScopedProcesses is an optional ability of an ExecService: processes
// found through their owner's scope; *execution.Service implements it.
type ScopedProcesses interface {
	Resolve(scope, idOrTag string) (string, error)
	ListScope(scope string) []execution.ProcessInfo
}

var _ ScopedProcesses = (*execution.Service)(nil)

// scopedSvc returns the service with its scoped ability, or the 503.
func (s *server) scopedSvc() (ScopedProcesses, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	sc, ok := svc.(ScopedProcesses)
	if !ok {
		return nil, errExecDisabled
	}
	return sc, nil
}

type sessionStartInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	Body client.SessionStartProcess
}

func (in *sessionStartInput) check() []error {
	if len(in.Body.Argv) == 0 || in.Body.Argv[0] == "" {
		return []error{&fieldError{Location: "body.argv[0]", Message: "the command is empty"}}
	}
	return nil
}

type sessionIDPath struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
}

type sessionProcPath struct {
	ID  string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	PID string `path:"pid" minLength:"1" maxLength:"128" doc:"Process ID or tag (the session's newest process with that tag)."`
}

type sessionProcStdinInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	PID  string `path:"pid" minLength:"1" maxLength:"128" doc:"Process ID or tag (the session's newest process with that tag)."`
	Body client.ProcessInput
}

type sessionProcSignalInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	PID  string `path:"pid" minLength:"1" maxLength:"128" doc:"Process ID or tag (the session's newest process with that tag)."`
	Body client.ProcessSignal
}

type sessionProcResizeInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	PID  string `path:"pid" minLength:"1" maxLength:"128" doc:"Process ID or tag (the session's newest process with that tag)."`
	Body client.TerminalSize
}

type sessionProcWaitInput struct {
	ID        string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	PID       string `path:"pid" minLength:"1" maxLength:"128" doc:"Process ID or tag (the session's newest process with that tag)."`
	TimeoutMS int64  `query:"timeout_ms" minimum:"0" maximum:"300000" doc:"How long to wait at most (default 30000); the answer then describes the process still running."`
}

type sessionProcStreamInput struct {
	ID  string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	PID string `path:"pid" minLength:"1" maxLength:"128" doc:"Process ID or tag (the session's newest process with that tag)."`
	ResumeParams
}

// sessionProcDoc is what every scoped operation shares.
const sessionProcDoc = " The process is found among the session's own (by id, or by tag: the session's newest with it); a process of " +
	"another session, or one started through POST /v1/processes, is 404 here."

func sessionProcOps() []route {
	return []route{
		&op[sessionStartInput, processCreatedOutput]{h: (*server).startSessionProcess, opSpec: opSpec{
			ID: "startSessionProcess", Method: http.MethodPost, Path: "/v1/sessions/{id}/processes", Tag: "processes",
			Summary: "Start a process in a session's sandbox",
			Description: "Starts a command in the sandbox of a live sandboxed session, beside its agent, under the session's policy (the same " +
				"namespaces, filesystem view, network rules and limits; the policy's timeout applies unless timeout_ms is shorter), and returns " +
				"at once; the body takes no policy and no files. The process is then driven as one of POST /v1/processes (the same shapes) " +
				"through /v1/sessions/{id}/processes/{pid}…. What it writes stays in the sandbox until the session's next commit. " +
				"Signals go to the command's process group; SIGKILL ends that group, never the session's sandbox. With tty the command runs on a " +
				"pseudo-terminal, in its foreground process group (a shell has job control), and SIGINT, SIGQUIT and SIGSTOP act as the terminal's " +
				"keys on that foreground group; …/resize sizes it. When the session's sandbox " +
				"closes (the session ends, stops when idle, or is deleted) its processes are killed, and their exit says so (error code " +
				"sandbox_closed). A session without a sandbox is refused (409 no-sandbox), one that is not live too (409 not-live). " +
				"Processes count in the daemon's limit of running sandboxed tasks (then 429).",
			Status:      http.StatusCreated,
			Limit:       limitMessage,
			ReadTimeout: 30 * time.Second,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge,
				http.StatusUnsupportedMediaType, http.StatusTooManyRequests, http.StatusServiceUnavailable),
		}},
		&op[sessionIDPath, processListOutput]{h: (*server).listSessionProcesses, opSpec: opSpec{
			ID: "listSessionProcesses", Method: http.MethodGet, Path: "/v1/sessions/{id}/processes", Tag: "processes",
			Summary:     "List a session's processes",
			Description: "The session's running processes and those that ended recently, oldest first (also after the session ended).",
			Errors:      errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},
		&op[sessionProcPath, processOutput]{h: (*server).getSessionProcess, opSpec: opSpec{
			ID: "getSessionProcess", Method: http.MethodGet, Path: "/v1/sessions/{id}/processes/{pid}", Tag: "processes",
			Summary: "Get a session's process", Description: "As GET /v1/processes/{id}." + sessionProcDoc,
			Errors: errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},
		&op[sessionProcPath, struct{}]{h: (*server).deleteSessionProcess, opSpec: opSpec{
			ID: "deleteSessionProcess", Method: http.MethodDelete, Path: "/v1/sessions/{id}/processes/{pid}", Tag: "processes",
			Summary: "Kill and forget a session's process", Description: "As DELETE /v1/processes/{id}: kills the process's group, not the session's sandbox." + sessionProcDoc,
			Status: http.StatusNoContent,
			Errors: errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},
		&op[sessionProcStdinInput, struct{}]{h: (*server).sessionProcessStdin, opSpec: opSpec{
			ID: "sendSessionProcessInput", Method: http.MethodPost, Path: "/v1/sessions/{id}/processes/{pid}/stdin", Tag: "processes",
			Summary: "Write to a session's process's standard input", Description: "As POST /v1/processes/{id}/stdin." + sessionProcDoc,
			Status: http.StatusNoContent,
			Limit:  limitMessage,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge,
				http.StatusUnsupportedMediaType, http.StatusServiceUnavailable),
		}},
		&op[sessionProcSignalInput, struct{}]{h: (*server).signalSessionProcess, opSpec: opSpec{
			ID: "signalSessionProcess", Method: http.MethodPost, Path: "/v1/sessions/{id}/processes/{pid}/signal", Tag: "processes",
			Summary: "Signal a session's process", Description: "As POST /v1/processes/{id}/signal, to the command's process group; SIGKILL kills that group only." + sessionProcDoc,
			Status: http.StatusNoContent,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnsupportedMediaType, http.StatusServiceUnavailable),
		}},
		&op[sessionProcResizeInput, struct{}]{h: (*server).resizeSessionProcess, opSpec: opSpec{
			ID: "resizeSessionProcess", Method: http.MethodPost, Path: "/v1/sessions/{id}/processes/{pid}/resize", Tag: "processes",
			Summary: "Resize a session's process's terminal", Description: "As POST /v1/processes/{id}/resize." + sessionProcDoc,
			Status: http.StatusNoContent,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnsupportedMediaType, http.StatusServiceUnavailable),
		}},
		&op[sessionProcWaitInput, processOutput]{h: (*server).waitSessionProcess, opSpec: opSpec{
			ID: "waitSessionProcess", Method: http.MethodPost, Path: "/v1/sessions/{id}/processes/{pid}/wait", Tag: "processes",
			Summary: "Wait for a session's process to exit", Description: "As POST /v1/processes/{id}/wait." + sessionProcDoc,
			Errors: errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},
		&op[sessionProcStreamInput, streamOutput]{h: (*server).streamSessionProcess, opSpec: opSpec{
			ID: "streamSessionProcess", Method: http.MethodGet, Path: "/v1/sessions/{id}/processes/{pid}/stream", Tag: "processes",
			Summary: "Follow a session's process's output (SSE)", Description: "As GET /v1/processes/{id}/stream, with the same events and resume." + sessionProcDoc,
			Errors: errs(http.StatusNotFound, http.StatusServiceUnavailable),
			Stream: streamProcess,
		}},
	}
}

// sessionScope is the execution scope of a session's processes.
func sessionScope(id string) string { return "session:" + id }

func (s *server) startSessionProcess(ctx context.Context, in *sessionStartInput) (*processCreatedOutput, error) {
	svc, err := s.execSvc()
	if err != nil {
		return nil, err
	}
	w, err := s.workspaces()
	if err != nil {
		return nil, err
	}
	lender, ok := s.eng.(SandboxLender)
	if !ok {
		return nil, errWorkspacesDisabled
	}
	b := in.Body
	var info execution.ProcessInfo
	err = w.Exec(ctx, in.ID, func(ctx context.Context, sb sandbox.Sandbox, limits sandbox.Limits) error {
		var err error
		info, err = svc.Start(ctx, execution.StartRequest{
			Argv: b.Argv, Env: b.Env, Cwd: b.Cwd, Stdin: b.Stdin, TTY: b.TTY, Rows: b.Rows, Cols: b.Cols, Tag: b.Tag, Timeout: time.Duration(b.TimeoutMS) * time.Millisecond,
			Sandbox: sb, Limits: limits, Closing: lender.SandboxClosing(in.ID, sb), Scope: sessionScope(in.ID),
		})
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	loc := "/v1/sessions/" + url.PathEscape(in.ID) + "/processes/" + url.PathEscape(info.ID)
	return &processCreatedOutput{Location: loc, Body: toProcess(info)}, nil
}

func (s *server) listSessionProcesses(ctx context.Context, in *sessionIDPath) (*processListOutput, error) {
	svc, err := s.scopedSvc()
	if err != nil {
		return nil, err
	}
	if _, err := s.eng.Get(ctx, in.ID); err != nil {
		return nil, s.fail(ctx, err)
	}
	list := svc.ListScope(sessionScope(in.ID))
	out := client.ProcessList{Processes: make([]client.Process, len(list))}
	for i, p := range list {
		out.Processes[i] = toProcess(p)
	}
	return &processListOutput{Body: out}, nil
}

// sessionProc resolves the session's process to its id, for the
// handlers of /v1/processes/{id}….
func (s *server) sessionProc(ctx context.Context, in sessionProcPath) (string, error) {
	svc, err := s.scopedSvc()
	if err != nil {
		return "", err
	}
	id, err := svc.Resolve(sessionScope(in.ID), in.PID)
	if err != nil {
		return "", s.fail(ctx, err)
	}
	return id, nil
}

func (s *server) getSessionProcess(ctx context.Context, in *sessionProcPath) (*processOutput, error) {
	id, err := s.sessionProc(ctx, *in)
	if err != nil {
		return nil, err
	}
	return s.getProcess(ctx, &processPath{ID: id})
}

func (s *server) deleteSessionProcess(ctx context.Context, in *sessionProcPath) (*struct{}, error) {
	id, err := s.sessionProc(ctx, *in)
	if err != nil {
		return nil, err
	}
	return s.deleteProcess(ctx, &processPath{ID: id})
}

func (s *server) sessionProcessStdin(ctx context.Context, in *sessionProcStdinInput) (*struct{}, error) {
	id, err := s.sessionProc(ctx, sessionProcPath{ID: in.ID, PID: in.PID})
	if err != nil {
		return nil, err
	}
	return s.processStdin(ctx, &processStdinInput{ID: id, Body: in.Body})
}

func (s *server) signalSessionProcess(ctx context.Context, in *sessionProcSignalInput) (*struct{}, error) {
	id, err := s.sessionProc(ctx, sessionProcPath{ID: in.ID, PID: in.PID})
	if err != nil {
		return nil, err
	}
	return s.signalProcess(ctx, &processSignalInput{ID: id, Body: in.Body})
}

func (s *server) resizeSessionProcess(ctx context.Context, in *sessionProcResizeInput) (*struct{}, error) {
	id, err := s.sessionProc(ctx, sessionProcPath{ID: in.ID, PID: in.PID})
	if err != nil {
		return nil, err
	}
	return s.resizeProcess(ctx, &processResizeInput{ID: id, Body: in.Body})
}

func (s *server) waitSessionProcess(ctx context.Context, in *sessionProcWaitInput) (*processOutput, error) {
	id, err := s.sessionProc(ctx, sessionProcPath{ID: in.ID, PID: in.PID})
	if err != nil {
		return nil, err
	}
	return s.waitProcess(ctx, &processWaitInput{ID: id, TimeoutMS: in.TimeoutMS})
}

func (s *server) streamSessionProcess(ctx context.Context, in *sessionProcStreamInput) (*streamOutput, error) {
	id, err := s.sessionProc(ctx, sessionProcPath{ID: in.ID, PID: in.PID})
	if err != nil {
		return nil, err
	}
	return s.streamProcess(ctx, &processStreamInput{ID: id, ResumeParams: in.ResumeParams})
}
