package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

// Target is a destination as a client named it, normalised: a host name
// (lower case, no trailing dot) or an address (IPv4-mapped IPv6 unmapped),
// and a port.
type Target struct {
	// Host is the name; empty when the client gave an address.
	Host string
	// Addr is the address literal; invalid when the client gave a name.
	Addr netip.Addr
	Port uint16
}

// IsName reports whether the client named the destination by host name.
func (t Target) IsName() bool { return t.Host != "" }

// HostString is the host part as text: the name, or the address.
func (t Target) HostString() string {
	if t.Host != "" {
		return t.Host
	}
	return t.Addr.String()
}

// String is "host:port", with IPv6 addresses in brackets.
func (t Target) String() string {
	if t.Host != "" {
		return t.Host + ":" + strconv.Itoa(int(t.Port))
	}
	return netip.AddrPortFrom(t.Addr, t.Port).String()
}

// errBadHost wraps every host parsing failure.
var errBadHost = errors.New("not a valid host name or address")

// ParseHost normalises a host as a client sent it (a URL's host, a CONNECT
// authority's host, a SOCKS5 domain or address). Addresses are recognised
// in every spelling the C resolver accepts (inet_aton: "2130706433",
// "0x7f.1", "0177.0.0.1", "127.1"), with or without IPv6 brackets, and
// IPv4-mapped IPv6 addresses become IPv4: the policy is always decided on
// the address a connection would really reach. IPv6 zones are refused.
// Names must be ASCII letters, digits, '-' and '_' in dot-separated labels
// (IDNs as punycode); they are lower-cased and lose one trailing dot.
func ParseHost(h string) (name string, addr netip.Addr, err error) {
	bad := func(why string) (string, netip.Addr, error) {
		return "", netip.Addr{}, fmt.Errorf("%w: %q: %s", errBadHost, clip(h, 80), why)
	}
	if h == "" {
		return bad("empty")
	}
	if len(h) > 255 {
		return bad("too long")
	}
	if strings.HasPrefix(h, "[") {
		if !strings.HasSuffix(h, "]") {
			return bad("unbalanced brackets")
		}
		a, err := netip.ParseAddr(h[1 : len(h)-1])
		if err != nil || !a.Is6() {
			return bad("not an IPv6 address in brackets")
		}
		if a.Zone() != "" {
			return bad("IPv6 zones are not allowed")
		}
		return "", a.Unmap(), nil
	}
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		if err != nil {
			return bad("not an IPv6 address")
		}
		if a.Zone() != "" {
			return bad("IPv6 zones are not allowed")
		}
		return "", a.Unmap(), nil
	}
	// Refuse non-ASCII before lower-casing: strings.ToLower maps some
	// runes onto ASCII letters (KELVIN SIGN to 'k', 'İ' to 'i'), which
	// would let a name that is not ASCII pass as one that is.
	if strings.IndexFunc(h, func(r rune) bool { return r >= 0x80 }) >= 0 {
		return bad("names are ASCII (IDNs go as punycode)")
	}
	n := strings.ToLower(strings.TrimSuffix(h, "."))
	if looksNumeric(n) {
		a, ok := parseInetAton(n)
		if !ok {
			return bad("a number that is not an IPv4 address")
		}
		return "", a, nil
	}
	if err := checkName(n); err != nil {
		return bad(err.Error())
	}
	return n, netip.Addr{}, nil
}

// ParseTarget parses "host:port" (a CONNECT authority, a URL's host with
// its port) through ParseHost; a missing port is defaultPort, and 0 means
// the port is required.
func ParseTarget(hostport string, defaultPort uint16) (Target, error) {
	host, port := hostport, ""
	switch {
	case strings.HasPrefix(hostport, "["):
		i := strings.LastIndex(hostport, "]")
		if i < 0 {
			return Target{}, fmt.Errorf("%w: %q: unbalanced brackets", errBadHost, clip(hostport, 80))
		}
		host = hostport[:i+1]
		if rest := hostport[i+1:]; rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return Target{}, fmt.Errorf("%w: %q: junk after the address", errBadHost, clip(hostport, 80))
			}
			port = p
		}
	case strings.Count(hostport, ":") == 1:
		host, port, _ = strings.Cut(hostport, ":")
	case strings.Count(hostport, ":") > 1:
		return Target{}, fmt.Errorf("%w: %q: an IPv6 address needs brackets", errBadHost, clip(hostport, 80))
	}
	t := Target{Port: defaultPort}
	if port != "" || strings.HasSuffix(hostport, ":") {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return Target{}, fmt.Errorf("%w: %q: bad port", errBadHost, clip(hostport, 80))
		}
		t.Port = uint16(n)
	}
	if t.Port == 0 {
		return Target{}, fmt.Errorf("%w: %q: a port is required", errBadHost, clip(hostport, 80))
	}
	var err error
	if t.Host, t.Addr, err = ParseHost(host); err != nil {
		return Target{}, err
	}
	return t, nil
}

// looksNumeric reports whether s could only be an address in inet_aton's
// syntax (digits, dots, and hex digits after 0x): such a string is never
// taken as a name, whether it parses or not.
func looksNumeric(s string) bool {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		p := part
		if strings.HasPrefix(p, "0x") {
			p = p[2:]
			if strings.Trim(p, "0123456789abcdef") != "" {
				return false
			}
			continue
		}
		if strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// parseInetAton parses an IPv4 address as inet_aton(3) does: one to four
// parts, each decimal, octal (leading 0) or hex (0x); the last part fills
// the remaining bytes.
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base := 10
		switch {
		case strings.HasPrefix(p, "0x"):
			p, base = p[2:], 16
			if p == "" {
				p = "0" // a bare "0x" is 0 here: refusing it as a name is the safe side
			}
		case len(p) > 1 && p[0] == '0':
			p, base = p[1:], 8
		}
		if p == "" {
			return netip.Addr{}, false
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	var ip uint64
	last := len(vals) - 1
	for i := range last {
		if vals[i] > 0xff {
			return netip.Addr{}, false
		}
		ip |= vals[i] << (24 - 8*i)
	}
	if vals[last] >= 1<<(32-8*last) {
		return netip.Addr{}, false
	}
	ip |= vals[last]
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}

// checkName accepts a lower-case DNS name: labels of letters, digits, '-'
// and '_', 1 to 63 bytes, not starting or ending with '-', at most 253 bytes
// in all, and a last label that is not all digits.
func checkName(n string) error {
	if n == "" || len(n) > 253 {
		return errors.New("empty or longer than 253 bytes")
	}
	labels := strings.Split(n, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return errors.New("empty or too long label")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return fmt.Errorf("label %q starts or ends with '-'", l)
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return fmt.Errorf("label %q holds %q (names are ASCII; IDNs go as punycode)", clip(l, 63), rune(c))
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return errors.New("the last label is a number")
	}
	return nil
}

// addrClass is what kind of address a destination is, for the always-deny
// sets.
type addrClass int

const (
	classPublic addrClass = iota
	// classInternal: loopback, private, link-local and the like: denied
	// unless an operator's IP or CIDR rule inside the range allows it.
	classInternal
	// classMetadata: cloud metadata services; never allowed.
	classMetadata
)

// internalRange is one always-denied range.
type internalRange struct {
	prefix netip.Prefix
	what   string
}

func mustPrefixes(specs ...string) []internalRange {
	out := make([]internalRange, 0, len(specs)/2)
	for i := 0; i < len(specs); i += 2 {
		out = append(out, internalRange{netip.MustParsePrefix(specs[i]), specs[i+1]})
	}
	return out
}

// internalRanges are the addresses a sandbox reaches only when the
// operator's global policy names them: this host, its networks, and
// addresses that embed or translate to other addresses. Parsed on first
// use, not by the package's init (which runs at every start of the binary).
var internalRanges = sync.OnceValue(func() []internalRange {
	return mustPrefixes(
		"0.0.0.0/8", "this-network",
		"10.0.0.0/8", "private",
		"100.64.0.0/10", "carrier-grade NAT",
		"127.0.0.0/8", "loopback",
		"169.254.0.0/16", "link-local",
		"172.16.0.0/12", "private",
		"192.0.0.0/24", "IETF protocol assignments",
		"192.0.2.0/24", "documentation",
		"192.88.99.0/24", "6to4 relay",
		"192.168.0.0/16", "private",
		"198.18.0.0/15", "benchmarking",
		"198.51.100.0/24", "documentation",
		"203.0.113.0/24", "documentation",
		"224.0.0.0/4", "multicast",
		"240.0.0.0/4", "reserved",
		"::1/128", "loopback",
		"::/96", "IPv4-compatible or unspecified",
		"64:ff9b::/96", "NAT64",
		"64:ff9b:1::/48", "NAT64",
		"100::/64", "discard",
		"2001::/32", "Teredo",
		"2001:db8::/32", "documentation",
		"2002::/16", "6to4",
		"fc00::/7", "unique local",
		"fe80::/10", "link-local",
		"fec0::/10", "site-local",
		"ff00::/8", "multicast",
	)
})

// metadataAddrs are cloud metadata endpoints: AWS, GCP and Azure IMDS
// (169.254.169.254), AWS's IPv6 IMDS, DNS and ECS task endpoints, Alibaba
// Cloud, and Azure's wire server (a public address). Built on first use.
var metadataAddrs = sync.OnceValue(func() map[netip.Addr]bool {
	return map[netip.Addr]bool{
		netip.MustParseAddr("169.254.169.254"): true,
		netip.MustParseAddr("169.254.169.253"): true,
		netip.MustParseAddr("169.254.169.123"): true,
		netip.MustParseAddr("169.254.170.2"):   true,
		netip.MustParseAddr("169.254.170.23"):  true,
		netip.MustParseAddr("fd00:ec2::254"):   true,
		netip.MustParseAddr("fd00:ec2::253"):   true,
		netip.MustParseAddr("fd00:ec2::23"):    true,
		netip.MustParseAddr("100.100.100.200"): true,
		netip.MustParseAddr("168.63.129.16"):   true,
	}
})

// metadataNames are the host names of those services.
var metadataNames = map[string]bool{
	"metadata":                   true,
	"metadata.google.internal":   true,
	"metadata.goog":              true,
	"metadata.azure.internal":    true,
	"instance-data":              true,
	"instance-data.ec2.internal": true,
}

// classify says which always-deny set, if any, a holds, and the range.
func classify(a netip.Addr) (addrClass, internalRange) {
	// A zoned address never matches a prefix: classify it without.
	a = a.Unmap().WithZone("")
	if metadataAddrs()[a] {
		return classMetadata, internalRange{netip.PrefixFrom(a, a.BitLen()), "cloud metadata"}
	}
	for _, r := range internalRanges() {
		if r.prefix.Contains(a) {
			return classInternal, r
		}
	}
	return classPublic, internalRange{}
}

// clip shortens s for error messages.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
