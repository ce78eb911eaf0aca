package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/sandbox"
)

type sessionExecInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	Body client.SessionExecRequest
}

// check enforces what the schema cannot: a command that is not empty.
func (in *sessionExecInput) check() []error {
	if len(in.Body.Argv) == 0 || in.Body.Argv[0] == "" {
		return []error{&fieldError{Location: "body.argv[0]", Message: "the command is empty"}}
	}
	return nil
}

func sessionExecOps() []route {
	return []route{
		&op[sessionExecInput, execOutput]{h: (*server).sessionExec, opSpec: opSpec{
			ID: "sessionExec", Method: http.MethodPost, Path: "/v1/sessions/{id}/exec", Tag: "exec",
			Summary: "Run a command in a session's sandbox",
			Description: "Runs argv in the sandbox of a live sandboxed session, beside its agent (also during a turn), under the session's " +
				"policy: the same namespaces, filesystem view, network rules and limits (memory, tasks and disk are shared with the agent; the " +
				"timeout and output limits apply to the command). The body takes no policy. The answer has the shape of POST /v1/exec's. " +
				"What the command writes stays in the sandbox until the session's next commit (the end of the running or next turn, or the " +
				"session's end), which applies it to the host with the same protected paths and reviews as the agent's changes. " +
				"A session without a sandbox is refused (409 no-sandbox), one that is not live too (409 not-live). " +
				"At most 4 commands run at once per session (then 429). The process is killed if the client goes away.",
			Limit:       limitMessage,
			ReadTimeout: 30 * time.Second,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge,
				http.StatusUnsupportedMediaType, http.StatusTooManyRequests, http.StatusServiceUnavailable),
		}},
	}
}

func (s *server) sessionExec(ctx context.Context, in *sessionExecInput) (*execOutput, error) {
	w, err := s.workspaces()
	if err != nil {
		return nil, err
	}
	req := execution.Request{Argv: in.Body.Argv, Stdin: []byte(in.Body.Stdin), Timeout: time.Duration(in.Body.TimeoutMS) * time.Millisecond}
	var res execution.Result
	err = w.Exec(ctx, in.ID, func(ctx context.Context, sb sandbox.Sandbox, limits sandbox.Limits) error {
		var err error
		res, err = execution.RunIn(ctx, sb, limits, req)
		return err
	})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &execOutput{Body: toExecResult(res)}, nil
}
