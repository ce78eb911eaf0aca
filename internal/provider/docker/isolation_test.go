package docker

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/internal/provider"
)

// TestVerifyIsolated: what the host reads back from the daemon must be what
// was asked; anything a runtime or daemon did not apply fails closed.
func TestVerifyIsolated(t *testing.T) {
	good := func() inspected {
		return inspected{
			ID: "0123456789abcdef",
			HostConfig: &hostConfigBody{
				NetworkMode: "none", ReadonlyRootfs: true,
				CapDrop: []string{"ALL"}, SecurityOpt: []string{"no-new-privileges"},
			},
			NetworkSettings: &networkSettings{Networks: map[string]*endpoint{"none": {}}},
		}
	}
	if err := verifyIsolated(good()); err != nil {
		t.Fatalf("isolated container refused: %v", err)
	}
	for _, tc := range []struct {
		name   string
		change func(*inspected)
		want   string
	}{
		{"no host config", func(c *inspected) { c.HostConfig = nil }, "no host config"},
		{"bridge mode", func(c *inspected) { c.HostConfig.NetworkMode = "bridge" }, `network mode "bridge"`},
		{"host mode", func(c *inspected) { c.HostConfig.NetworkMode = "host" }, `network mode "host"`},
		{"another network", func(c *inspected) {
			c.NetworkSettings.Networks["bridge"] = &endpoint{}
		}, `network "bridge"`},
		{"none with an address", func(c *inspected) {
			c.NetworkSettings.Networks["none"] = &endpoint{IPAddress: "172.17.0.2", Gateway: "172.17.0.1"}
		}, "has address"},
		{"none with an IPv6 address", func(c *inspected) {
			c.NetworkSettings.Networks["none"] = &endpoint{GlobalIPv6Address: "fd00::2"}
		}, "has address"},
		{"writable root", func(c *inspected) { c.HostConfig.ReadonlyRootfs = false }, "writable"},
		{"privileged", func(c *inspected) { c.HostConfig.Privileged = true }, "privileged"},
		{"cap added", func(c *inspected) { c.HostConfig.CapAdd = []string{"NET_ADMIN"} }, "capabilities added"},
		{"caps kept", func(c *inspected) { c.HostConfig.CapDrop = []string{"NET_RAW"} }, "not ALL"},
		{"new privileges", func(c *inspected) { c.HostConfig.SecurityOpt = nil }, "no-new-privileges"},
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
