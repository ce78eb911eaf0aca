package egress

import (
	"fmt"
	"net/netip"
	"strings"
)

// Defaults for destinations no rule settles.
const (
	DefaultDeny = "deny"
	DefaultAsk  = "ask"
)

// Policy is a sandbox's compiled network rules.
type Policy struct {
	// Default is DefaultDeny or DefaultAsk.
	Default string
	Allow   []Rule
	Deny    []Rule
}

// CompilePolicy parses a sandbox.Network's rules.
func CompilePolicy(def string, allow, deny []string) (Policy, error) {
	p := Policy{Default: def}
	switch def {
	case "":
		p.Default = DefaultDeny
	case DefaultDeny, DefaultAsk:
	default:
		return Policy{}, fmt.Errorf("egress: network default %q is not deny or ask", def)
	}
	var err error
	if p.Allow, err = parseRules(allow); err != nil {
		return Policy{}, err
	}
	if p.Deny, err = parseRules(deny); err != nil {
		return Policy{}, err
	}
	return p, nil
}

func parseRules(ss []string) ([]Rule, error) {
	out := make([]Rule, 0, len(ss))
	for _, s := range ss {
		r, err := ParseRule(s)
		if err != nil {
			return nil, fmt.Errorf("egress: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// verdict is what the rules say of a destination before any DNS lookup.
type verdict int

const (
	verdictDeny verdict = iota
	verdictAllow
	verdictAsk
)

// outcome is a decision with the rule behind it and the reason a denied
// client reads.
type outcome struct {
	verdict verdict
	// rule names what decided: "allow:*.github.com", "deny:10.0.0.0/8",
	// "always-deny:loopback", "default:deny".
	rule   string
	reason string
}

// decide settles t by the rules alone: the always-deny names and, for an
// address literal, the address checks; then deny rules, then allow rules,
// then the default. Nothing here resolves a name: a destination that is
// denied never causes a DNS query, so DNS cannot carry data out.
func (p *Policy) decide(t Target) outcome {
	if t.IsName() && metadataNames[t.Host] {
		return outcome{verdictDeny, "always-deny:metadata",
			fmt.Sprintf("%s is a cloud metadata service, which no policy can allow", t.Host)}
	}
	if !t.IsName() {
		// checkAddr applies the deny rules to an address; an internal
		// address it lets through was allowed by the rule lifting its
		// range, which is the rule to name (not an earlier, wider allow
		// rule such as "0.0.0.0/0", which cannot open it).
		if o := p.checkAddr(t.Addr, t.Port); o.verdict == verdictDeny || o.rule != "" {
			return o
		}
	}
	for _, r := range p.Deny {
		if r.MatchTarget(t) {
			return outcome{verdictDeny, "deny:" + r.String(),
				fmt.Sprintf("%s matches the policy's deny rule %s", t, r)}
		}
	}
	for _, r := range p.Allow {
		if r.MatchTarget(t) {
			return outcome{verdict: verdictAllow, rule: "allow:" + r.String()}
		}
	}
	if p.Default == DefaultAsk {
		return outcome{verdict: verdictAsk, rule: "default:ask"}
	}
	return outcome{verdictDeny, "default:deny",
		fmt.Sprintf("%s is not in the sandbox's network allow list", t)}
}

// checkAddr is the address gate every connection passes just before it is
// dialled, for literals and for every address a name resolved to (the
// DNS-rebinding defence): metadata addresses are never reached; deny rules
// apply; internal addresses (loopback, private, link-local, ...) only
// through an allow rule whose prefix lies inside their range — which, as
// every allow rule must be granted by the operator's global policy, means
// only where the operator named them.
func (p *Policy) checkAddr(a netip.Addr, port uint16) outcome {
	a = a.Unmap()
	if a.Zone() != "" {
		return outcome{verdictDeny, "always-deny:zone", fmt.Sprintf("%s has an IPv6 zone", a)}
	}
	ap := netip.AddrPortFrom(a, port)
	class, rng := classify(a)
	if class == classMetadata {
		return outcome{verdictDeny, "always-deny:metadata",
			fmt.Sprintf("%s is a cloud metadata address, which no policy can allow", a)}
	}
	for _, r := range p.Deny {
		if r.MatchAddr(a, port) {
			return outcome{verdictDeny, "deny:" + r.String(),
				fmt.Sprintf("%s matches the policy's deny rule %s", ap, r)}
		}
	}
	if class == classInternal {
		for _, r := range p.Allow {
			if r.liftsInternal(a, port, rng.prefix) {
				return outcome{verdict: verdictAllow, rule: "allow:" + r.String()}
			}
		}
		return outcome{verdictDeny, "always-deny:" + strings.ReplaceAll(rng.what, " ", "-"),
			fmt.Sprintf("%s is a %s address (%s); only an IP or CIDR rule the operator's global policy grants can allow it", ap, rng.what, rng.prefix)}
	}
	return outcome{verdict: verdictAllow}
}
