// Package errkind is the one set of error kinds every package wraps, so that
// each transport (the HTTP API's problem mapping, the CLI's exit codes) maps
// a handful of kinds instead of every package's sentinels. It follows
// containerd's errdefs: a package keeps its own named sentinel for callers
// that need the precise reason, built with New so that it is also its kind.
//
//	var ErrNotFound = errkind.New(errkind.NotFound, "session not found")
//	errors.Is(err, errkind.NotFound) // true for it and anything wrapping it
package errkind

import "errors"

// Kind is a class of failure. Kinds are compared by identity (errors.Is).
type Kind struct{ name string }

func (k *Kind) Error() string { return k.name }

// The kinds. A transport maps each to one answer; anything of no kind is an
// internal error.
var (
	// NotFound: the named thing does not exist (or is not visible).
	NotFound = &Kind{"not found"}
	// Invalid: the request itself is wrong; retrying it unchanged fails again.
	Invalid = &Kind{"invalid"}
	// Conflict: the request clashes with the current state of the thing.
	Conflict = &Kind{"conflict"}
	// Policy: a sandbox policy is invalid or cannot be enforced here.
	Policy = &Kind{"policy"}
	// TooMany: a bound on concurrent work is reached; retry later.
	TooMany = &Kind{"too many"}
	// Unavailable: a dependency (an agent, a runtime) cannot serve now.
	Unavailable = &Kind{"unavailable"}
	// ShuttingDown: the daemon (or the component) is closing.
	ShuttingDown = &Kind{"shutting down"}
	// StorageFull: the durable store cannot write (the disk is full); reads
	// still work and writes succeed again once space is freed.
	StorageFull = &Kind{"storage full"}
)

// kinds is every kind, for Of.
var kinds = []*Kind{NotFound, Invalid, Conflict, Policy, TooMany, Unavailable, ShuttingDown, StorageFull}

type sentinel struct {
	kind *Kind
	msg  string
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.kind }

// New returns a sentinel error with text msg that is of kind k.
func New(k *Kind, msg string) error { return &sentinel{kind: k, msg: msg} }

// Wrap returns err marked as of kind k (nil for nil); its text is err's.
func Wrap(k *Kind, err error) error {
	if err == nil {
		return nil
	}
	return &wrapped{kind: k, err: err}
}

type wrapped struct {
	kind *Kind
	err  error
}

func (w *wrapped) Error() string   { return w.err.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.err, w.kind} }

// Of is the kind of err, or nil when it has none.
func Of(err error) *Kind {
	for _, k := range kinds {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}
