package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/files"
	"github.com/agentbox/agentbox/internal/httpapi"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

// sessionFiles is the files API's view of sessions (httpapi.FilesService):
// a session's workspace is its working directory on the host, and every
// change is judged by the rules its sandbox's commit applies (its
// policy's protected patterns, compiled as for its sandbox; a session
// without a sandbox gets the built-in list), read afresh per request. A
// session whose sandbox is live takes no change through the API: its
// agent works on an overlay whose next commit would overwrite what the
// API wrote underneath (docs/ARCHITECTURE.md, "Workspace files").
type sessionFiles struct {
	eng httpapi.Engine
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
	var readOnly error
	if ls, ok := f.eng.(httpapi.LiveSandboxes); ok {
		if _, live := ls.LiveSandbox(id); live {
			readOnly = fmt.Errorf("%w: session %s: changes reach a running sandbox's workspace through its commit only; "+
				"write between sessions (after it is stopped or ended) or through the agent", files.ErrSandboxLive, id)
		}
	}
	cwd := s.Cwd
	w, err := files.Open(cwd, files.Options{
		ReadOnly: readOnly,
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
