package client

import (
	"context"
	"net/http"
)

// Providers lists the sandbox providers the daemon is configured with,
// each with its capabilities and health.
func (c *Client) Providers(ctx context.Context) (ProviderList, error) {
	var out ProviderList
	err := c.do(ctx, http.MethodGet, "/v1/providers", nil, nil, &out)
	return out, err
}
