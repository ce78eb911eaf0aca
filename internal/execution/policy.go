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
// policy (nil: none) by policy.Effective. The policies' Hash keys the
// warm pool by the global policy too. Build it once per global policy: the
// global policy's hash is computed here, not per request.
func PolicyResolver(global *policy.Policy) Resolver {
	globalHash := "none"
	if global != nil {
		globalHash = global.Hash()
	}
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
		return underGlobal{eff, globalHash, policy.Adjustments(p, eff)}, nil
	}
}

// underGlobal is an effective policy keyed for the warm pool by the global
// policy it was made under too: a sandbox warmed under one global policy
// is never handed out under another, even when the request's effective
// policy comes out the same.
type underGlobal struct {
	*policy.Policy
	global string
	// adjusted are the limits the request asked for that the global
	// policy lowered (Adjuster).
	adjusted []policy.Adjustment
}

func (u underGlobal) Adjusted() []policy.Adjustment { return u.adjusted }

// Adjuster is the optional ability of a Policy to say which limits the
// request asked for were lowered on the way to it; results carry them, so
// no limit is lowered silently.
type Adjuster interface {
	Adjusted() []policy.Adjustment
}

// adjustments returns what pol says was lowered, if it can say.
func adjustments(pol Policy) []policy.Adjustment {
	if a, ok := pol.(Adjuster); ok {
		return a.Adjusted()
	}
	return nil
}

func (u underGlobal) Hash() string { return u.global + "/" + u.Policy.Hash() }
