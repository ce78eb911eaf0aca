// Package microvm is the "microvm" isolation runtime: a sandbox in its own
// kernel under KVM. It is only offered where a boot probe really boots a
// guest within a timeout; an openable /dev/kvm proves nothing (a PVM host
// opens it and creates VMs, yet stock kernels hang in them).
//
// No VM backend ships yet: a backend that cannot be tested on the machines
// this project runs on would be untested code. Create therefore always
// returns sandbox.ErrUnavailable, saying whether the boot probe failed or
// the backend is missing, and the probe is what `agentbox doctor` reports.
package microvm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Name is the runtime's isolation name.
const Name = "microvm"

// Options configures the boot probe.
type Options struct {
	// QEMU is the emulator binary (default: qemu-system-x86_64 on PATH).
	QEMU string
	// Kernel is the guest kernel (default: the newest /boot/vmlinuz-*).
	Kernel string
	// Timeout bounds one boot (default 10 s).
	Timeout time.Duration
	// Accel is "kvm" (the default, the only one that makes a usable
	// runtime) or "tcg" (software emulation: seconds per boot, used to
	// check that the probe's guest and initramfs really work).
	Accel string
}

// Runtime is the microvm runtime.
type Runtime struct {
	opts Options

	mu     sync.Mutex
	probed bool
	boot   BootResult
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New returns the runtime. It probes nothing until Probe is called.
func New(opts Options) *Runtime { return &Runtime{opts: opts} }

// Name implements sandbox.Runtime.
func (r *Runtime) Name() string { return Name }

// Probe implements sandbox.Runtime: the first call boots a guest (up to
// Options.Timeout); later calls return the cached result. Keep it out of a
// daemon's start path.
func (r *Runtime) Probe(ctx context.Context) sandbox.Probe {
	b := r.bootResult(ctx)
	p := sandbox.Probe{Runtime: Name, Mechanisms: b.Mechanisms()}
	if !b.OK {
		p.Reason = "KVM boot probe failed: " + b.Reason
		return p
	}
	// The probe passed, but there is no backend to use it with.
	p.Reason = "microvm backend not implemented (the boot probe passed)"
	return p
}

func (r *Runtime) bootResult(ctx context.Context) BootResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.probed {
		r.boot = Boot(ctx, r.opts)
		r.probed = true
	}
	return r.boot
}

// Create implements sandbox.Runtime. It always fails with
// sandbox.ErrUnavailable (see the package comment).
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	b := r.bootResult(ctx)
	if !b.OK {
		return nil, fmt.Errorf("%w: microvm backend not implemented on this host: boot probe failed: %s", sandbox.ErrUnavailable, b.Reason)
	}
	return nil, fmt.Errorf("%w: microvm backend not implemented (boot probe passed in %v)", sandbox.ErrUnavailable, b.Took.Round(time.Millisecond))
}
