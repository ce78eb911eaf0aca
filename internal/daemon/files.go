package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/execution"
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
// live sandboxed session is served as its sandbox sees it: reads of the
// sandbox's view of the workspace, changes made inside the sandbox, never
// under its overlay (they reach the host through its commit, like the
// agent's; docs/ARCHITECTURE.md, "Workspace files").
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
	o := files.Options{Judge: gateJudge(s.Cwd, opts)}
	if ss, ok := f.eng.Engine.(sessionSandboxer); ok {
		if sb, live := ss.SessionSandbox(id); live {
			// A direct workspace is served as the plain directory it is.
			if _, direct := directOf(sb); !direct {
				if err := viewSandbox(&o, sb, s.Cwd); err != nil {
					return nil, fmt.Errorf("session %s: %w", id, err)
				}
			}
			o.Until = f.eng.SandboxClosing(id, sb)
		}
	}
	w, err := files.Open(s.Cwd, o)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("session %s: its working directory is gone: %w", id, files.ErrNotFound)
	}
	return w, err
}

// directOf finds the directory of sb's workspace when it is a direct
// one (sandbox.DirectWorkspace), or of the sandbox it wraps.
func directOf(sb sandbox.Sandbox) (string, bool) {
	for range 8 {
		if d, ok := sb.(sandbox.DirectWorkspace); ok {
			return d.DirectWorkspace(), true
		}
		u, ok := sb.(interface{ Unwrap() sandbox.Sandbox })
		if !ok {
			return "", false
		}
		sb = u.Unwrap()
	}
	return "", false
}

// viewerOf finds the workspace view of sb, or of the sandbox it wraps
// (a session's sandbox with its egress proxy).
func viewerOf(sb sandbox.Sandbox) (sandbox.WorkspaceViewer, bool) {
	for range 8 {
		if v, ok := sb.(sandbox.WorkspaceViewer); ok {
			return v, true
		}
		u, ok := sb.(interface{ Unwrap() sandbox.Sandbox })
		if !ok {
			return nil, false
		}
		sb = u.Unwrap()
	}
	return nil, false
}

// gateJudge judges changes by the commit's rules opts for the workspace
// dir, read afresh per request.
func gateJudge(dir string, opts workspace.Options) func(ctx context.Context) (files.Judge, error) {
	return func(ctx context.Context) (files.Judge, error) {
		g, err := workspace.NewGate(ctx, dir, opts)
		if err != nil {
			return nil, err
		}
		return g.Check, nil
	}
}

// viewSandbox makes o serve the live sandbox sb, whose workspace shows
// inside at dir: reads of its current view (sandbox.WorkspaceViewer),
// the agent's uncommitted work included, and changes made inside it. A
// sandbox whose runtime cannot show its view is refused (409
// sandbox-live), rather than served a tree that is not what it sees.
func viewSandbox(o *files.Options, sb sandbox.Sandbox, dir string) error {
	v, ok := viewerOf(sb)
	if !ok {
		return fmt.Errorf("%w: its %s sandbox does not show its live workspace to the host (no workspace view); "+
			"its files are served once the sandbox has closed", files.ErrSandboxLive, sb.Info().Runtime)
	}
	r, err := v.ViewWorkspace()
	if errors.Is(err, sandbox.ErrClosed) {
		return fmt.Errorf("%w: its sandbox closed meanwhile; try again", files.ErrSandboxLive)
	}
	if err != nil {
		return err
	}
	o.View, o.Sandboxed = r, &files.Sandboxed{Sandbox: sb, Dir: dir}
	return nil
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

// processFiles is the files API's view of the processes started with a
// sandbox of their own (httpapi.FilesService for /v1/processes/{id}/files):
// while the process runs, its sandbox as for a live sandboxed session
// (reads of its view, changes inside it); once it has ended, the
// directory its sandbox committed into, kept by the execution service
// until the process is removed or forgotten. Changes are judged by the
// rules of the sandbox's commit.
type processFiles struct {
	ex *execution.Service
}

var _ httpapi.FilesService = processFiles{}

// Open implements httpapi.FilesService.
func (f processFiles) Open(ctx context.Context, id string) (*files.Workspace, error) {
	ws, err := f.ex.Workspace(id)
	if err != nil {
		return nil, err
	}
	opts := workspace.OptionsFor(ws.Spec)
	opts.Review = nil
	dir := ws.Dir
	o := files.Options{Judge: gateJudge(ws.Dir, opts)}
	if ws.Live != nil {
		inside := cmp.Or(ws.Spec.WorkspaceDir, ws.Spec.Workspace)
		if d, direct := directOf(ws.Live); direct {
			dir = d
			o.Judge = gateJudge(d, opts)
		} else if err := viewSandbox(&o, ws.Live, inside); err != nil {
			return nil, fmt.Errorf("process %s: %w", id, err)
		}
		o.Until = ws.Ended
	}
	w, err := files.Open(dir, o)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("process %s: its workspace is gone: %w", id, files.ErrNotFound)
	}
	return w, err
}
