package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/files"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

// sessionFiles is the files API's view of sessions (httpapi.FilesService):
// a session's workspace is its working directory on the host, and every
// change is judged by the rules its sandbox's commit applies (its
// policy's protected patterns, compiled as for its sandbox; a session
// without a sandbox gets the built-in list), read afresh per request. A
// live sandboxed session's changes are made inside its sandbox, never
// under its overlay: they reach the host through its commit, like the
// agent's (docs/ARCHITECTURE.md, "Workspace files").
type sessionFiles struct {
	eng *lateEngine
}

// sessionSandboxer is the engine's ability to hand out a live session's
// sandbox (*engine.Manager has it).
type sessionSandboxer interface {
	SessionSandbox(id string) (sandbox.Sandbox, bool)
}

var _ httpapi.FilesService = sessionFiles{}

// Open implements httpapi.FilesService.
func (f sessionFiles) Open(ctx context.Context, id string) (*files.Workspace, error) {
	s, err := f.eng.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if s.Cwd == "" {
		return nil, fmt.Errorf("session %s has no working directory: %w", id, files.ErrNotFound)
	}
	opts, err := commitOptions(s.Policy, s.Cwd)
	if err != nil {
		return nil, err
	}
	var in *files.Sandboxed
	if ss, ok := f.eng.Engine.(sessionSandboxer); ok {
		if sb, live := ss.SessionSandbox(id); live {
			in = &files.Sandboxed{Sandbox: sb, Dir: s.Cwd}
		}
	}
	cwd := s.Cwd
	w, err := files.Open(cwd, files.Options{
		Sandboxed: in,
		Judge: func(ctx context.Context) (files.Judge, error) {
			g, err := workspace.NewGate(ctx, cwd, opts)
			if err != nil {
				return nil, err
			}
			return g.Check, nil
		},
	})
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("session %s: its working directory is gone: %w", id, files.ErrNotFound)
	}
	return w, err
}

// commitOptions are the commit rules of a session's sandbox: its policy's
// protected patterns as its sandbox compiles them; without a policy, the
// built-in list.
func commitOptions(raw []byte, cwd string) (workspace.Options, error) {
	if len(raw) == 0 {
		return workspace.Options{Protected: policy.BuiltinProtected()}, nil
	}
	p, err := policy.Parse("session policy", raw)
	if err != nil {
		return workspace.Options{}, err
	}
	spec, err := p.Compile(cwd, os.LookupEnv)
	if err != nil {
		return workspace.Options{}, err
	}
	o := workspace.OptionsFor(spec)
	o.Review = nil
	return o, nil
}
