package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Rule is one network rule of a policy: a host name ("example.com"), any
// subdomain of one ("*.example.com", which does not match example.com
// itself), any host name at all ("*"), or an address prefix ("10.0.0.0/8",
// "1.2.3.4", "fd00::/8"); each with an optional port (0 = any).
//
// Name rules match destinations the client named by name; prefix rules
// match addresses, whether the client gave one or the proxy resolved a name
// to it. "*" never matches an address literal.
type Rule struct {
	Prefix netip.Prefix // valid for address and CIDR rules
	Host   string       // lower-case name, "*.name" or "*", for name rules
	Port   uint16
}

// ParseRule parses "example.com", "*.example.com:443", "*", "*:443",
// "10.0.0.0/8", "10.0.0.0/8:443", "1.2.3.4:80", "[::1]:443",
// "[fd00::/8]:443" or "::1". Addresses must be written plainly: a rule is
// an operator's statement, so "2130706433" or "0x7f.1" are refused rather
// than guessed at.
func ParseRule(s string) (Rule, error) {
	bad := func(why string) (Rule, error) {
		return Rule{}, fmt.Errorf("%q is not a network rule (host[:port], *.domain[:port] or CIDR): %s", s, why)
	}
	if pfx, err := netip.ParsePrefix(s); err == nil {
		return prefixRule(pfx, 0, bad)
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return bad("IPv6 zones are not allowed")
		}
		return Rule{Prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return bad("port 0")
		}
		if ap.Addr().Zone() != "" {
			// "[fe80::%eth0/64]:80" parses with the zone "eth0/64".
			return bad("IPv6 zones are not allowed")
		}
		a := ap.Addr().Unmap()
		return Rule{Prefix: netip.PrefixFrom(a, a.BitLen()), Port: ap.Port()}, nil
	}
	host, port := s, uint16(0)
	if strings.HasPrefix(s, "[") {
		// "[fd00::/8]:443": a prefix with a port.
		i := strings.Index(s, "]:")
		if i < 0 {
			return bad("brackets need a port after them")
		}
		n, err := strconv.ParseUint(s[i+2:], 10, 16)
		if err != nil || n == 0 {
			return bad("bad port")
		}
		pfx, err := netip.ParsePrefix(s[1:i])
		if err != nil {
			return bad("not an address or prefix in brackets")
		}
		return prefixRule(pfx, uint16(n), bad)
	}
	if h, ps, ok := strings.Cut(s, ":"); ok {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 {
			return bad("bad port")
		}
		host, port = h, uint16(n)
		if pfx, err := netip.ParsePrefix(host); err == nil {
			return prefixRule(pfx, port, bad)
		}
	}
	if host == "*" {
		return Rule{Host: "*", Port: port}, nil
	}
	if strings.IndexFunc(host, func(r rune) bool { return r >= 0x80 }) >= 0 {
		// Before lower-casing, which maps KELVIN SIGN onto 'k'.
		return bad("host names are ASCII (IDNs go as punycode)")
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	name := strings.TrimPrefix(host, "*.")
	if name == "" || len(name) > 253 {
		return bad("empty or too long host name")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !ldhLabel(l) {
			return bad(fmt.Sprintf("bad host name label %q", l))
		}
	}
	// What ParseHost reads as an address (in any inet_aton spelling) or
	// refuses as a name could never match a name rule.
	if _, err := netip.ParseAddr(name); err == nil || looksNumeric(name) ||
		strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return bad("not a valid IP address or host name")
	}
	return Rule{Host: host, Port: port}, nil
}

func prefixRule(pfx netip.Prefix, port uint16, bad func(string) (Rule, error)) (Rule, error) {
	if pfx != pfx.Masked() {
		return bad("host bits are set; did you mean " + pfx.Masked().String() + "?")
	}
	if pfx.Addr().Zone() != "" {
		return bad("IPv6 zones are not allowed")
	}
	if pfx.Addr().Is4In6() {
		if pfx.Bits() < 96 {
			return bad("an IPv4-mapped prefix shorter than /96")
		}
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
	}
	return Rule{Prefix: pfx, Port: port}, nil
}

// ldhLabel accepts one DNS label of letters, digits and inner hyphens.
func ldhLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// String writes the rule the way ParseRule reads it.
func (r Rule) String() string {
	var s string
	switch {
	case r.Prefix.IsValid():
		s = r.Prefix.String()
		if r.Prefix.Bits() == r.Prefix.Addr().BitLen() {
			s = r.Prefix.Addr().String()
		}
		if r.Port != 0 {
			if r.Prefix.Addr().Is6() {
				return "[" + s + "]:" + strconv.Itoa(int(r.Port))
			}
			return s + ":" + strconv.Itoa(int(r.Port))
		}
		return s
	default:
		s = r.Host
	}
	if r.Port != 0 {
		s += ":" + strconv.Itoa(int(r.Port))
	}
	return s
}

// IsName reports whether r is a name rule.
func (r Rule) IsName() bool { return !r.Prefix.IsValid() }

func (r Rule) portOK(p uint16) bool { return r.Port == 0 || r.Port == p }

// matchName reports whether the name rule r matches host name n.
func (r Rule) matchName(n string) bool {
	switch {
	case r.Prefix.IsValid() || n == "":
		return false
	case r.Host == "*":
		return true
	case strings.HasPrefix(r.Host, "*."):
		return strings.HasSuffix(n, r.Host[1:])
	}
	return n == r.Host
}

// MatchTarget reports whether r matches t as the client named it: a name
// rule its name, a prefix rule its address literal.
func (r Rule) MatchTarget(t Target) bool {
	if !r.portOK(t.Port) {
		return false
	}
	if t.IsName() {
		return r.matchName(t.Host)
	}
	return r.Prefix.IsValid() && r.Prefix.Contains(t.Addr)
}

// MatchAddr reports whether the prefix rule r matches address a on port p.
func (r Rule) MatchAddr(a netip.Addr, p uint16) bool {
	return r.Prefix.IsValid() && r.portOK(p) && r.Prefix.Contains(a.Unmap())
}

// Covers reports whether everything o matches, r matches too: it is how a
// request's rule is checked against the operator's global rules.
func (r Rule) Covers(o Rule) bool {
	if r.Port != 0 && r.Port != o.Port {
		return false
	}
	if r.Prefix.IsValid() {
		return o.Prefix.IsValid() && r.Prefix.Addr().BitLen() == o.Prefix.Addr().BitLen() &&
			r.Prefix.Bits() <= o.Prefix.Bits() && r.Prefix.Contains(o.Prefix.Addr())
	}
	if o.Prefix.IsValid() {
		return false
	}
	switch {
	case r.Host == "*":
		return true
	case o.Host == "*":
		return false
	case strings.HasPrefix(r.Host, "*."):
		// *.d covers *.d, x.d and *.x.d.
		return o.Host == r.Host || strings.HasSuffix(strings.TrimPrefix(o.Host, "*"), r.Host[1:])
	}
	return o.Host == r.Host
}

// liftsInternal reports whether the allow rule r opens address a (on port
// p) of the always-denied range rng: only a prefix rule lying inside that
// range does, so "0.0.0.0/0" opens no private address while "10.1.2.0/24"
// opens those 256.
func (r Rule) liftsInternal(a netip.Addr, p uint16, rng netip.Prefix) bool {
	return r.MatchAddr(a, p) && r.Prefix.Bits() >= rng.Bits() && rng.Contains(r.Prefix.Addr())
}
