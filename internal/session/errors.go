package session

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned (wrapped) by the Manager. The HTTP layer maps them to
// status codes in one place; see internal/httpapi.
var (
	// ErrNotFound: no session, permission or question with that id.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request is malformed in a way the schema cannot catch.
	ErrInvalid = errors.New("invalid request")
	// ErrBusy: a turn is already running in the session.
	ErrBusy = errors.New("a turn is already running")
	// ErrNotLive: the session has ended, failed or was interrupted.
	ErrNotLive = errors.New("session is not live")
	// ErrNoTurn: interrupt with no turn running.
	ErrNoTurn = errors.New("no turn is running")
	// ErrUnavailable: the agent exists but cannot run here.
	ErrUnavailable = errors.New("agent unavailable")
	// ErrLive: the session already has a running agent (resume).
	ErrLive = errors.New("session is live")
	// ErrNotResumable: the agent cannot resume this session.
	ErrNotResumable = errors.New("session cannot be resumed")
	// ErrNoSandbox: the session has no sandbox (network rules need one).
	ErrNoSandbox = errors.New("session has no sandbox")
	// ErrShuttingDown: the daemon is stopping and takes no new work.
	ErrShuttingDown = errors.New("daemon is shutting down")
	// ErrTooManyLive: starting another agent process would exceed the
	// daemon's cap on live sessions (Config.MaxLive); see LiveCapError.
	ErrTooManyLive = errors.New("too many live sessions")
)

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
