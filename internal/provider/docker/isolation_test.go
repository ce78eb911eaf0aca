package docker

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/agentbox/agentbox/internal/provider"
)

// TestVerifyIsolated: what the host reads back from the daemon must be what
// was asked; anything a runtime or daemon did not apply fails closed.
func TestVerifyIsolated(t *testing.T) {
	good := func() container.InspectResponse {
		return container.InspectResponse{
			ID: "0123456789abcdef",
			HostConfig: &container.HostConfig{
				NetworkMode: "none", ReadonlyRootfs: true,
				CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"},
			},
			NetworkSettings: &container.NetworkSettings{Networks: map[string]*network.EndpointSettings{"none": {}}},
		}
	}
	if err := verifyIsolated(good()); err != nil {
		t.Fatalf("isolated container refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*container.InspectResponse)
		want   string
	}{
		{"no host config", func(c *container.InspectResponse) { c.HostConfig = nil }, "no host config"},
		{"bridge mode", func(c *container.InspectResponse) { c.HostConfig.NetworkMode = "bridge" }, `network mode "bridge"`},
		{"host mode", func(c *container.InspectResponse) { c.HostConfig.NetworkMode = "host" }, `network mode "host"`},
		{"another network", func(c *container.InspectResponse) {
			c.NetworkSettings.Networks["bridge"] = &network.EndpointSettings{}
		}, `network "bridge"`},
		{"none with an address", func(c *container.InspectResponse) {
			c.NetworkSettings.Networks["none"] = &network.EndpointSettings{IPAddress: netip.MustParseAddr("172.17.0.2"), Gateway: netip.MustParseAddr("172.17.0.1")}
		}, "has address"},
		{"writable root", func(c *container.InspectResponse) { c.HostConfig.ReadonlyRootfs = false }, "writable"},
		{"privileged", func(c *container.InspectResponse) { c.HostConfig.Privileged = true }, "privileged"},
		{"cap added", func(c *container.InspectResponse) { c.HostConfig.CapAdd = []string{"NET_ADMIN"} }, "capabilities added"},
		{"caps kept", func(c *container.InspectResponse) { c.HostConfig.CapDrop = []string{"NET_RAW"} }, "not ALL"},
		{"new privileges", func(c *container.InspectResponse) { c.HostConfig.SecurityOpt = nil }, "no-new-privileges"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.change(&c)
			err := verifyIsolated(c)
			if !errors.Is(err, provider.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("verifyIsolated = %v; want ErrUnsupported naming %s", err, tc.want)
			}
		})
	}
}
