package relay

import (
	"encoding/json"

	"github.com/agentbox/agentbox/internal/provider"
)

// placement maps a host-resolved effective policy (raw; nil or null for
// none) onto provider p: what its sandbox is made with (Spec.Policy) and
// what the inner daemon there is handed. A provider whose sandbox is the
// boundary (provider.PolicyMapper) enforces the policy through the sandbox
// and the host's gate, and hands the inner daemon only what it enforces
// in its boundary mode; its refusal (provider.ErrUnsupported, naming the
// field) is returned before anything is made. Any other provider gets no
// policy and its inner daemon the whole policy, enforced with its own
// runtimes (or refused there).
func placement(p provider.Provider, raw json.RawMessage) (spec, inner json.RawMessage, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, nil
	}
	m, ok := p.(provider.PolicyMapper)
	if !ok {
		return nil, raw, nil
	}
	if inner, err = m.MapPolicy(raw); err != nil {
		return nil, nil, err
	}
	return raw, inner, nil
}
