package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	pfx := netip.MustParsePrefix
	tests := []struct {
		in   string
		want Rule
		str  string // String(); defaults to in
	}{
		{in: "example.com", want: Rule{Host: "example.com"}},
		{in: "Example.COM.", want: Rule{Host: "example.com"}, str: "example.com"},
		{in: "example.com:443", want: Rule{Host: "example.com", Port: 443}},
		{in: "*.example.com", want: Rule{Host: "*.example.com"}},
		{in: "*.example.com:443", want: Rule{Host: "*.example.com", Port: 443}},
		{in: "*", want: Rule{Host: "*"}},
		{in: "*:443", want: Rule{Host: "*", Port: 443}},
		{in: "localhost:8080", want: Rule{Host: "localhost", Port: 8080}},
		{in: "xn--bcher-kva.example", want: Rule{Host: "xn--bcher-kva.example"}},
		{in: "1e5.example", want: Rule{Host: "1e5.example"}},
		{in: "10.0.0.0/8", want: Rule{Prefix: pfx("10.0.0.0/8")}},
		{in: "10.0.0.0/8:443", want: Rule{Prefix: pfx("10.0.0.0/8"), Port: 443}},
		{in: "0.0.0.0/0", want: Rule{Prefix: pfx("0.0.0.0/0")}},
		{in: "1.2.3.4", want: Rule{Prefix: pfx("1.2.3.4/32")}},
		{in: "1.2.3.4/32", want: Rule{Prefix: pfx("1.2.3.4/32")}, str: "1.2.3.4"},
		{in: "1.2.3.4:80", want: Rule{Prefix: pfx("1.2.3.4/32"), Port: 80}},
		{in: "127.0.0.1:8080", want: Rule{Prefix: pfx("127.0.0.1/32"), Port: 8080}},
		{in: "::1", want: Rule{Prefix: pfx("::1/128")}},
		{in: "[::1]:443", want: Rule{Prefix: pfx("::1/128"), Port: 443}},
		{in: "fd00::/8", want: Rule{Prefix: pfx("fd00::/8")}},
		{in: "[fd00::/8]:443", want: Rule{Prefix: pfx("fd00::/8"), Port: 443}},
		{in: "[::1/128]:443", want: Rule{Prefix: pfx("::1/128"), Port: 443}, str: "[::1]:443"},
		{in: "::/0", want: Rule{Prefix: pfx("::/0")}},
		{in: "::ffff:1.2.3.4", want: Rule{Prefix: pfx("1.2.3.4/32")}, str: "1.2.3.4"},
		{in: "[::ffff:1.2.3.4]:80", want: Rule{Prefix: pfx("1.2.3.4/32"), Port: 80}, str: "1.2.3.4:80"},
		{in: "::ffff:10.0.0.0/104", want: Rule{Prefix: pfx("10.0.0.0/8")}, str: "10.0.0.0/8"},
		{in: "[::ffff:10.0.0.0/104]:22", want: Rule{Prefix: pfx("10.0.0.0/8"), Port: 22}, str: "10.0.0.0/8:22"},
	}
	for _, tt := range tests {
		got, err := ParseRule(tt.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseRule(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		str := tt.str
		if str == "" {
			str = tt.in
		}
		if got.String() != str {
			t.Errorf("ParseRule(%q).String() = %q, want %q", tt.in, got.String(), str)
		}
		again, err := ParseRule(got.String())
		if err != nil || again != got {
			t.Errorf("ParseRule(%q) = %#v, %v; want %#v", got.String(), again, err, got)
		}
		if got.IsName() != (got.Host != "") {
			t.Errorf("ParseRule(%q).IsName() = %v", tt.in, got.IsName())
		}
	}

	bad := []string{
		"", ":", ":443", "*:", "*:0", "*:65536", "example.com:", "example.com:0",
		"example.com:65536", "example.com:https", "example.com:443:1",
		"*.", "*.*.example.com", "**.example.com", "*example.com", "a.*.example.com",
		"-a.example.com", "a-.example.com", "a..example.com", ".example.com",
		"example..com", "_srv.example.com", "exa mple.com", "example.com/path",
		"http://example.com", "user@example.com", "bücher.example",
		"\u212A.example.com", // KELVIN SIGN lower-cases to 'k'
		strings.Repeat("a", 64) + ".com", strings.Repeat("a.", 127) + "com",
		// Addresses must be written plainly.
		"2130706433", "0x7f000001", "0x7f.1", "0177.0.0.1", "127.1", "1.2.3.4.5",
		"1.2.3.4.5:80", "0x7f000001:80", "foo.123",
		// Prefixes.
		"10.0.0.1/8", "10.0.0.0/33", "10.0.0.0/8:0", "10.0.0.0/8:x", "fd00::1/8",
		"[fd00::/8]", "[fd00::/8]:", "[fd00::/8]:0", "[fd00::/8]443", "[::1]",
		"::ffff:0:0/95x", "::ffff:10.0.0.0/90", "::ffff:10.0.0.1/104",
		// Zones.
		"fe80::1%eth0", "[fe80::1%eth0]:80", "fe80::%eth0/64", "[fe80::%eth0/64]:80",
		"1.2.3.4:0",
	}
	for _, s := range bad {
		if r, err := ParseRule(s); err == nil {
			t.Errorf("ParseRule(%q) = %#v (%q); want an error", s, r, r.String())
		}
	}
}

func mustRule(t testing.TB, s string) Rule {
	t.Helper()
	r, err := ParseRule(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustTarget(t testing.TB, s string) Target {
	t.Helper()
	tg, err := ParseTarget(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestRuleMatchTarget(t *testing.T) {
	tests := []struct {
		rule, target string
		want         bool
	}{
		{"example.com", "example.com:443", true},
		{"example.com", "EXAMPLE.com.:80", true},
		{"example.com", "www.example.com:443", false},
		{"example.com", "example.com.evil:443", false},
		{"example.com", "notexample.com:443", false},
		{"example.com:443", "example.com:443", true},
		{"example.com:443", "example.com:80", false},
		{"*.example.com", "www.example.com:443", true},
		{"*.example.com", "a.b.example.com:443", true},
		{"*.example.com", "example.com:443", false},
		{"*.example.com", "badexample.com:443", false},
		{"*.example.com", "example.com.evil.net:443", false},
		{"*.example.com:443", "www.example.com:80", false},
		{"*", "anything.test:1", true},
		{"*", "1.2.3.4:80", false}, // "*" never matches an address literal
		{"*", "[2606:4700::1111]:80", false},
		{"*:443", "anything.test:443", true},
		{"*:443", "anything.test:80", false},
		{"1.2.3.4", "1.2.3.4:80", true},
		{"1.2.3.4", "1.2.3.5:80", false},
		{"1.2.3.4:80", "1.2.3.4:81", false},
		{"1.2.3.0/24", "1.2.3.200:80", true},
		{"1.2.3.0/24", "1.2.4.0:80", false},
		{"1.2.3.0/24", "example.com:80", false}, // a prefix rule never matches a name
		{"127.0.0.1:8080", "2130706433:8080", true},
		{"127.0.0.1:8080", "[::ffff:127.0.0.1]:8080", true},
		{"::1", "[::1]:80", true},
		{"::1", "127.0.0.1:80", false},
		{"0.0.0.0/0", "[::1]:80", false},
		{"::/0", "1.2.3.4:80", false},
		{"fd00::/8", "[fd12::1]:443", true},
		{"[fd00::/8]:443", "[fd12::1]:80", false},
	}
	for _, tt := range tests {
		r, tg := mustRule(t, tt.rule), mustTarget(t, tt.target)
		if got := r.MatchTarget(tg); got != tt.want {
			t.Errorf("%q.MatchTarget(%v) = %v, want %v", tt.rule, tg, got, tt.want)
		}
	}
}

func TestRuleMatchAddr(t *testing.T) {
	tests := []struct {
		rule, addr string
		port       uint16
		want       bool
	}{
		{"1.2.3.0/24", "1.2.3.4", 80, true},
		{"1.2.3.0/24", "::ffff:1.2.3.4", 80, true},
		{"1.2.3.0/24:443", "1.2.3.4", 80, false},
		{"1.2.3.0/24", "1.2.4.4", 80, false},
		{"example.com", "1.2.3.4", 80, false},
		{"*", "1.2.3.4", 80, false},
		{"::1", "::1", 1, true},
	}
	for _, tt := range tests {
		if got := mustRule(t, tt.rule).MatchAddr(netip.MustParseAddr(tt.addr), tt.port); got != tt.want {
			t.Errorf("%q.MatchAddr(%s, %d) = %v, want %v", tt.rule, tt.addr, tt.port, got, tt.want)
		}
	}
}

func TestRuleCovers(t *testing.T) {
	tests := []struct {
		r, o string
		want bool
	}{
		{"example.com", "example.com", true},
		{"example.com", "example.com:443", true},
		{"example.com:443", "example.com", false},
		{"example.com:443", "example.com:443", true},
		{"example.com:443", "example.com:80", false},
		{"example.com", "www.example.com", false},
		{"example.com", "*.example.com", false},
		{"*.example.com", "www.example.com", true},
		{"*.example.com", "a.b.example.com:443", true},
		{"*.example.com", "*.example.com", true},
		{"*.example.com", "*.www.example.com", true},
		{"*.example.com", "example.com", false}, // the apex is not covered
		{"*.example.com", "badexample.com", false},
		{"*.example.com", "*.badexample.com", false},
		{"*.example.com", "*", false},
		{"*.example.com:443", "www.example.com", false},
		{"*", "example.com", true},
		{"*", "*.example.com:443", true},
		{"*", "*", true},
		{"*", "1.2.3.4", false},
		{"*:443", "example.com:443", true},
		{"*:443", "example.com", false},
		{"example.com", "*", false},
		{"10.0.0.0/8", "10.1.0.0/16", true},
		{"10.0.0.0/8", "10.1.2.3", true},
		{"10.0.0.0/8", "10.0.0.0/8:443", true},
		{"10.0.0.0/8", "10.0.0.0/7", false},
		{"10.0.0.0/8", "11.0.0.0/8", false},
		{"10.0.0.0/8:443", "10.1.2.3", false},
		{"10.0.0.0/8:443", "10.1.2.3:443", true},
		{"0.0.0.0/0", "10.1.2.3", true},
		{"0.0.0.0/0", "::1", false}, // families differ
		{"::/0", "1.2.3.4", false},
		{"::/0", "fd00::/8", true},
		{"fd00::/8", "[fd12::/16]:443", true},
		{"[fd00::/8]:443", "fd12::/16", false},
		{"10.0.0.0/8", "example.com", false},
		{"example.com", "10.0.0.0/8", false},
	}
	for _, tt := range tests {
		r, o := mustRule(t, tt.r), mustRule(t, tt.o)
		if got := r.Covers(o); got != tt.want {
			t.Errorf("%q.Covers(%q) = %v, want %v", tt.r, tt.o, got, tt.want)
		}
	}
}

func TestRuleLiftsInternal(t *testing.T) {
	loop := netip.MustParsePrefix("127.0.0.0/8")
	priv := netip.MustParsePrefix("10.0.0.0/8")
	tests := []struct {
		rule, addr string
		port       uint16
		rng        netip.Prefix
		want       bool
	}{
		{"127.0.0.1:8080", "127.0.0.1", 8080, loop, true},
		{"127.0.0.1:8080", "127.0.0.1", 8081, loop, false},
		{"127.0.0.1", "127.0.0.1", 1, loop, true},
		{"127.0.0.0/8", "127.9.9.9", 1, loop, true},
		{"126.0.0.0/7", "127.9.9.9", 1, loop, false}, // wider than the range
		{"0.0.0.0/0", "127.0.0.1", 80, loop, false},
		{"0.0.0.0/0", "10.1.2.3", 80, priv, false},
		{"10.1.2.0/24", "10.1.2.3", 80, priv, true},
		{"10.1.2.0/24", "10.1.3.3", 80, priv, false},
		{"::/0", "::1", 80, netip.MustParsePrefix("::1/128"), false},
		{"::1", "::1", 80, netip.MustParsePrefix("::1/128"), true},
		{"localhost", "127.0.0.1", 80, loop, false},
		{"*", "127.0.0.1", 80, loop, false},
	}
	for _, tt := range tests {
		if got := mustRule(t, tt.rule).liftsInternal(netip.MustParseAddr(tt.addr), tt.port, tt.rng); got != tt.want {
			t.Errorf("%q.liftsInternal(%s, %d, %v) = %v, want %v", tt.rule, tt.addr, tt.port, tt.rng, got, tt.want)
		}
	}
}
