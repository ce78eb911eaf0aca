package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TLS interception, for secrets that opt in (Secret.InterceptTLS) and only
// in a gate given a CA (Config.CA, one per sandbox, which only that
// sandbox trusts). A CONNECT or SOCKS5 tunnel to a host name one of the
// sandbox's intercepting secrets is bound to is, once the policy allowed
// it like any other, not spliced to the upstream: the proxy answers the
// client's TLS handshake itself with a leaf of the sandbox's CA for that
// name, and serves HTTP/1.1 inside:
//
//   - the name the client asks for in the handshake (SNI) must be the
//     allowed host, and so must each request's Host (with the tunnel's
//     port, if it names one): anything else is refused (a failed
//     handshake; 421 Misdirected Request) and reported as a violation, so
//     a tunnel allowed for one name can never carry requests for another;
//   - the proxy adds the header of each intercepting secret bound to the
//     host to every request, and forwards it over real TLS, verified
//     against the daemon's roots (the host's, plus serve --egress-ca-file),
//     to the same host and port, dialled through the same address checks
//     as everything else;
//   - each secret use is audited, like on routes and plain HTTP.
//
// Every other tunnel stays end to end, untouched.

// errSNIMismatch fails a handshake whose SNI is not the allowed host.
var errSNIMismatch = errors.New("the name asked for inside the tunnel is not the host that was allowed")

// interceptSecrets returns the current intercepting secrets bound to host.
func (g *Gate) interceptSecrets(host string) []Secret {
	if g.cfg.CA == nil || host == "" {
		return nil
	}
	var out []Secret
	for _, s := range g.secrets() {
		if s.InterceptTLS && s.matches(host) {
			out = append(out, s)
		}
	}
	return out
}

// intercepts reports whether a tunnel to t is to be intercepted.
func (g *Gate) intercepts(t Target) bool {
	return t.IsName() && len(g.interceptSecrets(t.Host)) > 0
}

// newInterceptTransport carries intercepted requests to their upstreams:
// HTTP/1.1 over TLS verified against the server's roots, dialled through
// the gate's address checks.
func (g *Gate) newInterceptTransport() *http.Transport {
	return &http.Transport{
		DialContext:           g.dialChecked,
		TLSClientConfig:       &tls.Config{RootCAs: g.s.opts.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   g.s.opts.DialTimeout,
		MaxIdleConnsPerHost:   4,
		MaxIdleConns:          16,
		IdleConnTimeout:       60 * time.Second,
		DisableCompression:    true,
		ExpectContinueTimeout: time.Second,
		// HTTP/1.1 only, as inside the tunnel.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// prefixConn is a connection whose first bytes were read ahead into r.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Unwrap returns the client connection (for sandbox.PeerConn).
func (c *prefixConn) Unwrap() net.Conn { return c.Conn }

// intercept serves an allowed tunnel to req.target over client, after
// the proxy told the client the tunnel is open. It returns when the
// client's connection ends (or the gate closes).
func (g *Gate) intercept(client net.Conn, req request, d decision) {
	// Only a TLS handshake is intercepted: anything else in the tunnel
	// (ssh, plain HTTP: an allow rule without a port allows every port)
	// goes through end to end, as to any other host.
	_ = client.SetReadDeadline(time.Now().Add(g.s.opts.HandshakeTimeout))
	br := bufio.NewReader(client)
	first, err := br.Peek(1)
	_ = client.SetReadDeadline(time.Time{})
	if err != nil {
		_ = client.Close() // nothing came: nothing to carry
		return
	}
	client = bufferedConn(client, br)
	if first[0] != tlsRecordHandshake {
		g.passThrough(client, req, d)
		return
	}
	host := req.target.Host
	g.allowed(req, d, "")
	tc := tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
			sni := strings.ToLower(strings.TrimSuffix(hi.ServerName, "."))
			if sni != host {
				asked := "no name"
				if hi.ServerName != "" {
					asked = strconv.Quote(clip(hi.ServerName, 253))
				}
				g.deny(req, decision{by: "policy", rule: "intercept:sni",
					reason: fmt.Sprintf("the TLS client asked inside the tunnel to %s for %s, not the host that was allowed", req.target, asked)}, "")
				return nil, errSNIMismatch
			}
			return g.cfg.CA.leaf(host)
		},
	})
	ctx, cancel := context.WithTimeout(g.ctx, g.s.opts.HandshakeTimeout)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		_ = tc.Close() // the handshake failed: nothing to serve
		return
	}
	ln := &oneConnListener{c: tc, done: make(chan struct{})}
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serveIntercepted(w, r, req) }),
		ReadHeaderTimeout: g.s.opts.HandshakeTimeout,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return g.ctx },
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				ln.finish()
			}
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	_ = srv.Serve(ln) // returns once the one connection is over
}

// tlsRecordHandshake is the first byte of a TLS client's first record.
const tlsRecordHandshake = 0x16

// passThrough carries an allowed tunnel that is not TLS end to end, as an
// unintercepted one: dialled through the address checks, then spliced.
func (g *Gate) passThrough(client net.Conn, req request, d decision) {
	ctx, cancel := context.WithTimeout(g.ctx, g.s.opts.DialTimeout+5*time.Second)
	up, addr, err := g.dialTarget(ctx, req.target)
	cancel()
	if err != nil {
		var den *denied
		if errors.As(err, &den) {
			d.allow, d.by, d.rule, d.reason = false, "policy", den.rule, den.reason
			g.deny(req, d, den.addr)
		} else {
			g.s.metrics.decisions.WithLabelValues(req.via, "allow", d.by).Inc()
		}
		_ = client.Close() // the tunnel was answered already: closing says it failed
		return
	}
	g.allowed(req, d, addr.String())
	splice(g.ctx, client, up)
}

// serveIntercepted forwards one request from inside an intercepted tunnel.
func (g *Gate) serveIntercepted(w http.ResponseWriter, r *http.Request, req request) {
	if !g.enter() {
		g.refuse(w, http.StatusServiceUnavailable, "agentbox egress proxy: the sandbox's proxy is closed")
		return
	}
	defer g.wg.Done()
	t := req.target
	if !sameHost(r.Host, t) || r.URL.IsAbs() && !sameHost(r.URL.Host, t) {
		d := decision{by: "policy", rule: "intercept:host",
			reason: fmt.Sprintf("a request inside the tunnel to %s names the host %q", t, clip(r.Host, 253))}
		g.deny(req, d, "")
		g.refuse(w, http.StatusMisdirectedRequest, denyMessage(t, d.reason))
		return
	}
	if r.Method == http.MethodConnect {
		g.refuse(w, http.StatusMethodNotAllowed, "agentbox egress proxy: CONNECT inside a tunnel")
		return
	}
	target := &url.URL{Scheme: "https", Host: t.String(), Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	if t.Port == 443 {
		target.Host = t.Host
	}
	forward(w, r, target, g.interceptTransport, nil,
		func(h http.Header) []string {
			var used []string
			for _, s := range g.interceptSecrets(t.Host) {
				injectOne(h, s)
				used = append(used, s.Name)
			}
			return used
		},
		func(w http.ResponseWriter, err error) { g.dialFailed(w, req, decision{allow: true, by: "policy"}, err) },
		func(used []string, _ error) { g.secretsUsed(req, used) })
}

// sameHost reports whether hostport (a Host header or a URL's host) names
// t: its host name, and its port if it gives one.
func sameHost(hostport string, t Target) bool {
	name, port := hostport, ""
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		name, port = h, p
	}
	if port != "" && port != strconv.Itoa(int(t.Port)) {
		return false
	}
	return strings.ToLower(strings.TrimSuffix(name, ".")) == t.Host
}

// oneConnListener yields one connection, then blocks until it is over.
type oneConnListener struct {
	mu   sync.Mutex
	c    net.Conn
	done chan struct{}
	once sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) finish() { l.once.Do(func() { close(l.done) }) }

func (l *oneConnListener) Close() error { l.finish(); return nil }

func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// bufferedConn returns client with what rw read ahead of it first.
func bufferedConn(client net.Conn, br *bufio.Reader) net.Conn {
	if br == nil || br.Buffered() == 0 {
		return client
	}
	b, _ := br.Peek(br.Buffered())
	return &prefixConn{Conn: client, r: io.MultiReader(strings.NewReader(string(b)), client)}
}
