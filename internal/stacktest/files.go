package stacktest

import (
	"context"

	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/files"
)

// stackFiles serves the files API on each session's working directory,
// without the commit's rules (the daemon's sessionFiles adds them).
type stackFiles struct{ mgr *engine.Manager }

func (f stackFiles) Open(ctx context.Context, id string) (*files.Workspace, error) {
	s, err := f.mgr.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return files.Open(s.Cwd, files.Options{})
}
