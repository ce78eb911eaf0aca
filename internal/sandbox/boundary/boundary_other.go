//go:build !linux

package boundary

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Runtime is unavailable off Linux: providers' containers are Linux.
type Runtime struct{}

// New returns the runtime.
func New() *Runtime { return &Runtime{} }

// Name implements sandbox.Runtime.
func (*Runtime) Name() string { return "process" }

// Verify fails: a provider's container is Linux.
func Verify() error { return errors.New("--boundary container: only on Linux") }

// Probe implements sandbox.Runtime.
func (*Runtime) Probe(context.Context) sandbox.Probe {
	return sandbox.Probe{Runtime: "process", Reason: "--boundary container is Linux only"}
}

// Create implements sandbox.Runtime.
func (*Runtime) Create(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, fmt.Errorf("%w: --boundary container is Linux only", sandbox.ErrUnavailable)
}
