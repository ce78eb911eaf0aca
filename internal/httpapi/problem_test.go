package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/store"
)

// TestErrorProblem pins the status, type and Retry-After of every sentinel
// that reaches the API (wrapped, as callers return them).
func TestErrorProblem(t *testing.T) {
	tests := []struct {
		err    error
		status int
		typ    string
		retry  string
	}{
		{agent.ErrUnknown, 422, client.ProblemUnknownAgent, ""},
		{engine.ErrNotFound, 404, client.ProblemNotFound, ""},
		{store.ErrNotFound, 404, client.ProblemNotFound, ""},
		{agent.ErrInvalidMCP, 422, client.ProblemInvalidMCPServer, ""},
		{engine.ErrInvalid, 422, client.ProblemValidation, ""},
		{engine.ErrBusy, 409, client.ProblemBusy, ""},
		{engine.ErrNoTurn, 409, client.ProblemNoTurn, ""},
		{engine.ErrLive, 409, client.ProblemLive, ""},
		{engine.ErrNotResumable, 409, client.ProblemNotResumable, ""},
		{engine.ErrNotPausable, 409, client.ProblemNotPausable, ""},
		{engine.ErrNotLive, 409, client.ProblemNotLive, ""},
		{&engine.EnvRequiredError{ID: "ses_1", Names: []string{"K"}}, 422, client.ProblemEnvRequired, ""},
		{engine.ErrMCPUnsupported, 422, client.ProblemMCPUnsupported, ""},
		{engine.ErrMCPRequired, 422, client.ProblemMCPRequired, ""},
		{&engine.ContentError{Index: 1, Type: "image", Agent: "mock"}, 422, client.ProblemUnsupportedContent, ""},
		{agent.ErrUnsupportedContent, 422, client.ProblemUnsupportedContent, ""},
		{&engine.ChoiceError{Field: "model", Value: "x"}, 422, client.ProblemUnknownModel, ""},
		{&engine.ChoiceError{Field: "mode", Value: "x"}, 422, client.ProblemUnknownMode, ""},
		{engine.ErrSwitchUnsupported, 422, client.ProblemSwitchUnsupported, ""},
		{engine.ErrNoSandbox, 409, client.ProblemNoSandbox, ""},
		{egress.ErrInvalidSecret, 422, client.ProblemValidation, ""},
		{store.ErrAlreadyResolved, 409, client.ProblemAlreadyResolved, ""},
		{store.ErrExists, 409, client.ProblemConflict, ""},
		{execution.ErrNotFound, 404, client.ProblemNotFound, ""},
		{execution.ErrInvalid, 422, client.ProblemValidation, ""},
		{execution.ErrConflict, 409, client.ProblemConflict, ""},
		{execution.ErrTooMany, 429, client.ProblemTooManyRequests, retryAfterBusy},
		{execution.ErrClosed, 503, client.ProblemShuttingDown, "5"},
		{execution.ErrPolicyInvalid, 422, client.ProblemPolicy, ""},
		{execution.ErrPolicyDenied, 422, client.ProblemPolicy, ""},
		{engine.ErrPolicy, 422, client.ProblemPolicy, ""},
		{fmt.Errorf("%w: %w", engine.ErrPolicy, sandbox.ErrUnenforceable), 422, client.ProblemPolicy, ""},
		{sandbox.ErrUnenforceable, 422, client.ProblemPolicy, ""},
		{sandbox.ErrUnknownRuntime, 422, client.ProblemPolicy, ""},
		{sandbox.ErrUnavailable, 422, client.ProblemPolicy, ""},
		{engine.ErrUnavailable, 503, client.ProblemUnavailable, ""},
		{&engine.LiveCapError{Max: 2, RetryAfter: 1500 * time.Millisecond}, 429, client.ProblemTooManyLiveSessions, "2"},
		{engine.ErrTooManyLive, 429, client.ProblemTooManyLiveSessions, "10"},
		{engine.ErrShuttingDown, 503, client.ProblemShuttingDown, "5"},
		{store.ErrClosed, 503, client.ProblemShuttingDown, "5"},
		{errkind.Wrap(errkind.StorageFull, errors.New("sqlite: database or disk is full")), 507, client.ProblemStorageFull, retryAfterStorageFull},
		{context.DeadlineExceeded, 504, client.ProblemTimeout, ""},
		{context.Canceled, statusClientClosed, client.ProblemCancelled, ""},
		{errors.New("boom"), 500, client.ProblemInternal, ""},
		{sandbox.ErrClosed, 500, client.ProblemInternal, ""},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			p := errorProblem(t.Context(), fmt.Errorf("op x: %w", tc.err))
			if p.Status != tc.status || p.Type != tc.typ {
				t.Fatalf("%v: %d %s, want %d %s", tc.err, p.Status, p.Type, tc.status, tc.typ)
			}
			if got := p.headers.Get("Retry-After"); got != tc.retry {
				t.Fatalf("Retry-After %q, want %q", got, tc.retry)
			}
			if p.Title != http.StatusText(p.Status) && p.Status != statusClientClosed {
				t.Fatalf("title %q", p.Title)
			}
		})
	}
}
