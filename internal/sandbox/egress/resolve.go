package egress

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
)

// systemResolver is the default Resolver: the hosts file first, then DNS
// for the name as an absolute name (with a trailing dot). The host's
// search domains and ndots therefore never turn the name the policy
// decided on into another one, and /etc/hosts entries still work (Go's
// resolver does not find an absolute name there).
type systemResolver struct {
	hostsPath string
	dns       *net.Resolver
}

func newSystemResolver() systemResolver {
	return systemResolver{hostsPath: "/etc/hosts", dns: net.DefaultResolver}
}

// LookupNetIP implements Resolver.
func (r systemResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	host = strings.TrimSuffix(host, ".")
	if addrs := hostsLookup(r.hostsPath, host); len(addrs) > 0 {
		return addrs, nil
	}
	return r.dns.LookupNetIP(ctx, network, host+".")
}

// hostsLookup returns the addresses path (a hosts(5) file) gives name,
// none when it cannot be read.
func hostsLookup(path, name string) []netip.Addr {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netip.Addr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		a, err := netip.ParseAddr(fields[0])
		if err != nil || a.Zone() != "" {
			continue
		}
		for _, n := range fields[1:] {
			if strings.EqualFold(strings.TrimSuffix(n, "."), name) {
				out = append(out, a.Unmap())
				break
			}
		}
	}
	return out
}
