package execution

import (
	"fmt"

	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// inlineName names an inline policy in error messages.
const inlineName = "request.policy"

// PolicyResolver returns the Resolver the daemon uses: presets by name,
// inline objects and documents parsed by policy.Parse (errors name the
// file, line and field), each intersected with the operator's global
// policy (nil: none) by policy.Effective.
func PolicyResolver(global *policy.Policy) Resolver {
	return func(ref PolicyRef) (Policy, error) {
		var (
			p   *policy.Policy
			err error
		)
		switch {
		case ref.Source != "":
			name := ref.Name
			if name == "" {
				name = "policy"
			}
			p, err = policy.Parse(name, []byte(ref.Source))
		case len(ref.Inline) > 0:
			p, err = policy.Parse(inlineName, ref.Inline)
		default:
			p, err = policy.Preset(ref.Preset)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPolicyInvalid, err)
		}
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPolicyInvalid, err)
		}
		eff, err := policy.Effective(global, p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPolicyDenied, err)
		}
		return eff, nil
	}
}
