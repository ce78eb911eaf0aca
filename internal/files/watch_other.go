//go:build !linux

package files

import (
	"context"
	"errors"

	"github.com/agentbox/agentbox/internal/errkind"
)

// Watch needs inotify: the daemon runs on Linux only.
func (w *Workspace) Watch(ctx context.Context, p string) (<-chan Change, error) {
	return nil, errkind.Wrap(errkind.Unavailable, errors.New("files: watching needs Linux"))
}
