package egress

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// refInetAton is inet_aton(3) as glibc (2.28 and later) has it: each part
// must start with a digit and is read by strtoul(…, 0); the last part
// fills the remaining bytes.
func refInetAton(s string) (netip.Addr, bool) {
	var parts []uint64
	for {
		if s == "" || s[0] < '0' || s[0] > '9' {
			return netip.Addr{}, false
		}
		base, digits := 10, "0123456789"
		i := 0
		switch {
		case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && strings.ContainsRune("0123456789abcdefABCDEF", rune(s[2])):
			base, digits, i = 16, "0123456789abcdefABCDEF", 2
		case s[0] == '0':
			base, digits = 8, "01234567"
		}
		j := i
		for j < len(s) && strings.IndexByte(digits, s[j]) >= 0 {
			j++
		}
		v, err := strconv.ParseUint(s[i:j], base, 64)
		if err != nil || v > 0xffffffff {
			return netip.Addr{}, false
		}
		parts = append(parts, v)
		s = s[j:]
		if s == "" {
			break
		}
		if s[0] != '.' {
			return netip.Addr{}, false
		}
		s = s[1:]
		if len(parts) > 3 {
			return netip.Addr{}, false
		}
	}
	var ip uint64
	last := len(parts) - 1
	for i := range last {
		if parts[i] > 0xff {
			return netip.Addr{}, false
		}
		ip |= parts[i] << (24 - 8*i)
	}
	if parts[last] >= 1<<(32-8*last) {
		return netip.Addr{}, false
	}
	ip |= parts[last]
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(ip))
	return netip.AddrFrom4(b), true
}

func TestRefInetAton(t *testing.T) {
	for s, want := range map[string]string{
		"127.0.0.1": "127.0.0.1", "2130706433": "127.0.0.1", "0x7f.1": "127.0.0.1", "0177.0.0.1": "127.0.0.1",
		"127.1": "127.0.0.1", "0": "0.0.0.0", "0x": "", "08": "", "1.2.3.4.5": "", "256.1": "", "1.16777216": "",
	} {
		a, ok := refInetAton(s)
		if (want == "") == ok || ok && a.String() != want {
			t.Errorf("refInetAton(%q) = %v, %v; want %q", s, a, ok, want)
		}
	}
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{
		"example.com", "EXAMPLE.com.", "_srv.x.y", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "127.0.1",
		"0x7f.0.0.1", "0x", "0x.1", "[::1]", "::1", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "[fe80::1%eth0]",
		"fe80::1%25eth0", "a..b", "-a.b", "a-.b", "1.2.3.4.5", "foo.123", "1e5", "bücher.de", "\u212Aexample.com",
		"xn--bcher-kva.de", "127.0.0.1.", "..", "[127.0.0.1]", "4294967295", "4294967296", "08.1", "0X7F.1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, addr, err := ParseHost(s)
		if err != nil {
			if name != "" || addr.IsValid() {
				t.Fatalf("ParseHost(%q) failed but returned %q %v", s, name, addr)
			}
			if !errors.Is(err, errBadHost) {
				t.Fatalf("ParseHost(%q): %v does not wrap errBadHost", s, err)
			}
			// An address in glibc's spelling is never refused.
			if a, ok := refInetAton(strings.TrimSuffix(s, ".")); ok && !strings.Contains(s, ":") {
				t.Fatalf("ParseHost(%q) refused what inet_aton reads as %v: %v", s, a, err)
			}
			return
		}
		if (name == "") == addr.IsValid() == false {
			t.Fatalf("ParseHost(%q) = %q and %v", s, name, addr)
		}
		if name != "" {
			if name != strings.ToLower(name) || strings.HasSuffix(name, ".") || checkName(name) != nil {
				t.Fatalf("ParseHost(%q) = name %q, not normal", s, name)
			}
			for i := 0; i < len(name); i++ {
				if name[i] >= 0x80 {
					t.Fatalf("ParseHost(%q) = a name that is not ASCII: %q", s, name)
				}
			}
			if _, err := netip.ParseAddr(name); err == nil || looksNumeric(name) {
				t.Fatalf("ParseHost(%q) = name %q, which is an address", s, name)
			}
			if a, ok := refInetAton(name); ok {
				t.Fatalf("ParseHost(%q) = name %q, which inet_aton reads as %v", s, name, a)
			}
			if n2, a2, err := ParseHost(name); err != nil || n2 != name || a2.IsValid() {
				t.Fatalf("ParseHost(%q) = %q, but ParseHost(%q) = %q %v %v", s, name, name, n2, a2, err)
			}
			return
		}
		if addr.Zone() != "" || addr.Is4In6() {
			t.Fatalf("ParseHost(%q) = %v: zoned or mapped", s, addr)
		}
		if a, ok := refInetAton(strings.ToLower(strings.TrimSuffix(s, "."))); ok && a != addr {
			t.Fatalf("ParseHost(%q) = %v, inet_aton says %v", s, addr, a)
		} else if !ok && !strings.Contains(s, ":") && !strings.Contains(strings.ToLower(s), "0x") {
			// The one known difference: ParseHost reads an empty "0x"
			// part as 0 where glibc refuses (the safe side: the address
			// is checked, never looked up).
			t.Fatalf("ParseHost(%q) = %v, which inet_aton refuses", s, addr)
		}
		for _, again := range []string{addr.String(), "[" + addr.String() + "]"} {
			if addr.Is4() && strings.HasPrefix(again, "[") {
				continue
			}
			if n2, a2, err := ParseHost(again); err != nil || n2 != "" || a2 != addr {
				t.Fatalf("ParseHost(%q) = %v, but ParseHost(%q) = %q %v %v", s, addr, again, n2, a2, err)
			}
		}
	})
}

func checkTarget(t *testing.T, in string, tg Target) {
	t.Helper()
	if tg.Port == 0 || tg.IsName() == tg.Addr.IsValid() || tg.Addr.Zone() != "" || tg.Addr.Is4In6() {
		t.Fatalf("%q gave %#v", in, tg)
	}
	again, err := ParseTarget(tg.String(), 0)
	if err != nil || again != tg {
		t.Fatalf("%q gave %v, but ParseTarget(%q) = %v, %v", in, tg, tg.String(), again, err)
	}
	// The forward pool dials the URL host it is given: the same target.
	u := &url.URL{Scheme: "http", Host: tg.String()}
	if dialed, err := ParseTarget(u.Host, 0); err != nil || dialed != tg {
		t.Fatalf("%q gave %v, dialled as %v, %v", in, tg, dialed, err)
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{
		"example.com:443", "example.com", "[::1]:80", "[::1]", "::1", "2130706433:80", "0x7f.1:8080",
		"[::ffff:127.0.0.1]:1", "a:0", "a:65536", "a:", "[::1]:", "[::1]x", ":80", "[fe80::1%25eth0]:80",
	} {
		f.Add(s, uint16(80))
		f.Add(s, uint16(0))
	}
	f.Fuzz(func(t *testing.T, s string, def uint16) {
		tg, err := ParseTarget(s, def)
		if err != nil {
			if !errors.Is(err, errBadHost) {
				t.Fatalf("ParseTarget(%q): %v does not wrap errBadHost", s, err)
			}
			return
		}
		checkTarget(t, s, tg)
	})
}

func FuzzForwardTarget(f *testing.F) {
	for _, s := range []string{
		"http://example.com/", "http://example.com:8080/x?y", "HTTP://EXAMPLE.COM./", "http://[::1]:80/",
		"http://2130706433/", "http://0x7f.1:8080/", "http://user:pw@example.com/", "https://example.com/",
		"/relative", "*", "http:///x", "http://:80/", "http://%e2%84%aa.com/", "http://[fe80::1%25eth0]/",
		"http://example.com:0/", "http://a.b:99999/", "ftp://x/", "http://x:1:2/", "//example.com/",
	} {
		f.Add("GET", s)
	}
	f.Add("CONNECT", "example.com:443")
	f.Fuzz(func(t *testing.T, method, uri string) {
		tg, err := ForwardTarget(method, uri)
		if err != nil {
			return
		}
		checkTarget(t, uri, tg)
		// The net/http server, reading the same request line, finds the
		// same host: the decision and the request agree.
		if strings.ContainsAny(method+uri, " \r\n\t") || method == "" {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(method + " " + uri + " HTTP/1.1\r\nHost: spoofed.test:1\r\n\r\n")))
		if err != nil {
			return
		}
		if got, err := ParseTarget(req.URL.Host, 80); err != nil || got != tg {
			t.Fatalf("ForwardTarget(%q) = %v; net/http reads host %q (%v, %v)", uri, tg, req.URL.Host, got, err)
		}
	})
}

func FuzzConnectTarget(f *testing.F) {
	for _, s := range []string{"example.com:443", "[::1]:443", "127.1:22", "example.com", "/rpc", "[::1", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tg, err := ConnectTarget(s)
		if err != nil {
			return
		}
		checkTarget(t, s, tg)
	})
}

func FuzzSOCKS(f *testing.F) {
	f.Add([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Add(append([]byte{5, 2, 0, 2}, socksRequest(1, "::1", 443)...))
	f.Add(append([]byte{5, 1, 0}, socksDomainRequest(1, "example.com", 443)...))
	f.Add(append([]byte{5, 1, 0}, socksDomainRequest(1, "2130706433", 80)...))
	f.Add(append([]byte{5, 1, 0}, socksDomainRequest(1, "[::1]", 80)...))
	f.Add(append([]byte{5, 1, 0}, socksRequest(2, "1.2.3.4", 80)...))
	f.Add(append([]byte{5, 1, 0}, socksRequest(1, "1.2.3.4", 0)...))
	f.Add([]byte{5, 1, 0, 5, 1, 0, 9})
	f.Add([]byte{5, 0})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 3, 0})
	f.Add([]byte{4, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		methods, err := ReadSOCKSGreeting(r)
		if err != nil {
			return
		}
		if len(methods) == 0 || len(methods) > 255 {
			t.Fatalf("%d methods", len(methods))
		}
		tg, err := ReadSOCKSRequest(r)
		if err != nil {
			var se *socksError
			if !errors.As(err, &se) {
				t.Fatalf("ReadSOCKSRequest: %v is not a *socksError", err)
			}
			switch se.rep {
			case repGeneralFailure, repHostUnreachable, repCmdUnsupported, repAtypUnsupported:
			default:
				t.Fatalf("ReadSOCKSRequest: reply %d", se.rep)
			}
			if se.rep == repCmdUnsupported {
				checkTarget(t, "socks", tg)
			}
			return
		}
		checkTarget(t, "socks", tg)
		if tg.IsName() && checkName(tg.Host) != nil {
			t.Fatalf("SOCKS name %q", tg.Host)
		}
	})
}

func FuzzParseRule(f *testing.F) {
	for _, s := range []string{
		"example.com", "*.example.com:443", "*", "*:443", "10.0.0.0/8", "10.0.0.0/8:443", "1.2.3.4:80", "[::1]:443",
		"[fd00::/8]:443", "::1", "::ffff:10.0.0.0/104", "[::ffff:1.2.3.4]:80", "0x7f.1", "2130706433", "fe80::1%eth0",
		"[fe80::%eth0/64]:80", "Example.COM.", "*.", "a..b", "\u212A.com", "::ffff:0:0/96", "0.0.0.0/0", "::/0",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("ParseRule(%q) = %#v (%q), but ParseRule(%q) = %#v, %v", s, r, r.String(), r.String(), again, err)
		}
		if !r.Covers(r) {
			t.Fatalf("%q does not cover itself", s)
		}
		if r.IsName() {
			if r.Host == "" || r.Host != strings.ToLower(r.Host) {
				t.Fatalf("ParseRule(%q) = host %q", s, r.Host)
			}
			for i := 0; i < len(r.Host); i++ {
				if r.Host[i] >= 0x80 {
					t.Fatalf("ParseRule(%q) = host %q, not ASCII", s, r.Host)
				}
			}
			// A name rule names something ParseHost reads as a name.
			if n := strings.TrimPrefix(r.Host, "*."); n != "*" {
				if name, _, err := ParseHost(n); err != nil || name != n {
					t.Fatalf("ParseRule(%q) = host %q, which ParseHost reads as %q, %v", s, r.Host, name, err)
				}
			}
		} else if a := r.Prefix.Addr(); a.Zone() != "" || a.Is4In6() || r.Prefix != r.Prefix.Masked() {
			t.Fatalf("ParseRule(%q) = prefix %v", s, r.Prefix)
		}
	})
}

// panicLog remembers whether net/http logged a recovered panic.
type panicLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *panicLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *panicLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "panic") {
		l.mu.Lock()
		l.msgs = append(l.msgs, r.Message)
		l.mu.Unlock()
	}
	return nil
}
func (l *panicLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *panicLog) WithGroup(string) slog.Handler      { return l }

func (l *panicLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.msgs
	l.msgs = nil
	return m
}

// FuzzGateConn writes raw bytes to a gate whose policy allows one
// loopback port (and one route to it). Names resolve to loopback,
// metadata and public addresses. Whatever the bytes, no connection
// reaches a listener the policy does not allow, nothing but the allowed
// port is dialled, nothing panics, and the gate closes cleanly.
func FuzzGateConn(f *testing.F) {
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello from the allowed server")
	}))
	f.Cleanup(allowed.Close)
	forbidden := newCounter(f, "tcp", "127.0.0.1:0", echo)
	forbidden6 := newCounter(f, "tcp", "[::1]:0", echo)
	res := newResolver(map[string]string{
		"allowed.test": "127.0.0.1",
		"rebind.test":  "127.0.0.1",
		"rebind6.test": "::1",
		"x.wild.test":  "127.0.0.1",
		"askyes.test":  "127.0.0.1",
		"meta.test":    "169.254.169.254",
		"mixed.test":   "169.254.169.254,::1,127.0.0.1",
		"private.test": "10.0.0.1",
		// Never allowed: nothing may leave this host in a test.
		"public.test": "93.184.216.34",
	})
	plog := &panicLog{}
	var recMu sync.Mutex
	var recs []Record
	srv, err := New(Options{
		Resolver: res, DialTimeout: time.Second, HandshakeTimeout: time.Second, Log: slog.New(plog),
		Secrets: func() *Secrets {
			s := NewSecrets()
			_ = s.Put(Secret{Name: "k", Value: "fuzz-secret-value", Host: "allowed.test", Header: "Authorization"}, "test")
			return s
		}(),
		Audit: func(r Record) { recMu.Lock(); recs = append(recs, r); recMu.Unlock() },
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(srv.Close)
	ap, bp, b6p := allowed.Listener.Addr().(*net.TCPAddr).Port, forbidden.Port(), forbidden6.Port()
	routeURL, _ := url.Parse("http://127.0.0.1:" + port(ap) + "/base/")
	cfg := Config{
		Scope: "fuzz", ID: "1",
		Network: sandbox.Network{Mode: sandbox.NetworkProxy, Default: DefaultAsk,
			Allow: []string{"127.0.0.1:" + port(ap), "allowed.test", "rebind.test", "rebind6.test", "*.wild.test",
				"meta.test", "mixed.test", "private.test", "169.254.169.254", "127.0.0.0/8:" + port(ap)},
			Deny:    []string{"denied.test"},
			Secrets: map[string]string{"K": "k"},
		},
		Ask: func(ctx context.Context, req sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
			return sandbox.NetworkAnswer{Allow: req.Host == "askyes.test"}, nil
		},
		AskTimeout: time.Second,
		Routes:     []Route{{Name: "r", Upstream: routeURL, Credentials: []Secret{{Name: "rk", Value: "route-secret-value", Header: "X-Key"}}}},
	}
	subst := strings.NewReplacer("{A}", port(ap), "{B}", port(bp), "{B6}", port(b6p))
	be := func(p int) string { return string([]byte{byte(p >> 8), byte(p)}) }
	binSubst := strings.NewReplacer("\xaa\xaa", be(ap), "\xbb\xbb", be(bp), "\xb6\xb6", be(b6p))

	for _, s := range []string{
		"GET http://127.0.0.1:{A}/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://127.0.0.1:{B}/ HTTP/1.1\r\nHost: 127.0.0.1:{A}\r\n\r\n",
		"GET http://127.0.0.1:{A}/ HTTP/1.1\r\nHost: 127.0.0.1:{B}\r\n\r\nGET http://rebind.test:{B}/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://2130706433:{B}/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://[::1]:{B6}/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://[::ffff:127.0.0.1]:{B}/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://rebind6.test:{B6}/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://mixed.test:{B}/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://askyes.test:{B}/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://allowed.test:{A}/ HTTP/1.1\r\nHost: x\r\nAuthorization: agentbox-placeholder-k\r\n\r\n",
		"POST http://x.wild.test:{A}/ HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
		"GET http://x.wild.test:{A}/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET http://allowed.test:{A}/ HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"CONNECT 127.0.0.1:{A} HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT 127.0.0.1:{B} HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT rebind.test:{B} HTTP/1.1\r\n\r\n",
		"CONNECT 0x7f.1:{B} HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT [::1]:{B6} HTTP/1.1\r\nHost: x\r\n\r\n",
		"CONNECT askyes.test:{B} HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /llm/r/v1/x?y=1 HTTP/1.1\r\nHost: x\r\nX-Key: agentbox-placeholder-rk\r\n\r\n",
		"GET /llm/r/../../x HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /llm/r/%2e%2e/x HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET //127.0.0.1:{B}/ HTTP/1.1\r\nHost: 127.0.0.1:{B}\r\n\r\n",
		"GET http://meta.test/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://public.test/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\xaa\xaaGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\xbb\xbb",
		"\x05\x01\x00\x05\x01\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\xb6\xb6",
		"\x05\x01\x00\x05\x01\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x7f\x00\x00\x01\xbb\xbb",
		"\x05\x01\x00\x05\x01\x00\x03\x0brebind.test\xbb\xbb",
		"\x05\x01\x00\x05\x01\x00\x03\x0baskyes.test\xbb\xbb",
		"\x05\x01\x00\x05\x01\x00\x03\x0a2130706433\xbb\xbb",
		"\x05\x01\x00\x05\x01\x00\x03\x0callowed.test\xaa\xaa",
		"\x05\x01\x00\x05\x02\x00\x01\x7f\x00\x00\x01\xbb\xbb",
		"\x05\x02\x01\x02",
		"\x05\x00",
		"",
	} {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		data = []byte(binSubst.Replace(subst.Replace(string(data))))
		g, err := srv.Gate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- g.Serve(ln) }()

		before := []int64{forbidden.Count(), forbidden6.Count()}
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			_ = c.SetWriteDeadline(time.Now().Add(3 * time.Second))
			_, _ = c.Write(data)
		}()
		// Read until the gate closes the connection or falls silent (a
		// kept-alive connection, an open tunnel).
		var out []byte
		buf := make([]byte, 4096)
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := c.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
		}
		_ = c.Close()
		<-wrote

		closed := make(chan error, 1)
		go func() { closed <- g.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Close hung")
		}
		select {
		case err := <-served:
			if err != nil {
				t.Fatalf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return after Close")
		}

		// Connections are accepted in order: once a sentinel dialled now
		// arrives, every earlier connection has been counted.
		for i, l := range []*counter{forbidden, forbidden6} {
			s, err := net.Dial("tcp", l.ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			local := s.LocalAddr().String()
			deadline := time.Now().Add(5 * time.Second)
			for {
				l.mu.Lock()
				seen := l.peers[local] > before[i] // not an earlier connection from the same port
				l.mu.Unlock()
				if seen || time.Now().After(deadline) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			s.Close()
			if n := l.Count() - before[i]; n != 1 {
				t.Fatalf("a forbidden listener (%s) saw %d connections besides the sentinel; input %q, output %q",
					l.ln.Addr(), n-1, data, out)
			}
		}
		if testing.Verbose() {
			t.Logf("input %q\noutput %q", data, clip(string(out), 300))
		}
		if msgs := plog.take(); len(msgs) > 0 {
			t.Fatalf("panics: %q; input %q", msgs, data)
		}
		recMu.Lock()
		got := recs
		recs = nil
		recMu.Unlock()
		for _, r := range got {
			if r.Decision == "allow" && r.Type == "egress" && r.Via != "route" && r.Addr != "" && r.Addr != "127.0.0.1" {
				t.Fatalf("dialled %s for %s:%d; input %q", r.Addr, r.Host, r.Port, data)
			}
			if r.Decision == "allow" && r.Type == "egress" && r.Port != ap {
				t.Fatalf("allowed %+v; input %q", r, data)
			}
			if s := r.Reason + r.Rule + r.Host; strings.Contains(s, "fuzz-secret-value") || strings.Contains(s, "route-secret-value") {
				t.Fatalf("a record holds a secret: %+v", r)
			}
		}
		if bytes.Contains(out, []byte("secret-value")) && !bytes.Contains(data, []byte("secret-value")) {
			// The allowed upstream does not echo headers; a secret in the
			// client's output came from the proxy.
			t.Fatalf("the client read a secret: %q; input %q", out, data)
		}
	})
}
