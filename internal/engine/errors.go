package engine

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/store"
)

// Errors returned (wrapped) by the Manager. Each is of an errkind kind, which
// the HTTP layer maps to a status in one place (internal/httpapi); the
// sentinels are for the callers (and the API's refinements) that need the
// precise reason.
var (
	// ErrNotFound: no session, permission or question with that id.
	ErrNotFound = errkind.New(errkind.NotFound, "not found")
	// ErrInvalid: the request is malformed in a way the schema cannot catch.
	ErrInvalid = errkind.New(errkind.Invalid, "invalid request")
	// ErrBusy: a turn is already running in the session.
	ErrBusy = errkind.New(errkind.Conflict, "a turn is already running")
	// ErrNotLive: the session has ended, failed or was interrupted.
	ErrNotLive = errkind.New(errkind.Conflict, "session is not live")
	// ErrNoTurn: interrupt with no turn running.
	ErrNoTurn = errkind.New(errkind.Conflict, "no turn is running")
	// ErrUnavailable: the agent exists but cannot run here.
	ErrUnavailable = errkind.New(errkind.Unavailable, "agent unavailable")
	// ErrLive: the session already has a running agent (resume).
	ErrLive = errkind.New(errkind.Conflict, "session is live")
	// ErrNotResumable: the agent cannot resume this session.
	ErrNotResumable = errkind.New(errkind.Conflict, "session cannot be resumed")
	// ErrNotPausable: pause of a session whose agent cannot pause where
	// it runs (only a session on a provider whose sandboxes pause can).
	ErrNotPausable = errkind.New(errkind.Conflict, "session cannot be paused")
	// ErrNoSandbox: the session has no sandbox (network rules need one).
	ErrNoSandbox = errkind.New(errkind.Conflict, "session has no sandbox")
	// ErrShuttingDown: the daemon is stopping and takes no new work.
	ErrShuttingDown = errkind.New(errkind.ShuttingDown, "daemon is shutting down")
	// ErrTooManyLive: starting another agent process would exceed the
	// daemon's cap on live sessions (Config.MaxLive); see LiveCapError.
	ErrTooManyLive = errkind.New(errkind.TooMany, "too many live sessions")
	// ErrEnvRequired: the session was created with env the daemon no
	// longer has (it never stores values) and does not hold itself; see
	// EnvRequiredError.
	ErrEnvRequired = errkind.New(errkind.Invalid, "the session needs its env again")
	// ErrUnsupportedContent: a message has a content part its session's
	// agent cannot take; see ContentError.
	ErrUnsupportedContent = agent.ErrUnsupportedContent
	// ErrUnknownChoice: a model or mode the agent does not offer (see
	// ChoiceError for which field).
	ErrUnknownChoice = errkind.New(errkind.Invalid, "a model or mode the agent does not offer")
	// ErrSwitchUnsupported: a change of model or mode the session's agent
	// cannot make between turns.
	ErrSwitchUnsupported = errkind.New(errkind.Invalid, "the agent cannot switch it between turns")
	// ErrUnknownAgent: no agent has the name a request gives.
	ErrUnknownAgent = agent.ErrUnknown
	// ErrInvalidMCP: an MCP server of a create request breaks a rule.
	ErrInvalidMCP = agent.ErrInvalidMCP
	// ErrAlreadyResolved: a permission request or question was answered
	// already.
	ErrAlreadyResolved = store.ErrAlreadyResolved
)

// EnvRequiredError is the error (wrapping ErrEnvRequired) of a resume, or
// of a message to a stopped session, that would start the agent without
// environment variables its client gave at create: their values were never
// stored, and the daemon does not hold them itself (its own environment
// for the agent's model API, or a secret the session's policy declares).
type EnvRequiredError struct {
	// ID is the session.
	ID string
	// Names are the variables to send again, sorted.
	Names []string
}

func (e *EnvRequiredError) Error() string {
	return fmt.Sprintf("session %s was created with env %s, whose values the daemon never stores and does not hold itself: "+
		"resume it with them (POST /v1/sessions/%s/resume with env %s), then send messages to it",
		e.ID, strings.Join(e.Names, ", "), e.ID, strings.Join(e.Names, ", "))
}

func (e *EnvRequiredError) Unwrap() error { return ErrEnvRequired }

// ContentError is the error (wrapping ErrUnsupportedContent) of a message
// with a content part its session's agent does not accept
// (agent.Capabilities): the message is refused, never sent without it.
type ContentError struct {
	// Index is the part's position in the message's content.
	Index int
	// Type is the part's type (image, file).
	Type event.PartType
	// Agent is the session's agent.
	Agent string
}

func (e *ContentError) Error() string {
	return fmt.Sprintf("content[%d]: agent %s does not accept %s parts (capability %s in GET /v1/agents); "+
		"send the message without it, or put the %s in the session's workspace and name its path in text",
		e.Index, e.Agent, e.Type, contentCapability[e.Type], e.Type)
}

func (e *ContentError) Unwrap() error { return ErrUnsupportedContent }

// LiveCapError is the error (wrapping ErrTooManyLive) of a create, resume
// or message that would bring a session live beyond Config.MaxLive.
type LiveCapError struct {
	// Max is the cap.
	Max int
	// RetryAfter is when a slot may be free: the earliest idle stop of a
	// live session, or a default when none is due.
	RetryAfter time.Duration
}

func (e *LiveCapError) Error() string {
	return fmt.Sprintf("%d sessions have a live agent process, the most this daemon allows (serve --max-live-sessions); "+
		"end one (DELETE /v1/sessions/{id}) or retry later", e.Max)
}

func (e *LiveCapError) Unwrap() error { return ErrTooManyLive }

// endingError is the cause with which a session's teardown cancels its
// running turn.
type endingError struct {
	msg         string
	agentFailed bool // the agent process died
}

func (e *endingError) Error() string { return e.msg }

// ChoiceError is a model or mode the agent does not offer; it wraps
// ErrUnknownChoice.
type ChoiceError struct {
	Field   string // "model" or "mode"
	Value   string
	Agent   string
	Offered []string
	// From says where the list comes from (which session announced it).
	From string
}

func (e *ChoiceError) Error() string {
	return fmt.Sprintf("%s %q: agent %s does not offer it (it offers %s, as %s said)", e.Field, e.Value, e.Agent, strings.Join(e.Offered, ", "), e.From)
}

func (e *ChoiceError) Unwrap() error { return ErrUnknownChoice }
