package egress

import (
	"bufio"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metric "github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// mapResolver is a test double for DNS: names (without the trailing dot
// the gate adds) map to addresses; every query is remembered.
type mapResolver struct {
	mu      sync.Mutex
	m       map[string][]netip.Addr
	queries []string
}

func newResolver(m map[string]string) *mapResolver {
	r := &mapResolver{m: map[string][]netip.Addr{}}
	for name, addrs := range m {
		for _, a := range strings.Split(addrs, ",") {
			r.m[name] = append(r.m[name], netip.MustParseAddr(a))
		}
	}
	return r
}

func (r *mapResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queries = append(r.queries, host)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if network != "ip" {
		return nil, fmt.Errorf("mapResolver: network %q", network)
	}
	if addrs, ok := r.m[strings.TrimSuffix(strings.ToLower(host), ".")]; ok {
		return addrs, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// Queried reports whether name was looked up.
func (r *mapResolver) Queried(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.queries {
		if strings.TrimSuffix(q, ".") == name {
			return true
		}
	}
	return false
}

// testResolverMap is the DNS of most tests.
var testResolverMap = map[string]string{
	"rebind.test":  "127.0.0.1",
	"rebind6.test": "::1",
	"meta.test":    "169.254.169.254",
	"meta6.test":   "fd00:ec2::254",
	"public.test":  "93.184.216.34",
	"mixed.test":   "169.254.169.254,127.0.0.1",
	"api.test":     "127.0.0.1",
	"other.test":   "127.0.0.1",
	"ask.test":     "127.0.0.1",
	"echo.test":    "127.0.0.1",
	"private.test": "10.1.2.3",
}

// counter is a TCP listener on loopback that counts the connections it
// accepts, and serves each with handle (nil: close at once).
type counter struct {
	ln net.Listener
	n  atomic.Int64
	mu sync.Mutex
	// peers maps remote addresses to the count at their latest accept.
	peers map[string]int64
}

func newCounter(t testing.TB, network, addr string, handle func(net.Conn)) *counter {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &counter{ln: ln, peers: map[string]int64{}}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			c.peers[conn.RemoteAddr().String()] = c.n.Add(1)
			c.mu.Unlock()
			if handle == nil {
				_ = conn.Close()
				continue
			}
			go handle(conn)
		}
	}()
	return c
}

func (c *counter) Port() int { return c.ln.Addr().(*net.TCPAddr).Port }

func (c *counter) Count() int64 { return c.n.Load() }

// echo copies a connection back to itself, then half-closes it.
func echo(c net.Conn) {
	defer c.Close()
	_, _ = io.Copy(c, c)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// httpCounter is a plain-HTTP server on loopback counting connections and
// remembering the requests it saw.
type httpCounter struct {
	*httptest.Server
	conns atomic.Int64
	mu    sync.Mutex
	reqs  []*http.Request
}

func newHTTPCounter(t testing.TB, network, addr string, h http.HandlerFunc) *httpCounter {
	t.Helper()
	hc := &httpCounter{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, "hello from %s", r.Host)
		}
	}
	hc.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hc.mu.Lock()
		hc.reqs = append(hc.reqs, r.Clone(context.Background()))
		hc.mu.Unlock()
		h(w, r)
	}))
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	hc.Listener = ln
	hc.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			hc.conns.Add(1)
		}
	}
	hc.Start()
	t.Cleanup(hc.Close)
	return hc
}

func (hc *httpCounter) Port() int { return hc.Listener.Addr().(*net.TCPAddr).Port }

func (hc *httpCounter) Requests() []*http.Request {
	hc.mu.Lock()
	defer hc.mu.Unlock()
	return append([]*http.Request(nil), hc.reqs...)
}

// recorder collects audit records and violations.
type recorder struct {
	mu   sync.Mutex
	recs []Record
	viol []sandbox.Violation
}

func (r *recorder) audit(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
}

func (r *recorder) violation(v sandbox.Violation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.viol = append(r.viol, v)
}

func (r *recorder) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Record(nil), r.recs...)
}

func (r *recorder) Violations() []sandbox.Violation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sandbox.Violation(nil), r.viol...)
}

// find returns the records matching f.
func (r *recorder) find(f func(Record) bool) []Record {
	var out []Record
	for _, rec := range r.Records() {
		if f(rec) {
			out = append(out, rec)
		}
	}
	return out
}

// waitRecords waits until f matches n records (records of a request are
// written after its response).
func (r *recorder) waitRecords(t testing.TB, n int, f func(Record) bool) []Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := r.find(f)
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) < n {
				t.Fatalf("got %d matching records, want %d; all: %+v", len(got), n, r.Records())
			}
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// harness is one Server and one Gate serving a loopback listener.
type harness struct {
	srv  *Server
	gate *Gate
	addr string // the gate's listener
	rec  *recorder
	res  *mapResolver
	reg  *metric.Registry
}

type harnessOpts struct {
	opts Options
	cfg  Config
}

func newHarness(t testing.TB, ho harnessOpts) *harness {
	t.Helper()
	h := &harness{rec: &recorder{}, reg: metric.NewRegistry()}
	opts := ho.opts
	if opts.Resolver == nil {
		h.res = newResolver(testResolverMap)
		opts.Resolver = h.res
	}
	if opts.Audit == nil {
		opts.Audit = h.rec.audit
	}
	if opts.Registerer == nil {
		opts.Registerer = h.reg
	}
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 2 * time.Second
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = srv
	cfg := ho.cfg
	if cfg.Network.Mode == "" {
		cfg.Network.Mode = sandbox.NetworkProxy
	}
	if cfg.Network.MaxConnectionRate == 0 {
		// The tests open connections back to back, faster than the
		// default rate bound; limit_test.go tests the bounds.
		cfg.Network.MaxConnectionRate = 1 << 20
	}
	if cfg.Scope == "" {
		cfg.Scope, cfg.ID = "session", "ses_1"
	}
	if cfg.OnViolation == nil {
		cfg.OnViolation = h.rec.violation
	}
	g, err := srv.Gate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.gate = g
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	served := make(chan error, 1)
	go func() { served <- g.Serve(ln) }()
	t.Cleanup(func() {
		closed := make(chan error, 1)
		go func() { closed <- g.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				t.Errorf("Close: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Close did not return")
			return
		}
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Serve did not return after Close")
		}
		srv.Close()
	})
	return h
}

// dial opens a client connection to the gate, as a sandboxed process does.
func (h *harness) dial(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// raw sends one raw HTTP request on a new connection and reads the
// response (its body read in full).
func (h *harness) raw(t testing.TB, req string) (*http.Response, string) {
	t.Helper()
	c := h.dial(t)
	defer c.Close()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", req, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body of the response to %q: %v", req, err)
	}
	return resp, string(body)
}

// get sends "GET <uri>" as a forward-proxy request.
func (h *harness) get(t testing.TB, uri string) (*http.Response, string) {
	t.Helper()
	return h.raw(t, "GET "+uri+" HTTP/1.1\r\nHost: ignored.test\r\nConnection: close\r\n\r\n")
}

// connect sends a CONNECT and returns the connection and the response;
// after a 200 the connection is the tunnel.
func (h *harness) connect(t testing.TB, authority string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c := h.dial(t)
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	return c, br, resp
}

// client is an http.Client that uses the gate as its HTTP proxy.
func (h *harness) client(keepAlive bool) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: h.addr}),
		DisableKeepAlives: !keepAlive,
	}}
}

// metrics renders the Server's metrics as the exposition format.
func (h *harness) metrics(t testing.TB) string {
	t.Helper()
	rr := httptest.NewRecorder()
	h.reg.ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
	return rr.Body.String()
}

// socksHello does the greeting (no authentication) on c.
func socksHello(t testing.TB, c net.Conn) {
	t.Helper()
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		t.Fatal(err)
	}
	var b [2]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b != [2]byte{5, 0} {
		t.Fatalf("SOCKS greeting reply %v, %v", b, err)
	}
}

// socksRequest builds a SOCKS5 request for cmd.
func socksRequest(cmd byte, host string, port int) []byte {
	b := []byte{5, cmd, 0}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		b = append(b, atypIPv4)
		b = append(b, a.AsSlice()...)
	} else if err == nil {
		b = append(b, atypIPv6)
		b = append(b, a.AsSlice()...)
	} else {
		b = append(b, atypDomain, byte(len(host)))
		b = append(b, host...)
	}
	return append(b, byte(port>>8), byte(port))
}

// socksDomainRequest builds a SOCKS5 request for cmd with ATYP domain.
func socksDomainRequest(cmd byte, host string, port int) []byte {
	b := append([]byte{5, cmd, 0, atypDomain, byte(len(host))}, host...)
	return append(b, byte(port>>8), byte(port))
}

// socks does a whole SOCKS5 request and returns the reply code.
func (h *harness) socks(t testing.TB, cmd byte, host string, port int) (net.Conn, byte) {
	t.Helper()
	return h.socksReq(t, socksRequest(cmd, host, port))
}

// socksReq does the greeting, sends req and returns the reply code.
func (h *harness) socksReq(t testing.TB, req []byte) (net.Conn, byte) {
	t.Helper()
	c := h.dial(t)
	socksHello(t, c)
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var rep [10]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		t.Fatalf("SOCKS reply: %v", err)
	}
	if rep[0] != 5 || rep[2] != 0 || rep[3] != atypIPv4 {
		t.Fatalf("SOCKS reply %v", rep)
	}
	return c, rep[1]
}

// roundTrip writes msg on a tunnel, half-closes it and reads everything
// back.
func roundTrip(t testing.TB, c net.Conn, r io.Reader, msg string) string {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading the tunnel: %v", err)
	}
	return string(b)
}

// rootsOf trusts the TLS test server ts.
func rootsOf(ts *httptest.Server) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ts.Certificate())
	return p
}
