package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Resolve turns the policy field of an API request into the effective
// policy: raw is a preset name as a JSON string ("exec-default"), an inline
// policy object, or empty/null for the preset named fallback. The result is
// intersected with global (which may be nil) and validated. source names
// the request in error messages, e.g. "request.policy".
func Resolve(source string, raw json.RawMessage, fallback string, global *Policy) (*Policy, error) {
	req, err := Request(source, raw, fallback)
	if err != nil {
		return nil, err
	}
	return Effective(global, req)
}

// Request is the policy a request asks for, as Resolve reads it, before
// the intersection with the global policy.
func Request(source string, raw json.RawMessage, fallback string) (*Policy, error) {
	raw = bytes.TrimSpace(raw)
	var req *Policy
	var err error
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
		req, err = Preset(fallback)
	case raw[0] == '"':
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		req, err = Preset(name)
	default:
		req, err = Parse(source, raw)
	}
	if err != nil {
		return nil, err
	}
	return req, nil
}
