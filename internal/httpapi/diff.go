package httpapi

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/snapshot"
)

// SessionWorkspaces is an optional ability of an Engine: a session's
// workspace changes (GET …/diff) and commands in its sandbox (POST
// …/exec). Without it those routes answer 503.
type SessionWorkspaces interface {
	Diff(ctx context.Context, id, turn string) (snapshot.Diff, error)
	Exec(ctx context.Context, id string, run func(ctx context.Context, sb sandbox.Sandbox, limits sandbox.Limits) error) error
}

var _ SessionWorkspaces = (*engine.Manager)(nil)

// errWorkspacesDisabled answers the diff and session exec routes of an
// engine without SessionWorkspaces.
var errWorkspacesDisabled = newProblem(http.StatusServiceUnavailable, client.ProblemUnavailable, "This daemon keeps no session workspace states.")

func (s *server) workspaces() (SessionWorkspaces, error) {
	w, ok := s.eng.(SessionWorkspaces)
	if !ok {
		return nil, errWorkspacesDisabled
	}
	return w, nil
}

type diffInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	Turn string `query:"turn" pattern:"^turn_[0-9a-f]{32}$" doc:"A turn of the session: its changes only. Empty: every change since the session started."`
}

type diffOutput struct{ Body client.SessionDiff }

func diffOps() []route {
	return []route{
		&op[diffInput, diffOutput]{h: (*server).diff, opSpec: opSpec{
			ID: "getSessionDiff", Method: http.MethodGet, Path: "/v1/sessions/{id}/diff", Tag: "sessions",
			Summary: "Get what a session changed in its workspace",
			Description: "The changed files and a unified diff of the session's workspace since the session started, or of one turn " +
				"(turn): from the workspace before the turn to the workspace after its end (a sandboxed session's changes count once its " +
				"turn's commit has applied them; a turn still running, or one the daemon stopped during, is compared with the workspace now). " +
				"The states are recorded on disk at the session's start and before and after each turn, so a diff works for ended sessions " +
				"and after a restart. Regular files and symbolic links count; .git directories do not. Binary files and files over 1 MiB are " +
				"listed, not diffed. Bounded: 1000 files, 1 MiB of diff; truncated says a bound cut the answer. " +
				"Paths are the agent's: show them as untrusted text.",
			Errors: errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},
	}
}

func (s *server) diff(ctx context.Context, in *diffInput) (*diffOutput, error) {
	w, err := s.workspaces()
	if err != nil {
		return nil, err
	}
	d, err := w.Diff(ctx, in.ID, in.Turn)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := client.SessionDiff{Files: make([]client.DiffFile, len(d.Files)), Diff: d.Text, Truncated: d.Truncated}
	for i, f := range d.Files {
		out.Files[i] = client.DiffFile{Path: f.Path, Status: f.Status, Binary: f.Binary}
	}
	return &diffOutput{Body: out}, nil
}
