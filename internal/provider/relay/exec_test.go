package relay

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/provider"
)

// TestInnerExecError: what the inner daemon answers an exec maps onto the
// errors the host's API answers with, keeping its detail and naming the
// provider and the sandbox.
func TestInnerExecError(t *testing.T) {
	problem := func(status int, typ, detail string) error {
		return &client.APIError{Problem: client.Problem{Status: status, Type: typ, Detail: detail}, Method: "POST", Path: "/v1/exec/stream"}
	}
	for _, tc := range []struct {
		name string
		in   error
		want error
	}{
		{"policy", problem(422, client.ProblemPolicy, "process: the process runtime needs root"), provider.ErrUnsupported},
		{"validation", problem(422, client.ProblemValidation, "body.argv: bad"), execution.ErrInvalid},
		{"busy", problem(429, client.ProblemTooManyRequests, "too many"), execution.ErrTooMany},
		{"internal", problem(500, client.ProblemInternal, "boom"), provider.ErrUnavailable},
		{"transport", errors.New("connection reset"), provider.ErrUnavailable},
		{"cancelled", context.Canceled, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := innerExecError("docker", "sb-123", tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("%v: not %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), "docker") || !strings.Contains(err.Error(), "sb-123") {
				t.Fatalf("%v: does not name the provider and the sandbox", err)
			}
			var ae *client.APIError
			if errors.As(tc.in, &ae) && !strings.Contains(err.Error(), ae.Detail) {
				t.Fatalf("%v: lost the inner detail %q", err, ae.Detail)
			}
		})
	}
}
