package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func mustPolicy(t testing.TB, def string, allow, deny []string) Policy {
	t.Helper()
	p, err := CompilePolicy(def, allow, deny)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCompilePolicy(t *testing.T) {
	p, err := CompilePolicy("", []string{"example.com"}, nil)
	if err != nil || p.Default != DefaultDeny || len(p.Allow) != 1 || len(p.Deny) != 0 {
		t.Fatalf("CompilePolicy(\"\") = %+v, %v", p, err)
	}
	for _, tt := range []struct {
		def         string
		allow, deny []string
	}{
		{"allow", nil, nil},
		{"Deny", nil, nil},
		{"deny", []string{"bad rule"}, nil},
		{"ask", nil, []string{"0x7f.1"}},
	} {
		if _, err := CompilePolicy(tt.def, tt.allow, tt.deny); err == nil || !strings.HasPrefix(err.Error(), "egress: ") {
			t.Errorf("CompilePolicy(%q, %q, %q) = %v; want an egress error", tt.def, tt.allow, tt.deny, err)
		}
	}
}

func TestPolicyDecide(t *testing.T) {
	pol := mustPolicy(t, DefaultDeny,
		[]string{"example.com", "*.github.com:443", "1.2.3.0/24", "127.0.0.1:8080", "[::1]:8443",
			"0.0.0.0/0", "metadata.google.internal", "blocked.example.org", "10.1.0.0/16:22", "169.254.169.254"},
		[]string{"blocked.example.org", "*.evil.github.com", "1.2.3.66", "10.1.2.0/24"})
	ask := pol
	ask.Default = DefaultAsk

	tests := []struct {
		pol     *Policy
		target  string
		verdict verdict
		rule    string
	}{
		{&pol, "example.com:443", verdictAllow, "allow:example.com"},
		{&pol, "EXAMPLE.COM.:80", verdictAllow, "allow:example.com"},
		{&pol, "www.example.com:443", verdictDeny, "default:deny"},
		{&ask, "www.example.com:443", verdictAsk, "default:ask"},
		{&pol, "api.github.com:443", verdictAllow, "allow:*.github.com:443"},
		{&pol, "api.github.com:80", verdictDeny, "default:deny"},
		{&ask, "api.github.com:80", verdictAsk, "default:ask"},
		{&pol, "github.com:443", verdictDeny, "default:deny"},
		// Deny beats allow.
		{&pol, "x.evil.github.com:443", verdictDeny, "deny:*.evil.github.com"},
		{&ask, "x.evil.github.com:443", verdictDeny, "deny:*.evil.github.com"},
		{&pol, "blocked.example.org:80", verdictDeny, "deny:blocked.example.org"},
		{&pol, "1.2.3.66:80", verdictDeny, "deny:1.2.3.66"},
		{&pol, "1.2.3.65:80", verdictAllow, "allow:1.2.3.0/24"},
		{&pol, "10.1.2.3:22", verdictDeny, "deny:10.1.2.0/24"},
		{&pol, "10.1.3.3:22", verdictAllow, "allow:10.1.0.0/16:22"},
		{&pol, "10.1.3.3:23", verdictDeny, "always-deny:private"},
		// Metadata, by name and by address, whatever the rules say.
		{&pol, "metadata.google.internal:80", verdictDeny, "always-deny:metadata"},
		{&ask, "METADATA.google.internal.:80", verdictDeny, "always-deny:metadata"},
		{&pol, "metadata:80", verdictDeny, "always-deny:metadata"},
		{&pol, "instance-data.ec2.internal:80", verdictDeny, "always-deny:metadata"},
		{&pol, "169.254.169.254:80", verdictDeny, "always-deny:metadata"},
		{&ask, "0xa9fea9fe:80", verdictDeny, "always-deny:metadata"},
		{&pol, "[::ffff:169.254.169.254]:80", verdictDeny, "always-deny:metadata"},
		{&pol, "[fd00:ec2::254]:80", verdictDeny, "always-deny:metadata"},
		{&pol, "168.63.129.16:80", verdictDeny, "always-deny:metadata"},
		// "0.0.0.0/0" opens no internal address; "127.0.0.1:8080" opens that.
		{&pol, "8.8.8.8:53", verdictAllow, "allow:0.0.0.0/0"},
		{&pol, "127.0.0.1:80", verdictDeny, "always-deny:loopback"},
		{&ask, "127.0.0.1:80", verdictDeny, "always-deny:loopback"},
		{&ask, "2130706433:80", verdictDeny, "always-deny:loopback"},
		{&pol, "127.0.0.1:8080", verdictAllow, "allow:127.0.0.1:8080"},
		{&pol, "2130706433:8080", verdictAllow, "allow:127.0.0.1:8080"},
		{&pol, "[::ffff:127.0.0.1]:8080", verdictAllow, "allow:127.0.0.1:8080"},
		{&pol, "127.0.0.2:8080", verdictDeny, "always-deny:loopback"},
		{&pol, "[::1]:8443", verdictAllow, "allow:[::1]:8443"},
		{&pol, "[::1]:8080", verdictDeny, "always-deny:loopback"},
		{&pol, "192.168.1.1:80", verdictDeny, "always-deny:private"},
		{&pol, "[fe80::1]:80", verdictDeny, "always-deny:link-local"},
		{&pol, "100.64.0.1:80", verdictDeny, "always-deny:carrier-grade-NAT"},
		{&ask, "[64:ff9b::7f00:1]:80", verdictDeny, "always-deny:NAT64"},
		// Names are decided by the rules alone, before any lookup.
		{&pol, "localhost:8080", verdictDeny, "default:deny"},
		{&ask, "localhost:8080", verdictAsk, "default:ask"},
		// Public address literals no rule names: the default.
		{&ask, "[2606:4700::1111]:443", verdictAsk, "default:ask"},
	}
	for _, tt := range tests {
		tg := mustTarget(t, tt.target)
		o := tt.pol.decide(tg)
		if o.verdict != tt.verdict || o.rule != tt.rule {
			t.Errorf("%s decide(%v) = %d %q (%s), want %d %q", tt.pol.Default, tg, o.verdict, o.rule, o.reason, tt.verdict, tt.rule)
		}
		if o.verdict == verdictDeny && o.reason == "" {
			t.Errorf("decide(%v): a denial without a reason", tg)
		}
	}
}

func TestPolicyCheckAddr(t *testing.T) {
	pol := mustPolicy(t, DefaultDeny,
		[]string{"0.0.0.0/0", "::/0", "127.0.0.1:8080", "10.0.0.0/8:443", "fd00::/8", "169.254.169.254", "192.168.0.0/16"},
		[]string{"10.9.0.0/16", "8.8.4.4", "192.168.7.7:80"})
	tests := []struct {
		addr    string
		port    uint16
		verdict verdict
		rule    string
	}{
		{"8.8.8.8", 53, verdictAllow, ""},
		{"2606:4700::1111", 443, verdictAllow, ""},
		{"8.8.4.4", 53, verdictDeny, "deny:8.8.4.4"},
		{"::ffff:8.8.4.4", 53, verdictDeny, "deny:8.8.4.4"},
		{"127.0.0.1", 8080, verdictAllow, "allow:127.0.0.1:8080"},
		{"::ffff:127.0.0.1", 8080, verdictAllow, "allow:127.0.0.1:8080"},
		{"127.0.0.1", 8081, verdictDeny, "always-deny:loopback"},
		{"127.0.0.2", 8080, verdictDeny, "always-deny:loopback"},
		{"::1", 8080, verdictDeny, "always-deny:loopback"},
		{"10.1.2.3", 443, verdictAllow, "allow:10.0.0.0/8:443"},
		{"10.1.2.3", 80, verdictDeny, "always-deny:private"},
		{"10.9.1.1", 443, verdictDeny, "deny:10.9.0.0/16"},
		{"192.168.7.7", 80, verdictDeny, "deny:192.168.7.7:80"},
		{"192.168.7.7", 81, verdictAllow, "allow:192.168.0.0/16"},
		{"fd12::1", 80, verdictAllow, "allow:fd00::/8"},
		{"fc00::1", 80, verdictDeny, "always-deny:unique-local"}, // fd00::/8 is not all of fc00::/7
		{"fe80::1", 80, verdictDeny, "always-deny:link-local"},
		{"fe80::1%eth0", 80, verdictDeny, "always-deny:zone"},
		// Metadata: no rule opens it, not even one naming it.
		{"169.254.169.254", 80, verdictDeny, "always-deny:metadata"},
		{"::ffff:169.254.169.254", 80, verdictDeny, "always-deny:metadata"},
		{"fd00:ec2::254", 80, verdictDeny, "always-deny:metadata"},
		{"100.100.100.200", 80, verdictDeny, "always-deny:metadata"},
		{"168.63.129.16", 80, verdictDeny, "always-deny:metadata"},
		{"169.254.1.1", 80, verdictDeny, "always-deny:link-local"},
		{"0.0.0.0", 80, verdictDeny, "always-deny:this-network"},
		{"::", 80, verdictDeny, "always-deny:IPv4-compatible-or-unspecified"},
		{"224.0.0.1", 80, verdictDeny, "always-deny:multicast"},
		{"255.255.255.255", 80, verdictDeny, "always-deny:reserved"},
	}
	for _, tt := range tests {
		o := pol.checkAddr(netip.MustParseAddr(tt.addr), tt.port)
		if o.verdict != tt.verdict || o.rule != tt.rule {
			t.Errorf("checkAddr(%s, %d) = %d %q (%s), want %d %q", tt.addr, tt.port, o.verdict, o.rule, o.reason, tt.verdict, tt.rule)
		}
		if o.verdict == verdictDeny && o.reason == "" {
			t.Errorf("checkAddr(%s): a denial without a reason", tt.addr)
		}
	}

	// With no rules at all, every internal range and metadata address is
	// refused, and a public address passes (the name rules decided).
	empty := mustPolicy(t, DefaultAsk, nil, nil)
	for _, r := range internalRanges() {
		if o := empty.checkAddr(r.prefix.Addr(), 80); o.verdict != verdictDeny {
			t.Errorf("no rules: checkAddr(%v) = %d", r.prefix.Addr(), o.verdict)
		}
	}
	for a := range metadataAddrs() {
		if o := empty.checkAddr(a, 80); o.verdict != verdictDeny || o.rule != "always-deny:metadata" {
			t.Errorf("no rules: checkAddr(%v) = %d %q", a, o.verdict, o.rule)
		}
	}
	if o := empty.checkAddr(netip.MustParseAddr("93.184.216.34"), 80); o.verdict != verdictAllow {
		t.Errorf("no rules: checkAddr(public) = %d %q", o.verdict, o.rule)
	}
}
