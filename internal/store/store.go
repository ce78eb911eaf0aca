// Package store defines the durable state of the daemon: sessions, their
// append-only event logs and their pending permission and question requests.
//
// Every implementation must pass the conformance suite in storetest. The
// contract that matters most: an event is durably written before Append
// returns and before any subscriber sees it, and seq numbers are per session,
// start at 1 and have no gaps.
package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/errkind"
)

// Errors that are part of the contract. Implementations wrap them with %w.
var (
	ErrNotFound        = errkind.New(errkind.NotFound, "not found")
	ErrExists          = errkind.New(errkind.Conflict, "already exists")
	ErrAlreadyResolved = errkind.New(errkind.Conflict, "already resolved")
	ErrClosed          = errkind.New(errkind.ShuttingDown, "store closed")
)

// Status is the lifecycle state of a session.
type Status string

// Session states.
const (
	StatusStarting    Status = "starting"    // agent being launched
	StatusIdle        Status = "idle"        // ready, no turn running
	StatusRunning     Status = "running"     // a turn is in progress
	StatusEnded       Status = "ended"       // finished normally or terminated
	StatusFailed      Status = "failed"      // the agent failed
	StatusInterrupted Status = "interrupted" // the daemon stopped while the session was live
	StatusStopped     Status = "stopped"     // its idle agent process was stopped; the next message resumes it
	StatusPaused      Status = "paused"      // its sandbox on a provider is paused; the next message resumes it
)

// Live reports whether a session in this state has (or should have) an agent
// process attached.
func (s Status) Live() bool {
	return s == StatusStarting || s == StatusIdle || s == StatusRunning
}

// Session is the stored record of a session.
type Session struct {
	ID              string            `json:"id"`
	Agent           string            `json:"agent"`
	Model           string            `json:"model,omitempty"`
	Mode            string            `json:"mode,omitempty"`
	PermissionMode  string            `json:"permission_mode,omitempty"`
	Cwd             string            `json:"cwd,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Status          Status            `json:"status"`
	NativeSessionID string            `json:"native_session_id,omitempty"`
	CurrentTurnID   string            `json:"current_turn_id,omitempty"`
	CreatedAt       time.Time         `json:"created_at"`
	UpdatedAt       time.Time         `json:"updated_at"`
	EndedAt         *time.Time        `json:"ended_at,omitempty"`
	// Policy is the session's effective sandbox policy (JSON), nil when it
	// runs without a sandbox. It is fixed at create: a resumed session runs
	// under the same policy.
	Policy json.RawMessage `json:"policy,omitempty"`
	// EnvNames are the names of the environment variables the client gave
	// the session at create, sorted. Their values are never stored: a
	// resume after the daemon lost them (a restart) needs them again,
	// unless the daemon holds them itself.
	EnvNames []string `json:"env_names,omitempty"`
	// MCPServers are the session's MCP servers (JSON, as the session
	// package writes them) without their env and header values, which are
	// never stored: a resume after the daemon lost them needs them again.
	MCPServers json.RawMessage `json:"mcp_servers,omitempty"`
}

// ListOptions filters and pages ListSessions. Sessions are returned newest
// first.
type ListOptions struct {
	Status Status // empty: any
	Limit  int    // <= 0: implementation default (100)
	// Before pages backwards: only sessions created strictly before the
	// session with this ID.
	Before string
}

// RequestKind distinguishes the two kinds of pending request.
type RequestKind string

// Request kinds.
const (
	KindPermission RequestKind = "permission"
	KindQuestion   RequestKind = "question"
)

// RequestState is the state of a pending request.
type RequestState string

// Request states.
const (
	StatePending  RequestState = "pending"
	StateResolved RequestState = "resolved"
)

// Request is a permission or question request awaiting (or having had) an
// answer. Payload is the event data of the requested event; Resolution that of
// the resolved event.
type Request struct {
	SessionID  string          `json:"session_id"`
	ID         string          `json:"id"`
	Kind       RequestKind     `json:"kind"`
	State      RequestState    `json:"state"`
	Payload    json.RawMessage `json:"payload"`
	Resolution json.RawMessage `json:"resolution,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	ResolvedAt *time.Time      `json:"resolved_at,omitempty"`
}

// Store is the daemon's durable state. All methods are safe for concurrent
// use.
type Store interface {
	CreateSession(ctx context.Context, s Session) error
	GetSession(ctx context.Context, id string) (Session, error)
	ListSessions(ctx context.Context, opts ListOptions) ([]Session, error)
	// UpdateSession applies fn to the current record and stores the result
	// atomically; fn must not change the ID.
	UpdateSession(ctx context.Context, id string, fn func(*Session) error) (Session, error)
	// DeleteSession removes a session with its events and requests.
	DeleteSession(ctx context.Context, id string) error

	// Append durably appends events to a session's log, assigning ID (when
	// empty), Seq, SessionID, Time (when zero) and Schema, and returns them
	// as stored. It returns only after the events are durable.
	Append(ctx context.Context, sessionID string, evs ...event.Event) ([]event.Event, error)
	// Events returns up to limit events with seq > after, in order.
	Events(ctx context.Context, sessionID string, after int64, limit int) ([]event.Event, error)
	// Subscribe returns every event with seq > after, first the stored ones
	// and then live ones as they are appended, until ctx ends. The channel is
	// closed when ctx ends or the store closes. A slow reader never loses
	// events; it only falls behind.
	Subscribe(ctx context.Context, sessionID string, after int64) (<-chan event.Event, error)

	// CreateRequest stores a pending request and appends its requested event
	// in one atomic step, returning the stored event.
	CreateRequest(ctx context.Context, r Request, requested event.Event) (event.Event, error)
	// ResolveRequest marks a pending request resolved with the resolved
	// event's data and appends that event in one atomic step. It fails with
	// ErrAlreadyResolved (and changes nothing) if it was already resolved.
	ResolveRequest(ctx context.Context, sessionID, id string, resolved event.Event) (event.Event, error)
	GetRequest(ctx context.Context, sessionID, id string) (Request, error)
	// ListRequests returns a session's requests in creation order; an empty
	// state means any.
	ListRequests(ctx context.Context, sessionID string, state RequestState) ([]Request, error)

	Close() error
}
