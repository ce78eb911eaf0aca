package execution

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/execution/exectest"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// fakeResolve knows a few presets; an inline policy is {"output": N,
// "timeout_ms": N}.
func fakeResolve(ref PolicyRef) (Policy, error) {
	switch {
	case len(ref.Inline) > 0:
		var in struct {
			Output    int64 `json:"output"`
			TimeoutMS int64 `json:"timeout_ms"`
		}
		if err := json.Unmarshal(ref.Inline, &in); err != nil {
			return nil, fmt.Errorf("%w: request.policy:1:1: %w", ErrPolicyInvalid, err)
		}
		return &exectest.Policy{Runtime: "host", Key: "inline-" + strconv.FormatInt(in.Output, 10),
			Limits: sandbox.Limits{OutputBytes: in.Output, Timeout: time.Duration(in.TimeoutMS) * time.Millisecond}}, nil
	case ref.Source != "":
		return nil, fmt.Errorf("%w: %s:3:5: resources.memory: expected a size such as 512MiB", ErrPolicyInvalid, ref.Name)
	}
	switch ref.Preset {
	case "exec-default":
		return &exectest.Policy{Runtime: "host", Key: "default", Limits: sandbox.Limits{Timeout: time.Minute}}, nil
	case "other":
		return &exectest.Policy{Runtime: "host", Key: "other"}, nil
	case "unenforceable":
		return &exectest.Policy{Runtime: "broken", Key: "broken"}, nil
	case "refused":
		return nil, fmt.Errorf("%w: network host is not allowed by the global policy", ErrPolicyDenied)
	}
	return nil, fmt.Errorf("%w: unknown preset %q", ErrPolicyInvalid, ref.Preset)
}
