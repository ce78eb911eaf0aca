// Package relay runs a session on a provider's sandbox: it makes the
// sandbox (provider.Provider.Create, with a token made for it alone),
// starts the same agent in the agentbox daemon inside, and relays between
// that inner session and the host's session engine as an agent.Adapter, so
// the engine's own turn, request broker and recovery logic serve remote
// sessions unchanged.
//
// The host's store is the source of truth. Every inner event the relay
// hands the engine carries the inner seq it had (in its raw field, see
// Raw), persisted in the same row, so after a cut connection or a host
// restart the relay reads the inner log again from exactly after the last
// event the host persisted: no loss, no duplicate.
//
// On a provider that pauses sandboxes a relayed session can be paused
// (agent.Pauser) and is resumed by its next start; on one that keeps
// snapshots, a session whose sandbox was lost resumes on a fresh sandbox
// made from a snapshot of it (session.go: keep, reconnect).
//
// Nothing secret is stored: a sandbox's token is derived from the daemon's
// relay key (a file of the data directory, mode 0600) and a random nonce
// kept in the session's native id, with HMAC-SHA256; a fresh nonce per
// sandbox means a token is never reused.
package relay

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// KeyFileName is the relay key's file in the data directory.
const KeyFileName = "relay.key"

// DefaultLostAfter is how long a relay keeps reconnecting to an inner
// daemon it cannot reach (the provider not saying the sandbox is gone)
// before the session ends with an error.
const DefaultLostAfter = 2 * time.Minute

// Bounds of what the relay reads from an inner daemon, which runs beside
// the agent and is as hostile as it is.
const (
	// MaxInnerEvent bounds one inner event as the inner daemon encodes it
	// (one server-sent event's data, one line of the stream, each event
	// of a backfilled page): agent.MaxEventBytes, the bound of one
	// message of an agent running on this host.
	MaxInnerEvent = agent.MaxEventBytes
	// MaxInnerAnswer bounds every other answer (a session, a turn, a
	// resolution).
	MaxInnerAnswer = 1 << 20
	// MaxInnerProblem bounds an error answer, whose detail reaches the
	// host's errors and events.
	MaxInnerProblem = 64 << 10
	// maxUnclaimed bounds the inner turns' results nobody waits for (a
	// hostile inner daemon can complete turns that were never sent).
	maxUnclaimed = 64
	// maxAsking bounds the permission and question requests of one
	// session being asked on the host at once; the inner daemon's
	// further ones stay unanswered there.
	maxAsking = 16
)

// innerClient returns a client of an inner daemon: its token, and every
// answer bounded (MaxInnerEvent, MaxInnerAnswer, MaxInnerProblem).
func innerClient(address, token string) (*client.Client, error) {
	return client.New(address, client.WithToken(token),
		client.WithLimits(client.Limits{Event: MaxInnerEvent, Answer: MaxInnerAnswer, Problem: MaxInnerProblem}))
}

// Config configures a Relay.
type Config struct {
	// Providers are the configured providers; Default names the one of
	// sessions created without a provider ("" runs them on this host).
	Providers *provider.Registry
	Default   string
	// Options are each provider's Spec.Options, by provider name.
	Options map[string]map[string]string
	// Binary is the host path of the static agentbox binary uploaded to
	// sandboxes (the running daemon's own executable).
	Binary string
	// Key derives sandbox tokens and the owner label (LoadKey).
	Key []byte
	// LastRelayed returns the inner seq of the last relayed event the
	// host persisted for a session (Seq of its Raw), 0 when none: the
	// cursor a resumed relay reads from.
	LastRelayed func(ctx context.Context, sessionID string) (int64, error)
	// LostAfter bounds reconnecting to an unreachable inner daemon
	// (default DefaultLostAfter).
	LostAfter time.Duration
	// Egress, when set, makes the host side of the network of a session's
	// sandbox on a provider that carries its egress
	// (provider.EgressCarrier): without it such a sandbox has no network,
	// and the session's environment goes in as it is.
	Egress func(ctx context.Context, req EgressRequest) (*Egress, error)
	// ExecEgress, when set, makes the host side of the network of an
	// exec's sandbox on a provider that carries its egress and enforces
	// its policy (provider.PolicyMapper): a gate deciding every
	// connection under the exec's policy. Without it such a sandbox has
	// no network.
	ExecEgress func(ctx context.Context, req ExecEgressRequest) (*Egress, error)
	Log        *slog.Logger
}

// ExecEgressRequest is what the host side of an exec sandbox's network is
// made for: the sandbox (provider/id, for the audit records) and the
// exec's effective policy.
type ExecEgressRequest struct {
	Sandbox string
	Policy  json.RawMessage
}

// EgressRequest is what the host side of a sandbox's network is made for:
// the host session, its agent (as this host runs it: its model APIs),
// its configuration and its policy, and the host session's own network
// asks and reports.
type EgressRequest struct {
	SessionID, Agent string
	Config           agent.Config
	Policy           json.RawMessage
	// Ask asks the host session about a destination no rule settles
	// (network.default ask), for one connection, as for a local
	// sandbox; nil when the host session cannot be asked (such a
	// destination is then denied).
	Ask sandbox.Asker
	// OnViolation reports each refused connection as the host session's
	// sandbox.violation (coalesced there); nil when it cannot. It does
	// not block.
	OnViolation func(sandbox.Violation)
}

// Egress is the host side of one sandbox's network: the host daemon's
// egress proxy for it.
type Egress struct {
	// Serve answers the connections the provider carries out of the
	// sandbox; nil when the sandbox has no network at all (nothing is
	// carried).
	Serve func(net.Listener) error
	// Env is set over the session's environment in the inner session:
	// the proxy's variables, the model routes' base URLs and, in every
	// credential variable the session set, its placeholder: no
	// credential enters the sandbox.
	Env map[string]string
	// Close stops it; called once the provider stopped carrying.
	Close func()
}

// Relay places sessions on providers. It implements engine.Remote.
type Relay struct {
	cfg Config
}

// New returns a Relay.
func New(cfg Config) (*Relay, error) {
	if len(cfg.Key) < 32 {
		return nil, errors.New("relay: the key must have at least 32 bytes")
	}
	if cfg.Providers == nil {
		cfg.Providers = provider.NewRegistry()
	}
	if cfg.Default != "" {
		if _, err := cfg.Providers.Get(cfg.Default); err != nil {
			return nil, fmt.Errorf("default provider: %w", err)
		}
	}
	if cfg.LostAfter <= 0 {
		cfg.LostAfter = DefaultLostAfter
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.LastRelayed == nil {
		return nil, errors.New("relay: LastRelayed is required")
	}
	return &Relay{cfg: cfg}, nil
}

// LoadKey returns the relay key in dir (KeyFileName), making it (32 bytes
// of crypto/rand, mode 0600) when there is none. A key others can read is
// refused.
func LoadKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, KeyFileName)
	b, err := os.ReadFile(path)
	if err == nil {
		fi, serr := os.Stat(path)
		if serr != nil {
			return nil, serr
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("relay key %s: mode %v lets others read it (chmod 600)", path, fi.Mode().Perm())
		}
		key, derr := hex.DecodeString(strings.TrimSpace(string(b)))
		if derr != nil || len(key) < 32 {
			return nil, fmt.Errorf("relay key %s is malformed (remove it: sandboxes it made are then removed at the next start)", path)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".relay-key-*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.Remove(f.Name()) }()
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return nil, err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return nil, err
	}
	if err := os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
		return LoadKey(dir)
	} else if err != nil {
		return nil, err
	}
	return key, nil
}

// Owner is the label of every sandbox this daemon makes (Spec.Owner):
// derived from the key, so it is stable across restarts and distinct per
// data directory.
func (r *Relay) Owner() string {
	return "agentbox-" + hex.EncodeToString(r.mac("owner")[:8])
}

func (r *Relay) mac(parts ...string) []byte {
	h := hmac.New(sha256.New, r.cfg.Key)
	h.Write([]byte("agentbox relay\x00"))
	h.Write([]byte(strings.Join(parts, "\x00")))
	return h.Sum(nil)
}

// token is the inner daemon's token of the sandbox with this nonce.
func (r *Relay) token(provider, nonce string) string {
	return base64.RawURLEncoding.EncodeToString(r.mac("token", provider, nonce))
}

// Providers returns the registry.
func (r *Relay) Providers() *provider.Registry { return r.cfg.Providers }

// Default returns the default provider's name ("" when sessions run here
// by default).
func (r *Relay) Default() string { return r.cfg.Default }

// Place implements engine.Remote: the native id of a new session on the
// named provider (the default when empty), "" when it runs on this host.
func (r *Relay) Place(name string) (string, error) {
	if name == "" {
		name = r.cfg.Default
	}
	if name == "" {
		return "", nil
	}
	if _, err := r.cfg.Providers.Get(name); err != nil {
		return "", err
	}
	nonce, err := newNonce()
	if err != nil {
		return "", err
	}
	return native{Provider: name, Nonce: nonce}.String(), nil
}

// newNonce makes the nonce of a sandbox's token: 16 bytes of crypto/rand.
func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}

// Adapter implements engine.Remote: the adapter of a session placed by
// native, running the agent named agentName (described by info on this
// host) with the session's policy, forwarded to the inner daemon.
func (r *Relay) Adapter(agentName string, info agent.Info, nativeID string, policy json.RawMessage) (agent.Adapter, bool) {
	n, ok := parseNative(nativeID)
	if !ok {
		return nil, false
	}
	return &adapter{r: r, agent: agentName, info: info, policy: policy, placed: n}, true
}

// Remove implements engine.Remote: the sandbox of a deleted session is
// destroyed, and the snapshot that kept a lost one deleted (a session
// never placed or already gone is no error).
func (r *Relay) Remove(ctx context.Context, nativeID string) error {
	n, ok := parseNative(nativeID)
	if !ok || n.Sandbox == "" {
		return nil
	}
	p, err := r.cfg.Providers.Get(n.Provider)
	if err != nil {
		return err
	}
	if err := p.Destroy(ctx, n.Sandbox); err != nil && !errors.Is(err, provider.ErrGone) {
		return fmt.Errorf("destroy sandbox %s on %s: %w", n.Sandbox, n.Provider, err)
	}
	if sn, ok := p.(provider.Snapshotter); ok && n.Snapshot != "" {
		if err := sn.DeleteSnapshot(ctx, n.Snapshot); err != nil {
			return fmt.Errorf("delete snapshot %s on %s: %w", n.Snapshot, n.Provider, err)
		}
	}
	return nil
}

// Sandboxes returns the provider and sandbox of a native id, for the
// reconciliation at start; ok is false when it names none.
func Sandboxes(nativeID string) (providerName, sandbox string, ok bool) {
	n, ok := parseNative(nativeID)
	if !ok || n.Sandbox == "" {
		return "", "", false
	}
	return n.Provider, n.Sandbox, true
}

// Reconcile removes, on every provider that can list, the sandboxes this
// daemon made that no session keeps (keep: a sandbox id set by provider,
// from the native ids of the sessions not ended for good): what a crash
// left half-created. It returns the removed ones.
func (r *Relay) Reconcile(ctx context.Context, keep map[string]map[string]bool) ([]string, error) {
	var removed []string
	var errs []error
	for _, name := range r.cfg.Providers.Names() {
		p, _ := r.cfg.Providers.Get(name)
		l, ok := p.(provider.Lister)
		if !ok {
			continue
		}
		ids, err := l.List(ctx, r.Owner())
		if err != nil {
			errs = append(errs, fmt.Errorf("list sandboxes on %s: %w", name, err))
			continue
		}
		for _, id := range ids {
			if keep[name][id] {
				continue
			}
			if err := p.Destroy(ctx, id); err != nil && !errors.Is(err, provider.ErrGone) {
				errs = append(errs, fmt.Errorf("destroy sandbox %s on %s: %w", id, name, err))
				continue
			}
			r.cfg.Log.InfoContext(ctx, "removed a sandbox no session keeps", "provider", name, "sandbox", id)
			removed = append(removed, name+"/"+id)
		}
	}
	return removed, errors.Join(errs...)
}

// native is a relayed session's native id: where it runs. The engine
// stores it with the session before anything is made, so a session
// created on a provider is never resumed on the host.
type native struct {
	Provider, Nonce string
	// Sandbox and Session are set once the sandbox and the inner session
	// exist.
	Sandbox, Session string
	// Snapshot, when set, is the snapshot that keeps the session's state
	// after its sandbox was lost (provider.Snapshotter): a resume makes a
	// fresh sandbox from it. Cleared (and the snapshot deleted) once the
	// session runs on that sandbox.
	Snapshot string
}

const nativePrefix = "relay/"

func (n native) String() string {
	s := nativePrefix + url.PathEscape(n.Provider) + "/" + n.Nonce
	if n.Sandbox != "" {
		s += "/" + url.PathEscape(n.Sandbox)
		if n.Session != "" {
			s += "/" + url.PathEscape(n.Session)
			if n.Snapshot != "" {
				s += "/" + url.PathEscape(n.Snapshot)
			}
		}
	}
	return s
}

func parseNative(s string) (native, bool) {
	rest, ok := strings.CutPrefix(s, nativePrefix)
	if !ok {
		return native{}, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 2 || len(parts) > 5 {
		return native{}, false
	}
	for i, p := range parts {
		u, err := url.PathUnescape(p)
		if err != nil || u == "" {
			return native{}, false
		}
		parts[i] = u
	}
	n := native{Provider: parts[0], Nonce: parts[1]}
	if len(parts) > 2 {
		n.Sandbox = parts[2]
	}
	if len(parts) > 3 {
		n.Session = parts[3]
	}
	if len(parts) > 4 {
		n.Snapshot = parts[4]
	}
	return n, true
}

// Raw is the raw field of an event the relay hands the engine: which inner
// event it is. Seq is the relay's cursor.
type Raw struct {
	Relay struct {
		Seq int64  `json:"seq"`
		ID  string `json:"id,omitempty"`
	} `json:"relay"`
}

// InnerSeq returns the inner seq a relayed event's raw field carries, ok
// false for an event the relay did not hand over.
func InnerSeq(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || !strings.Contains(string(raw), `"relay"`) {
		return 0, false
	}
	var r Raw
	if err := json.Unmarshal(raw, &r); err != nil || r.Relay.Seq <= 0 {
		return 0, false
	}
	return r.Relay.Seq, true
}

// Inner returns what reaches the inner session of a relayed session's
// native id, derived from the daemon's key as the relay derives it: the
// provider, the sandbox, the inner session and the inner daemon's token.
// For tests and operators' tools that read the inner log directly.
func Inner(key []byte, nativeID string) (providerName, sandbox, session, token string, ok bool) {
	n, ok := parseNative(nativeID)
	if !ok || n.Sandbox == "" {
		return "", "", "", "", false
	}
	r := &Relay{cfg: Config{Key: key}}
	return n.Provider, n.Sandbox, n.Session, r.token(n.Provider, n.Nonce), true
}

// SnapshotOf returns the snapshot a relayed session's native id names
// (the state of a lost sandbox a resume starts a fresh one from), "" when
// none.
func SnapshotOf(nativeID string) string {
	n, _ := parseNative(nativeID)
	return n.Snapshot
}

// OwnerOf is the owner label of the sandboxes of the daemon with key.
func OwnerOf(key []byte) string { return (&Relay{cfg: Config{Key: key}}).Owner() }
