package engine

import (
	"encoding/json"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

// The engine's view types are what it shows its callers (the HTTP API, the
// ACP server, tests): the session and request records as the engine sees
// them, so that no caller speaks the store's types. They are converted from
// the store's records here, in one place.

// Status is the lifecycle state of a session.
type Status string

// Session states (those of the store's records).
const (
	StatusStarting    = Status(store.StatusStarting)    // agent being launched
	StatusIdle        = Status(store.StatusIdle)        // ready, no turn running
	StatusRunning     = Status(store.StatusRunning)     // a turn is in progress
	StatusEnded       = Status(store.StatusEnded)       // finished normally or terminated
	StatusFailed      = Status(store.StatusFailed)      // the agent failed
	StatusInterrupted = Status(store.StatusInterrupted) // the daemon stopped while the session was live
	StatusStopped     = Status(store.StatusStopped)     // its idle agent was stopped; the next message resumes it
	StatusPaused      = Status(store.StatusPaused)      // its sandbox on a provider is paused; the next message resumes it
)

// Live reports whether a session in this state has (or should have) an agent
// process attached.
func (s Status) Live() bool { return store.Status(s).Live() }

// Session is a session as the engine shows it.
type Session struct {
	ID              string
	Agent           string
	Model           string
	Mode            string
	PermissionMode  string
	Cwd             string
	Metadata        map[string]string
	Status          Status
	NativeSessionID string
	CurrentTurnID   string
	CreatedAt       time.Time
	UpdatedAt       time.Time
	EndedAt         *time.Time
	// Policy is the session's effective sandbox policy (JSON), nil when it
	// runs without a sandbox.
	Policy json.RawMessage
	// EnvNames are the names of the variables the client gave at create.
	EnvNames []string
	// Adjusted, in what Create returns, are the limits the request's
	// policy asked for that the effective policy lowers.
	Adjusted []LimitAdjustment
}

func viewSession(s store.Session) Session {
	return Session{
		ID: s.ID, Agent: s.Agent, Model: s.Model, Mode: s.Mode, PermissionMode: s.PermissionMode,
		Cwd: s.Cwd, Metadata: s.Metadata, Status: Status(s.Status),
		NativeSessionID: s.NativeSessionID, CurrentTurnID: s.CurrentTurnID,
		CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt, EndedAt: s.EndedAt,
		Policy: s.Policy, EnvNames: s.EnvNames,
	}
}

// ListOptions filters and pages List. Sessions come newest first.
type ListOptions struct {
	Status Status // empty: any
	Limit  int    // <= 0: the store's default (100)
	// Before pages backwards: only sessions created strictly before the
	// session with this ID.
	Before string
}

// RequestKind is what a request asks: permission or an answer to a question.
type RequestKind string

// Request kinds.
const (
	KindPermission = RequestKind(store.KindPermission)
	KindQuestion   = RequestKind(store.KindQuestion)
)

// RequestState is the state of a permission or question request.
type RequestState string

// Request states.
const (
	StatePending  = RequestState(store.StatePending)
	StateResolved = RequestState(store.StateResolved)
)

// Request is a permission or question request awaiting (or having had) an
// answer. Payload is the data of its requested event, Resolution that of its
// resolved event.
type Request struct {
	ID         string
	Kind       RequestKind
	State      RequestState
	Payload    json.RawMessage
	Resolution json.RawMessage
	CreatedAt  time.Time
	ResolvedAt *time.Time
}

func viewRequest(r store.Request) Request {
	return Request{
		ID: r.ID, Kind: RequestKind(r.Kind), State: RequestState(r.State), Payload: r.Payload,
		Resolution: r.Resolution, CreatedAt: r.CreatedAt, ResolvedAt: r.ResolvedAt,
	}
}
