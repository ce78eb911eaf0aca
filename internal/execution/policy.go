package execution

import (
	"fmt"
	"sync"

	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// inlineName names an inline policy in error messages.
const inlineName = "request.policy"

// PolicyResolver returns the Resolver the daemon uses: presets by name,
// inline objects and documents parsed by policy.Parse (errors name the
// file, line and field), each intersected with the operator's global
// policy (nil: none) by policy.Effective. The policies' Hash keys the
// warm pool by the global policy too. Build it once per global policy: the
// global policy's hash is computed here, not per request, and a preset is
// resolved (parsed, validated, intersected, hashed) once, on first use: under
// one global policy it always comes out the same. Only presets that resolve
// are kept, so the cache holds at most one entry per preset.
func PolicyResolver(global *policy.Policy) Resolver {
	globalHash := "none"
	if global != nil {
		globalHash = global.Hash()
	}
	var presets sync.Map // preset name → Policy
	return func(ref PolicyRef) (Policy, error) {
		preset := ref.Source == "" && len(ref.Inline) == 0
		if preset {
			if pol, ok := presets.Load(ref.Preset); ok {
				return pol.(Policy), nil
			}
		}
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
		// A pointer: what a preset resolved to is kept and handed out as is
		// (comparable, so a test can tell kept from resolved afresh).
		pol := &underGlobal{eff, globalHash + "/" + eff.Hash(), policy.Adjustments(p, eff)}
		if preset {
			presets.Store(ref.Preset, pol)
		}
		return pol, nil
	}
}

// underGlobal is an effective policy keyed for the warm pool by the global
// policy it was made under too: a sandbox warmed under one global policy
// is never handed out under another, even when the request's effective
// policy comes out the same.
type underGlobal struct {
	*policy.Policy
	hash string // the global policy's hash, "/", this one's
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

func (u underGlobal) Hash() string { return u.hash }
