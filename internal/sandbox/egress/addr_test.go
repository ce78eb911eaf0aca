package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseHost(t *testing.T) {
	loop := netip.MustParseAddr("127.0.0.1")
	tests := []struct {
		in   string
		name string // want a name
		addr string // want an address
		bad  bool
	}{
		// Plain names.
		{in: "example.com", name: "example.com"},
		{in: "EXAMPLE.Com", name: "example.com"},
		{in: "example.com.", name: "example.com"},
		{in: "localhost", name: "localhost"},
		{in: "_srv.example.com", name: "_srv.example.com"},
		{in: "a-b.c-d.example", name: "a-b.c-d.example"},
		{in: "xn--bcher-kva.example", name: "xn--bcher-kva.example"},
		{in: "1e5", name: "1e5"}, // not a number in inet_aton's syntax
		{in: "0x7g", name: "0x7g"},
		{in: strings.Repeat("a", 63) + ".com", name: strings.Repeat("a", 63) + ".com"},

		// Every inet_aton spelling of 127.0.0.1.
		{in: "127.0.0.1", addr: "127.0.0.1"},
		{in: "127.0.0.1.", addr: "127.0.0.1"},
		{in: "2130706433", addr: "127.0.0.1"},
		{in: "0x7f000001", addr: "127.0.0.1"},
		{in: "0X7F000001", addr: "127.0.0.1"},
		{in: "0177.0.0.1", addr: "127.0.0.1"},
		{in: "0177.0000.0.01", addr: "127.0.0.1"},
		{in: "127.1", addr: "127.0.0.1"},
		{in: "127.0.1", addr: "127.0.0.1"},
		{in: "0x7f.1", addr: "127.0.0.1"},
		{in: "0x7f.0.0.1", addr: "127.0.0.1"},
		{in: "0x7F.0x0.0.0x1", addr: "127.0.0.1"},
		{in: "017700000001", addr: "127.0.0.1"},
		{in: "0x7f.0x", addr: "127.0.0.0"}, // glibc reads "0x" as 0
		{in: "0", addr: "0.0.0.0"},
		{in: "0x", addr: "0.0.0.0"},
		{in: "4294967295", addr: "255.255.255.255"},
		{in: "169.254.169.254", addr: "169.254.169.254"},
		{in: "0xa9fea9fe", addr: "169.254.169.254"},
		{in: "2852039166", addr: "169.254.169.254"},
		{in: "169.254.43518", addr: "169.254.169.254"},
		{in: "1.2.3.4", addr: "1.2.3.4"},

		// IPv6, bracketed or not; IPv4-mapped becomes IPv4.
		{in: "[::1]", addr: "::1"},
		{in: "::1", addr: "::1"},
		{in: "[0:0:0:0:0:0:0:1]", addr: "::1"},
		{in: "::ffff:127.0.0.1", addr: "127.0.0.1"},
		{in: "[::ffff:127.0.0.1]", addr: "127.0.0.1"},
		{in: "[::ffff:7f00:1]", addr: "127.0.0.1"},
		{in: "::FFFF:A9FE:A9FE", addr: "169.254.169.254"},
		{in: "[2001:DB8::1]", addr: "2001:db8::1"},
		{in: "fd00:ec2::254", addr: "fd00:ec2::254"},

		// Refused.
		{in: "", bad: true},
		{in: ".", bad: true},
		{in: "..", bad: true},
		{in: "example.com..", bad: true},
		{in: ".example.com", bad: true},
		{in: "a..b", bad: true},
		{in: strings.Repeat("a", 64) + ".com", bad: true},
		{in: strings.Repeat("a.", 127) + "com", bad: true},
		{in: strings.Repeat("a", 256), bad: true},
		{in: "-a.com", bad: true},
		{in: "a-.com", bad: true},
		{in: "a.-b.com", bad: true},
		{in: "a.b-.com", bad: true},
		{in: "exa mple.com", bad: true},
		{in: "exa\x00mple.com", bad: true},
		{in: "example.com/", bad: true},
		{in: "user@example.com", bad: true},
		{in: "bücher.example", bad: true},
		{in: "例え.jp", bad: true},
		{in: "\u212Aexample.com", bad: true}, // KELVIN SIGN lower-cases to 'k'
		{in: "g\u0130thub.com", bad: true},   // 'İ' lower-cases to 'i'
		{in: "\xff.com", bad: true},
		{in: "foo.123", bad: true},
		{in: "1.2.3.4.5", bad: true},
		{in: "256.0.0.1", bad: true},
		{in: "1.2.3.256", bad: true},
		{in: "1.2.65536", bad: true},
		{in: "1.16777216", bad: true},
		{in: "4294967296", bad: true},
		{in: "0x100000000", bad: true},
		{in: "08.0.0.1", bad: true},
		{in: "0189", bad: true},
		{in: "127..1", bad: true},
		{in: "127.0.0.1..", bad: true},
		{in: "[127.0.0.1]", bad: true},
		{in: "[::1", bad: true},
		{in: "::1]", bad: true},
		{in: "[::1]:80", bad: true},
		{in: "[]", bad: true},
		{in: "fe80::1%eth0", bad: true},
		{in: "[fe80::1%eth0]", bad: true},
		{in: "[fe80::1%25eth0]", bad: true},
		{in: "1:2", bad: true},
		{in: ":::", bad: true},
	}
	for _, tt := range tests {
		name, addr, err := ParseHost(tt.in)
		switch {
		case tt.bad:
			if err == nil {
				t.Errorf("ParseHost(%q) = %q, %v; want an error", tt.in, name, addr)
			} else if !errors.Is(err, errBadHost) {
				t.Errorf("ParseHost(%q) error %v does not wrap errBadHost", tt.in, err)
			}
		case err != nil:
			t.Errorf("ParseHost(%q): %v", tt.in, err)
		case tt.name != "":
			if name != tt.name || addr.IsValid() {
				t.Errorf("ParseHost(%q) = %q, %v; want name %q", tt.in, name, addr, tt.name)
			}
		default:
			want := netip.MustParseAddr(tt.addr)
			if name != "" || addr != want {
				t.Errorf("ParseHost(%q) = %q, %v; want address %v", tt.in, name, addr, want)
			}
			if addr.Is4In6() || addr.Zone() != "" {
				t.Errorf("ParseHost(%q) = %v: mapped or zoned", tt.in, addr)
			}
		}
	}
	if _, a, _ := ParseHost("2130706433"); a != loop {
		t.Fatalf("decimal loopback: %v", a)
	}
}

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in      string
		defPort uint16
		want    string // Target.String(); "" = error
		name    bool
	}{
		{"example.com:443", 0, "example.com:443", true},
		{"Example.COM.:8080", 0, "example.com:8080", true},
		{"example.com", 80, "example.com:80", true},
		{"example.com", 0, "", false}, // port required
		{"example.com:", 80, "", false},
		{"example.com:0", 80, "", false},
		{"example.com:65535", 0, "example.com:65535", true},
		{"example.com:65536", 0, "", false},
		{"example.com:-1", 0, "", false},
		{"example.com:+80", 0, "", false},
		{"example.com:8o", 0, "", false},
		{"example.com: 80", 0, "", false},
		{"example.com:080", 0, "example.com:80", true},
		{":80", 0, "", false},
		{"", 80, "", false},
		{"127.0.0.1:80", 0, "127.0.0.1:80", false},
		{"2130706433:80", 0, "127.0.0.1:80", false},
		{"0x7f000001:80", 0, "127.0.0.1:80", false},
		{"0177.0.0.1:80", 0, "127.0.0.1:80", false},
		{"127.1:80", 0, "127.0.0.1:80", false},
		{"[::1]:443", 0, "[::1]:443", false},
		{"[::1]", 443, "[::1]:443", false},
		{"[::1]", 0, "", false},
		{"[::1]:", 443, "", false},
		{"[::ffff:127.0.0.1]:80", 0, "127.0.0.1:80", false},
		{"[::ffff:7f00:1]:80", 0, "127.0.0.1:80", false},
		{"[::1]80", 0, "", false},
		{"[::1]]:80", 0, "", false},
		{"[::1:80", 0, "", false},
		{"::1:80", 0, "", false}, // ambiguous: brackets required
		{"::1", 80, "", false},
		{"[fe80::1%eth0]:80", 0, "", false},
		{"[fe80::1%25eth0]:80", 0, "", false},
		{"[127.0.0.1]:80", 0, "", false},
		{"a.b:c:80", 0, "", false},
		{"1.2.3.4.5:80", 0, "", false},
		{"bücher.example:80", 0, "", false},
	}
	for _, tt := range tests {
		got, err := ParseTarget(tt.in, tt.defPort)
		if tt.want == "" {
			if err == nil {
				t.Errorf("ParseTarget(%q, %d) = %v; want an error", tt.in, tt.defPort, got)
			} else if !errors.Is(err, errBadHost) {
				t.Errorf("ParseTarget(%q) error %v does not wrap errBadHost", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseTarget(%q, %d): %v", tt.in, tt.defPort, err)
			continue
		}
		if got.String() != tt.want || got.IsName() != tt.name {
			t.Errorf("ParseTarget(%q, %d) = %v (name %v); want %v (name %v)", tt.in, tt.defPort, got, got.IsName(), tt.want, tt.name)
		}
		// String is what ParseTarget reads back.
		if again, err := ParseTarget(got.String(), 0); err != nil || again != got {
			t.Errorf("ParseTarget(%q) = %v, %v; want %v", got.String(), again, err, got)
		}
	}
}

func TestTargetStrings(t *testing.T) {
	tests := []struct {
		t          Target
		host, full string
	}{
		{Target{Host: "example.com", Port: 443}, "example.com", "example.com:443"},
		{Target{Addr: netip.MustParseAddr("1.2.3.4"), Port: 80}, "1.2.3.4", "1.2.3.4:80"},
		{Target{Addr: netip.MustParseAddr("::1"), Port: 80}, "::1", "[::1]:80"},
	}
	for _, tt := range tests {
		if got := tt.t.HostString(); got != tt.host {
			t.Errorf("%#v.HostString() = %q, want %q", tt.t, got, tt.host)
		}
		if got := tt.t.String(); got != tt.full {
			t.Errorf("%#v.String() = %q, want %q", tt.t, got, tt.full)
		}
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		addr  string
		class addrClass
		what  string // the range's description, for internal ones
	}{
		{"127.0.0.1", classInternal, "loopback"},
		{"127.255.255.254", classInternal, "loopback"},
		{"0.0.0.0", classInternal, "this-network"},
		{"0.1.2.3", classInternal, "this-network"},
		{"10.0.0.1", classInternal, "private"},
		{"10.255.255.255", classInternal, "private"},
		{"100.64.0.1", classInternal, "carrier-grade NAT"},
		{"100.127.255.255", classInternal, "carrier-grade NAT"},
		{"169.254.0.1", classInternal, "link-local"},
		{"172.16.0.1", classInternal, "private"},
		{"172.31.255.255", classInternal, "private"},
		{"192.0.0.8", classInternal, "IETF protocol assignments"},
		{"192.0.2.1", classInternal, "documentation"},
		{"192.88.99.1", classInternal, "6to4 relay"},
		{"192.168.1.1", classInternal, "private"},
		{"198.18.0.1", classInternal, "benchmarking"},
		{"198.19.255.255", classInternal, "benchmarking"},
		{"198.51.100.7", classInternal, "documentation"},
		{"203.0.113.9", classInternal, "documentation"},
		{"224.0.0.1", classInternal, "multicast"},
		{"239.255.255.250", classInternal, "multicast"},
		{"240.0.0.1", classInternal, "reserved"},
		{"255.255.255.255", classInternal, "reserved"},
		{"::1", classInternal, "loopback"},
		{"::", classInternal, "IPv4-compatible or unspecified"},
		{"::7f00:1", classInternal, "IPv4-compatible or unspecified"},
		{"64:ff9b::7f00:1", classInternal, "NAT64"},
		{"64:ff9b:1::1", classInternal, "NAT64"},
		{"100::1", classInternal, "discard"},
		{"2001::1", classInternal, "Teredo"},
		{"2001:db8::1", classInternal, "documentation"},
		{"2002:7f00:1::1", classInternal, "6to4"},
		{"fc00::1", classInternal, "unique local"},
		{"fd12:3456::1", classInternal, "unique local"},
		{"fe80::1", classInternal, "link-local"},
		{"febf::1", classInternal, "link-local"},
		{"fec0::1", classInternal, "site-local"},
		{"ff02::1", classInternal, "multicast"},
		{"::ffff:127.0.0.1", classInternal, "loopback"},
		{"::ffff:10.1.2.3", classInternal, "private"},

		{"169.254.169.254", classMetadata, "cloud metadata"},
		{"169.254.169.253", classMetadata, "cloud metadata"},
		{"169.254.169.123", classMetadata, "cloud metadata"},
		{"169.254.170.2", classMetadata, "cloud metadata"},
		{"169.254.170.23", classMetadata, "cloud metadata"},
		{"fd00:ec2::254", classMetadata, "cloud metadata"},
		{"fd00:ec2::253", classMetadata, "cloud metadata"},
		{"fd00:ec2::23", classMetadata, "cloud metadata"},
		{"100.100.100.200", classMetadata, "cloud metadata"},
		{"168.63.129.16", classMetadata, "cloud metadata"},
		{"::ffff:169.254.169.254", classMetadata, "cloud metadata"},
		{"fe80::1%eth0", classInternal, "link-local"},

		{"1.1.1.1", classPublic, ""},
		{"93.184.216.34", classPublic, ""},
		{"100.63.255.255", classPublic, ""},
		{"100.128.0.0", classPublic, ""},
		{"172.15.255.255", classPublic, ""},
		{"172.32.0.0", classPublic, ""},
		{"192.169.0.1", classPublic, ""},
		{"223.255.255.255", classPublic, ""},
		{"2606:4700::1111", classPublic, ""},
		{"2001:4860:4860::8888", classPublic, ""},
		{"168.63.129.17", classPublic, ""},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		class, rng := classify(a)
		if class != tt.class || rng.what != tt.what {
			t.Errorf("classify(%s) = %d %q, want %d %q", tt.addr, class, rng.what, tt.class, tt.what)
		}
		if class != classPublic && !rng.prefix.Contains(a.Unmap().WithZone("")) {
			t.Errorf("classify(%s): range %v does not hold it", tt.addr, rng.prefix)
		}
	}
	// Every metadata address is classified as such, and every range's
	// first address as internal.
	for a := range metadataAddrs() {
		if c, _ := classify(a); c != classMetadata {
			t.Errorf("classify(%v) = %d, want metadata", a, c)
		}
	}
	for _, r := range internalRanges() {
		if c, _ := classify(r.prefix.Addr()); c != classInternal {
			t.Errorf("classify(%v) = %d, want internal", r.prefix.Addr(), c)
		}
	}
}
