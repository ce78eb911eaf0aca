package sandboxtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
)

// Egress: §5 rows 21–27 for a sandbox whose network mode is "proxy": the
// runtime's Egress listener is served by a real egress gate, and every
// probe runs from inside. Allowed destinations answer through the proxy;
// refused ones get the proxy's refusal and never reach the host; direct
// egress is impossible as without the proxy.

// pyProxy holds probe helpers speaking to the proxy at 127.0.0.1:3128 by
// hand, so that exactly the bytes under test are sent.
const pyProxy = `
def _recv_all(s):
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            return data
        data += b

def status(data):
    parts = data.split(b" ", 2)
    return parts[1].decode() if len(parts) > 1 and parts[0].startswith(b"HTTP/") else "garbage"

def http(name, target):
    """A forward-proxy request for the absolute URI target."""
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
        s.sendall(("GET %s HTTP/1.1\r\nHost: spoofed.example\r\nConnection: close\r\n\r\n" % target).encode())
        R(name, status(_recv_all(s)))
        s.close()
    except OSError as e:
        R(name, E(e.errno) if e.errno else type(e).__name__)

def connect(name, authority):
    """A CONNECT tunnel; on 200, one request through it."""
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
        s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (authority, authority)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = s.recv(1)
            if not b:
                break
            head += b
        code = status(head)
        if code == "200":
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            code = "200/" + status(_recv_all(s))
        R(name, code)
        s.close()
    except OSError as e:
        R(name, E(e.errno) if e.errno else type(e).__name__)

def socks(name, atyp, addr, port):
    """A SOCKS5 CONNECT; reports the reply code, then one request."""
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
        s.sendall(b"\x05\x01\x00")
        if s.recv(2) != b"\x05\x00":
            R(name, "no-auth-refused")
            return
        if atyp == 3:
            addr = bytes([len(addr)]) + addr
        s.sendall(b"\x05\x01\x00" + bytes([atyp]) + addr + port.to_bytes(2, "big"))
        rep = s.recv(10)
        code = str(rep[1]) if len(rep) > 1 else "garbage"
        if code == "0":
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            code = "0/" + status(_recv_all(s))
        R(name, code)
        s.close()
    except OSError as e:
        R(name, E(e.errno) if e.errno else type(e).__name__)
`

// egressFixture is a case's gate and what it recorded.
type egressFixture struct {
	mu         sync.Mutex
	records    []egress.Record
	violations []sandbox.Violation
	asks       atomic.Int64
	gate       *egress.Gate
}

func (f *egressFixture) deny() []egress.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []egress.Record
	for _, r := range f.records {
		if r.Decision == "deny" {
			out = append(out, r)
		}
	}
	return out
}

func (f *egressFixture) allows() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.records {
		if r.Type == "egress" && r.Decision == "allow" {
			n++
		}
	}
	return n
}

// createWithProxy creates the case's sandbox with network mode proxy and
// serves its Egress listener with a gate over network (Mode is set here)
// and ask (nil: no asker).
func (h *harness) createWithProxy(network sandbox.Network, ask sandbox.Asker) *egressFixture {
	h.t.Helper()
	network.Mode = sandbox.NetworkProxy
	h.create(func(s *sandbox.Spec) { s.Network = network })
	es, ok := h.sb.(sandbox.EgressSandbox)
	if !ok || es.Egress() == nil {
		h.t.Fatalf("a %s sandbox in network mode proxy has no Egress listener", h.rt.Name())
	}
	f := &egressFixture{}
	srv, err := egress.New(egress.Options{Audit: func(r egress.Record) {
		f.mu.Lock()
		f.records = append(f.records, r)
		f.mu.Unlock()
	}})
	if err != nil {
		h.t.Fatal(err)
	}
	var asker sandbox.Asker
	if ask != nil {
		asker = func(ctx context.Context, r sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
			f.asks.Add(1)
			return ask(ctx, r)
		}
	}
	f.gate, err = srv.Gate(egress.Config{
		Scope: "test", ID: h.c.name, Network: network, Ask: asker, AskTimeout: 10 * time.Second,
		OnViolation: func(v sandbox.Violation) {
			f.mu.Lock()
			f.violations = append(f.violations, v)
			f.mu.Unlock()
		},
	})
	if err != nil {
		h.t.Fatal(err)
	}
	go func() { _ = f.gate.Serve(es.Egress()) }()
	h.t.Cleanup(func() { _ = f.gate.Close() })
	return f
}

// httpServer is a host HTTP server counting its requests.
func httpServer(h *harness, hits *counter) int {
	h.t.Helper()
	ln, err := new(net.ListenConfig).Listen(h.t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.add()
		_, _ = w.Write([]byte("hello from the host\n"))
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	h.t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func egressCases() []tcase {
	return []tcase{
		{
			name: "22_proxy_allowed",
			want: map[string]string{"http": "200", "connect": "200/200", "socks4": "0/200", "socks_name": "0/200"},
			run: func(h *harness) {
				hits := &counter{}
				port := httpServer(h, hits)
				allow := "127.0.0.1:" + strconv.Itoa(port)
				f := h.createWithProxy(sandbox.Network{Allow: []string{allow}}, nil)
				r := h.python(pyProxy + fmt.Sprintf(`
http("http", "http://127.0.0.1:%[1]d/")
connect("connect", "127.0.0.1:%[1]d")
socks("socks4", 1, bytes([127, 0, 0, 1]), %[1]d)
socks("socks_name", 3, b"127.0.0.1", %[1]d)
`, port))
				h.expectExit(r, 0)
				h.expect(r)
				if n := hits.get(); n != 4 {
					h.t.Errorf("the host server answered %d requests, want 4", n)
				}
				if n := f.allows(); n != 4 {
					h.t.Errorf("%d allow records, want one per connection (4): %+v", n, f.records)
				}
			},
		},
		{
			name: "23_proxy_denied",
			want: map[string]string{
				"other_port": "403", "metadata": "403", "metadata_name": "403", "loopback6": "403", "mapped": "403",
				"decimal": "403", "octal": "403", "hex": "403", "short": "403", "rfc1918": "403",
				"connect": "403", "socks4": "2", "socks6": "2", "socks_mapped": "2", "https_uri": "400",
			},
			run: func(h *harness) {
				allowed, refused := &counter{}, &counter{}
				a := httpServer(h, allowed)
				b := httpServer(h, refused)
				f := h.createWithProxy(sandbox.Network{Allow: []string{"127.0.0.1:" + strconv.Itoa(a)}}, nil)
				r := h.python(pyProxy + fmt.Sprintf(`
http("other_port", "http://127.0.0.1:%[1]d/")
http("metadata", "http://169.254.169.254/latest/meta-data/")
http("metadata_name", "http://metadata.google.internal/computeMetadata/v1/")
http("loopback6", "http://[::1]:%[1]d/")
http("mapped", "http://[::ffff:127.0.0.1]:%[1]d/")
http("decimal", "http://2130706433:%[1]d/")
http("octal", "http://0177.0.0.1:%[1]d/")
http("hex", "http://0x7f000001:%[1]d/")
http("short", "http://127.1:%[1]d/")
http("rfc1918", "http://10.0.0.1/")
http("https_uri", "https://127.0.0.1:%[1]d/")
connect("connect", "127.0.0.1:%[1]d")
socks("socks4", 1, bytes([127, 0, 0, 1]), %[1]d)
socks("socks6", 4, socket.inet_pton(socket.AF_INET6, "::1"), %[1]d)
socks("socks_mapped", 4, socket.inet_pton(socket.AF_INET6, "::ffff:127.0.0.1"), %[1]d)
`, b))
				h.expectExit(r, 0)
				h.expect(r)
				if n := refused.get() + allowed.get(); n != 0 {
					h.t.Errorf("host servers were reached %d times", n)
				}
				// Every refusal but the malformed https URI is a violation
				// with a deny record.
				if n := len(f.deny()); n != 14 {
					h.t.Errorf("%d deny records, want 14: %+v", n, f.deny())
				}
				f.mu.Lock()
				defer f.mu.Unlock()
				if len(f.violations) != 14 {
					h.t.Errorf("%d violations, want 14", len(f.violations))
				}
				for _, v := range f.violations {
					if v.Kind != sandbox.ViolationNetwork || v.Host == "" || v.Port == 0 || v.Rule == "" || v.Detail == "" {
						h.t.Errorf("violation %+v lacks its destination, rule or reason", v)
					}
				}
			},
		},
		{
			// An allowed name that resolves to an internal address: the
			// proxy checks the address it is about to dial, not the name.
			name: "24_proxy_rebinding",
			want: map[string]string{"name_to_loopback": "403", "socks_name_to_loopback": "2"},
			run: func(h *harness) {
				hits := &counter{}
				port := httpServer(h, hits)
				f := h.createWithProxy(sandbox.Network{Allow: []string{"localhost:" + strconv.Itoa(port)}}, nil)
				r := h.python(pyProxy + fmt.Sprintf(`
http("name_to_loopback", "http://localhost:%[1]d/")
socks("socks_name_to_loopback", 3, b"localhost", %[1]d)
`, port))
				h.expectExit(r, 0)
				h.expect(r)
				if hits.get() != 0 {
					h.t.Errorf("the host server was reached through an allowed name")
				}
				for _, d := range f.deny() {
					if d.Host != "localhost" || d.Rule != "always-deny:loopback" || d.Addr == "" {
						h.t.Errorf("deny record %+v, want localhost refused for its loopback address", d)
					}
				}
			},
		},
		{
			// One approval, one connection: the second asks again.
			name: "25_proxy_ask_once",
			want: map[string]string{"first": "200", "second": "403", "third": "200"},
			run: func(h *harness) {
				hits := &counter{}
				port := httpServer(h, hits)
				var n atomic.Int64
				f := h.createWithProxy(sandbox.Network{
					Default: egress.DefaultAsk,
					// The name is settled by nobody; the address it
					// resolves to is the operator's to open.
					Allow: []string{"127.0.0.1:" + strconv.Itoa(port)},
				}, func(ctx context.Context, r sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
					return sandbox.NetworkAnswer{Allow: n.Add(1) != 2, By: "user"}, nil
				})
				r := h.python(pyProxy + fmt.Sprintf(`
http("first", "http://localhost:%[1]d/")
http("second", "http://localhost:%[1]d/")
http("third", "http://localhost:%[1]d/")
`, port))
				h.expectExit(r, 0)
				h.expect(r)
				if got := f.asks.Load(); got != 3 {
					h.t.Errorf("%d asks, want one per connection (3)", got)
				}
				if hits.get() != 2 {
					h.t.Errorf("the host server saw %d requests, want the 2 approved", hits.get())
				}
			},
		},
		{
			// With the proxy, direct egress is as impossible as without it.
			name: "21p_direct_egress_with_proxy",
			want: map[string]string{
				"host_loopback": "ECONNREFUSED", "host_ip": "ENETUNREACH", "metadata": "ENETUNREACH", "public": "ENETUNREACH",
				"udp_public": "ENETUNREACH", "resolve": "gaierror", "raw_icmp": "EPERM", "mptcp": "EPERM",
			},
			run: func(h *harness) {
				hits := &counter{}
				port, ok := listenTCP(h.t, "127.0.0.1:0", hits)
				if !ok {
					h.t.Fatal("cannot listen on 127.0.0.1")
				}
				hostIP := hostAddress()
				if hostIP == "" {
					hostIP = "192.0.2.1"
				}
				h.createWithProxy(sandbox.Network{Allow: []string{"*"}}, nil)
				r := h.python(pyConnect + fmt.Sprintf(`
connect("host_loopback", "127.0.0.1", %d)
connect("host_ip", %q, 80)
connect("metadata", "169.254.169.254", 80)
connect("public", "1.1.1.1", 443)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("8.8.8.8", 53))
        s.send(b"x")
    finally:
        s.close()
op("udp_public", udp)
op("resolve", socket.getaddrinfo, "example.com", 443)
op("raw_icmp", socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
op("mptcp", socket.socket, socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
`, port, hostIP))
				h.expectExit(r, 0)
				h.expect(r)
				if hits.get() != 0 {
					h.t.Errorf("the host listener was reached directly")
				}
			},
		},
	}
}
