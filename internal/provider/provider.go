// Package provider defines where a sandbox lives: the interface every
// sandbox provider (docker, e2b, daytona, vercel) implements, the optional
// abilities a provider may have, and the registry of the providers a daemon
// was built with.
//
// A provider only makes, finds and removes sandboxes. What runs a session
// inside one is always the same: the host daemon starts agentbox's own
// static binary there as `agentbox serve`, with a token made for that
// sandbox alone, and relays to it; the host's store stays the source of
// truth. The local runtimes (process, gvisor) are not providers: a session
// without a provider runs on this machine as before.
package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/errkind"
)

// Errors that are part of the contract. Implementations wrap them with %w and
// keep the provider's own message (never a credential) in the text.
var (
	// ErrUnknown: no provider of that name is built in or configured.
	ErrUnknown = errkind.New(errkind.Invalid, "unknown provider")
	// ErrCredentials: the provider's credentials are missing or refused.
	ErrCredentials = errkind.New(errkind.Unavailable, "provider credentials missing or refused")
	// ErrQuota: the provider refused for a quota or rate limit; retry later.
	ErrQuota = errkind.New(errkind.TooMany, "provider quota reached")
	// ErrUnavailable: the provider failed (5xx, timeout, connection refused).
	ErrUnavailable = errkind.New(errkind.Unavailable, "provider unavailable")
	// ErrGone: the sandbox no longer exists on the provider.
	ErrGone = errkind.New(errkind.NotFound, "sandbox gone")
	// ErrUnsupported: the provider cannot do what a policy or request asks
	// (the text names the field); fail closed.
	ErrUnsupported = errkind.New(errkind.Policy, "not supported by the provider")
)

// Capabilities says what a provider can do beyond the required interface.
// Each true flag is backed by the optional interface of the same name.
type Capabilities struct {
	PauseResume  bool `json:"pause_resume"`  // Pauser
	Snapshot     bool `json:"snapshot"`      // Snapshotter
	EgressRules  bool `json:"egress_rules"`  // the provider enforces egress allow/deny lists itself
	PreviewURLs  bool `json:"preview_urls"`  // ports reachable from outside
	FileTransfer bool `json:"file_transfer"` // FileTransferer
	// CarriedEgress: the sandbox has no network of its own; its
	// connections are carried to the host, whose egress proxy decides
	// each under the session's policy and asks and reports through the
	// host session (EgressCarrier).
	CarriedEgress bool `json:"carried_egress"`
	// Runtimes are the isolation runtimes the provider can run a sandbox
	// under (e.g. "runc", "runsc"); empty when it has one it does not name.
	Runtimes []string `json:"runtimes,omitempty"`
}

// Spec is what Create makes.
type Spec struct {
	// Owner names the daemon that creates the sandbox; providers label the
	// sandbox with it so that List finds what a crashed daemon left.
	Owner string
	// Binary is the host path of the static agentbox binary to run inside
	// as `agentbox serve`.
	Binary string
	// Token is the bearer token the inner daemon requires: made by the
	// caller for this sandbox alone, never reused, never logged.
	Token string
	// Options are the provider's own settings (image or template, region,
	// size, runtime), validated by the provider: an unknown key is refused.
	Options map[string]string
	// Resources; zero means the provider's default.
	CPUs        float64
	MemoryBytes int64
	// Timeout is the sandbox's life on providers that bound it; zero means
	// the provider's default.
	Timeout time.Duration
	// Labels are kept on the sandbox for the operator (never secrets).
	Labels map[string]string
	// Policy is the host-resolved effective policy (a JSON policy object)
	// of what runs in the sandbox; nil: none. A PolicyMapper enforces it
	// through the sandbox it makes (Create passes it through MapPolicy's
	// check, and refuses what that refuses); other providers ignore it:
	// the inner daemon is handed the whole policy and enforces it.
	Policy json.RawMessage
}

// Sandbox is a running sandbox and how to reach the agentbox daemon inside.
type Sandbox struct {
	// ID is the provider's id of the sandbox.
	ID string
	// Address is the inner daemon's API, as client.New takes it
	// ("http://127.0.0.1:PORT", "https://…", "unix:///path.sock").
	Address string
	// Token is the inner daemon's bearer token (Spec.Token).
	Token string
}

// Provider makes, finds and removes sandboxes. All methods are safe for
// concurrent use; ctx bounds each call, never a sandbox's life.
type Provider interface {
	Name() string
	Capabilities() Capabilities
	// Health checks that the provider is reachable with the configured
	// credentials, for doctor and GET /v1/providers.
	Health(ctx context.Context) error
	// Create makes a sandbox running the inner daemon and returns once it
	// answers. On failure nothing is left running on the provider.
	Create(ctx context.Context, spec Spec) (Sandbox, error)
	// Connect finds a sandbox Create made (after a host restart); ErrGone
	// when it no longer exists. token is the one given to Create.
	Connect(ctx context.Context, id, token string) (Sandbox, error)
	// Destroy removes the sandbox and everything it holds on the provider
	// (containers, volumes). Destroying a sandbox that is gone is no error.
	Destroy(ctx context.Context, id string) error
}

// Lister lists the sandboxes an owner made, so a daemon can remove at start
// what it left half-created before a crash.
type Lister interface {
	List(ctx context.Context, owner string) ([]string, error)
}

// Pauser pauses a sandbox and resumes it with its files (and, where the
// provider can, its memory).
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id, token string) (Sandbox, error)
}

// Snapshotter keeps a sandbox's state and starts new sandboxes from it.
// Snapshot works on a sandbox whose inner daemon died too (its state as
// the crash left it), so that a session can resume on a fresh sandbox;
// CreateFrom runs a new inner daemon with spec's token on that state. A
// snapshot stays on the provider until DeleteSnapshot (no error when it
// is gone).
type Snapshotter interface {
	Snapshot(ctx context.Context, id string) (snapshotID string, err error)
	CreateFrom(ctx context.Context, snapshotID string, spec Spec) (Sandbox, error)
	DeleteSnapshot(ctx context.Context, snapshotID string) error
}

// PolicyMapper is implemented by providers whose sandbox is the boundary
// of what runs in it: the inner daemon there cannot build sandboxes of its
// own (an unprivileged container), so each field of a policy is enforced
// by the sandbox itself (resources, filesystem, capabilities), by the
// host (network rules, through the carried egress: EgressCarrier), by the
// inner daemon (what needs no privilege: timeouts, output, environment),
// or refused. MapPolicy is that mapping; a sandbox made with Spec.Policy
// passes the same check.
type PolicyMapper interface {
	// MapPolicy checks policy (Spec.Policy) field by field and returns the
	// policy the inner daemon still enforces, started in its boundary mode
	// (serve --boundary), where it runs processes directly in the sandbox.
	// A field nothing enforces is an error wrapping ErrUnsupported that
	// names it.
	MapPolicy(policy json.RawMessage) (inner json.RawMessage, err error)
}

// EgressCarrier is implemented by providers whose sandboxes have no
// network of their own but carry their connections to the host: each
// connection the sandbox's agent opens to the egress proxy's address
// inside (127.0.0.1:EgressPort, on the sandbox's loopback) arrives, on the
// host, on a listener handed to serve, which decides it under the host's
// policy and dials for it (the host daemon's egress proxy). The host's
// secrets and DNS never enter the sandbox.
type EgressCarrier interface {
	// CarryEgress hands sandbox id's connections to serve, called once
	// in a goroutine of its own with the listener they arrive on, until
	// stop (which closes that listener) or Destroy. Calling it again for
	// the same sandbox (a host restart) replaces the previous listener.
	CarryEgress(ctx context.Context, id string, serve func(net.Listener) error) (stop func(), err error)
}

// EgressPort is where the egress proxy answers inside a sandbox whose
// provider carries its egress: the same port as a local sandbox's proxy.
const EgressPort = 3128

// FileTransferer moves files in and out of a sandbox through the provider's
// own endpoints (the inner daemon's files API serves the same once it runs).
type FileTransferer interface {
	WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error
	ReadFile(ctx context.Context, id, path string) ([]byte, error)
}

// Registry holds the providers a daemon was configured with, by name.
type Registry struct {
	mu sync.RWMutex
	m  map[string]Provider
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{m: map[string]Provider{}} }

// Register adds p. It panics on an empty or duplicate name: providers are
// registered once, by the composition root.
func (r *Registry) Register(p Provider) {
	name := p.Name()
	if name == "" {
		panic("provider: Register with an empty name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[name]; dup {
		panic(fmt.Sprintf("provider: Register called twice for %q", name))
	}
	r.m[name] = p
}

// Get returns the provider named name, or an error wrapping ErrUnknown.
func (r *Registry) Get(name string) (Provider, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.m[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (configured: %v)", ErrUnknown, name, r.namesLocked())
	}
	return p, nil
}

// Names returns the registered names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.namesLocked()
}

func (r *Registry) namesLocked() []string {
	names := make([]string, 0, len(r.m))
	for n := range r.m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
