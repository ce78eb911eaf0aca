package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
)

// SessionNetwork is a session's sandbox network, as its policy says (GET
// and PUT /v1/sessions/{id}/network).
type SessionNetwork struct {
	Mode    string   `json:"mode" enum:"none,proxy,host" doc:"proxy: the egress proxy is the only way out; none: loopback only; host: the host's network."`
	Default string   `json:"default,omitempty" enum:"deny,ask" doc:"What happens to a destination no rule settles."`
	Allow   []string `json:"allow" doc:"The allow rules in force."`
	Deny    []string `json:"deny,omitempty" doc:"The deny rules (they win over allow)."`
	Live    bool     `json:"live" doc:"True when a running sandbox's proxy enforces the rules now; otherwise they apply from the next start (resume)."`
}

// SetNetwork is the body of PUT /v1/sessions/{id}/network.
type SetNetwork struct {
	Allow []string `json:"allow" maxItems:"1024" doc:"The new allow rules (host[:port], *.domain[:port], *, CIDR[:port]); they replace the old ones. Each must be covered by the operator's global policy."`
}

// SecretInfo describes a daemon secret; its value is never returned.
type SecretInfo struct {
	Name   string `json:"name"`
	Host   string `json:"host" doc:"The one host (or *.domain) the egress proxy sends the secret to."`
	Header string `json:"header" doc:"The request header that carries it."`
	Format string `json:"format,omitempty" doc:"The header's value, {value} standing for the secret."`
	// InterceptTLS: HTTPS to Host is intercepted to add the secret.
	InterceptTLS bool   `json:"intercept_tls,omitempty" doc:"HTTPS tunnels to host, from sandboxes created since it was set, are opened by the egress proxy (with a CA only that sandbox trusts) so the secret can be added to each request."`
	Source       string `json:"source" doc:"Where the value came from: env:NAME, file:PATH or api."`
	// Placeholder is what a sandbox sees instead of the value (policy
	// env.secrets puts it in an environment variable).
	Placeholder string `json:"placeholder"`
}

// SecretList is the answer of GET /v1/secrets.
type SecretList struct {
	Secrets []SecretInfo `json:"secrets"`
}

// PutSecret is the body of PUT /v1/secrets/{name}. The value is kept in the
// daemon's memory only and is never returned, logged or written to disk.
type PutSecret struct {
	Value  string `json:"value" minLength:"1" maxLength:"16384" doc:"The secret. Write-only."`
	Host   string `json:"host" minLength:"1" maxLength:"253" doc:"The one host name (or *.domain) it is sent to."`
	Header string `json:"header" minLength:"1" maxLength:"128" doc:"The header that carries it, e.g. Authorization."`
	Format string `json:"format,omitempty" maxLength:"256" doc:"The header's value with {value} for the secret, e.g. \"Bearer {value}\"; empty means the value alone."`
	// InterceptTLS opts in to TLS interception for Host.
	InterceptTLS bool `json:"intercept_tls,omitempty" doc:"Add the secret to HTTPS requests too: a sandbox created while it is set gets a CA of its own, and the egress proxy opens its tunnels to host (only those) to add the secret. Without it, HTTPS stays end to end and the secret reaches plain HTTP and routes only."`
}

// Network returns a session's sandbox network rules.
func (c *Client) Network(ctx context.Context, id string) (SessionNetwork, error) {
	p, err := sessionPath(id, "network")
	if err != nil {
		return SessionNetwork{}, err
	}
	var out SessionNetwork
	err = c.do(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// SetNetwork replaces a session's network allow rules; a running sandbox's
// proxy applies them to every new connection at once.
func (c *Client) SetNetwork(ctx context.Context, id string, allow []string) (SessionNetwork, error) {
	p, err := sessionPath(id, "network")
	if err != nil {
		return SessionNetwork{}, err
	}
	if allow == nil {
		allow = []string{}
	}
	var out SessionNetwork
	err = c.do(ctx, http.MethodPut, p, nil, SetNetwork{Allow: allow}, &out)
	return out, err
}

// Secrets lists the daemon's secrets, without their values.
func (c *Client) Secrets(ctx context.Context) ([]SecretInfo, error) {
	var out SecretList
	if err := c.do(ctx, http.MethodGet, "/v1/secrets", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Secrets, nil
}

// PutSecret adds or replaces a secret.
func (c *Client) PutSecret(ctx context.Context, name string, s PutSecret) (SecretInfo, error) {
	if name == "" {
		return SecretInfo{}, errors.New("client: empty secret name")
	}
	var out SecretInfo
	err := c.do(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), nil, s, &out)
	return out, err
}

// DeleteSecret removes a secret; sandboxes that hold its placeholder get
// nothing for it from then on.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("client: empty secret name")
	}
	return c.do(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil, nil, nil)
}
