//go:build !linux

package docker

import (
	"fmt"
	"os"

	"github.com/agentbox/agentbox/internal/provider"
)

// mountTmpfs fails: the bounded sandbox directory is Linux only.
func mountTmpfs(dir, _ string) error {
	return fmt.Errorf("%w: %s: resources.disk and resources.files: a bounded sandbox directory (%s) needs Linux", provider.ErrUnsupported, Name, dir)
}

// removeHostDir removes a sandbox's host directory.
func removeHostDir(dir string) error { return os.RemoveAll(dir) }
