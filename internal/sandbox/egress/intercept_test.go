package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// tlsUpstream is an HTTPS server (httptest's certificate: example.com,
// 127.0.0.1) that records what reached it.
type tlsUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	host, sni, auth, key, echo string
}

func newTLSUpstream(t *testing.T) *tlsUpstream {
	u := &tlsUpstream{}
	u.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{host: r.Host, sni: r.TLS.ServerName, auth: r.Header.Get("Authorization"),
			key: r.Header.Get("X-Key"), echo: r.Header.Get("X-Echo")})
		u.mu.Unlock()
		fmt.Fprint(w, "upstream says hi")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *tlsUpstream) Seen() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

func (u *tlsUpstream) Port() int { return u.Listener.Addr().(*net.TCPAddr).Port }

func poolOf(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// interceptHarness is a gate with a CA, a secret for example.com that
// intercepts, and one for other.test that does not.
func interceptHarness(t *testing.T, withCA bool) (*harness, *tlsUpstream, *CA) {
	up := newTLSUpstream(t)
	store := NewSecrets()
	for _, s := range []Secret{
		{Name: "gh", Value: "s3cret-token", Host: "example.com", Header: "Authorization", Format: "Bearer {value}", InterceptTLS: true},
		{Name: "plain", Value: "plain-token", Host: "other.test", Header: "X-Key"},
	} {
		if err := store.Put(s, "test"); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := NewCA("test sandbox", []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Network: sandbox.Network{
		Allow:   []string{"example.com", "other.test", fmt.Sprintf("127.0.0.1:%d", up.Port())},
		Secrets: map[string]string{"GH_TOKEN": "gh", "PLAIN": "plain"},
	}}
	if withCA {
		cfg.CA = ca
	}
	res := newResolver(map[string]string{"example.com": "127.0.0.1", "other.test": "127.0.0.1"})
	h := newHarness(t, harnessOpts{opts: Options{Secrets: store, RootCAs: rootsOf(up.Server), Resolver: res}, cfg: cfg})
	return h, up, ca
}

// tlsClient is a sandboxed client: it trusts roots, goes through proxy.
func tlsClient(proxy string, roots *x509.CertPool) *http.Client {
	pu, _ := url.Parse(proxy)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: roots},
	}}
}

// TestInterceptTLS: a tunnel to the host of a secret that opts in is
// terminated with the sandbox CA's certificate for that name, the secret
// is added to each request inside, and the upstream is reached over
// verified TLS under the same name; over CONNECT and SOCKS5 alike.
func TestInterceptTLS(t *testing.T) {
	h, up, ca := interceptHarness(t, true)
	target := fmt.Sprintf("https://example.com:%d/repo.git/info/refs?service=git-upload-pack", up.Port())
	for _, proxy := range []string{"http://" + h.addr, "socks5h://" + h.addr} {
		t.Run(strings.SplitN(proxy, ":", 2)[0], func(t *testing.T) {
			before := len(up.Seen())
			var issuer string
			c := tlsClient(proxy, poolOf(ca.Certificate()))
			c.Transport.(*http.Transport).TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
				issuer = cs.PeerCertificates[0].Issuer.CommonName
				return nil
			}
			tunnels := 0
			c.Transport.(*http.Transport).OnProxyConnectResponse = func(context.Context, *url.URL, *http.Request, *http.Response) error {
				tunnels++
				return nil
			}
			for range 2 { // keep-alive inside the tunnel: each request gets it
				req, err := http.NewRequest(http.MethodGet, target, nil)
				if err != nil {
					t.Fatal(err)
				}
				// A placeholder in a header an upstream might echo back
				// stays a placeholder: only the secret's own header
				// gets the value.
				req.Header.Set("X-Echo", Placeholder("gh"))
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(b) != "upstream says hi" {
					t.Fatalf("status %d, body %q", resp.StatusCode, b)
				}
			}
			if issuer != "test sandbox" {
				t.Errorf("the client saw a certificate issued by %q, want the sandbox CA", issuer)
			}
			if strings.HasPrefix(proxy, "http:") && tunnels != 1 {
				t.Errorf("%d tunnels for two requests, want one kept alive", tunnels)
			}
			seen := up.Seen()[before:]
			if len(seen) != 2 {
				t.Fatalf("upstream saw %d requests, want 2", len(seen))
			}
			for _, s := range seen {
				if s.auth != "Bearer s3cret-token" || s.sni != "example.com" || s.host != fmt.Sprintf("example.com:%d", up.Port()) {
					t.Errorf("upstream saw %+v, want the secret added, SNI example.com", s)
				}
				if s.echo != Placeholder("gh") {
					t.Errorf("upstream saw X-Echo %q, want the placeholder left as it is", s.echo)
				}
			}
		})
	}
	if recs := h.rec.waitRecords(t, 4, func(r Record) bool { return r.Type == "secret" && r.Secret == "gh" }); recs[0].Host != "example.com" {
		t.Errorf("secret records %+v", recs)
	}
	for _, r := range h.rec.Records() {
		if strings.Contains(fmt.Sprint(r), "s3cret-token") {
			t.Errorf("an audit record holds the secret: %+v", r)
		}
	}
}

// TestInterceptOnlyTLS: a tunnel to an intercepting secret's host that
// does not start with a TLS handshake (ssh, plain HTTP on another port:
// an allow rule without a port allows every port) goes through end to
// end, untouched and without the secret.
func TestInterceptOnlyTLS(t *testing.T) {
	var got http.Header
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		fmt.Fprint(w, "plain upstream")
	}))
	t.Cleanup(plain.Close)
	pport := plain.Listener.Addr().(*net.TCPAddr).Port
	store := NewSecrets()
	if err := store.Put(Secret{Name: "gh", Value: "s3cret-token", Host: "example.com", Header: "Authorization", Format: "Bearer {value}", InterceptTLS: true}, "test"); err != nil {
		t.Fatal(err)
	}
	ca, err := NewCA("test sandbox", []string{"example.com"})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{
		opts: Options{Secrets: store, Resolver: newResolver(map[string]string{"example.com": "127.0.0.1"})},
		cfg: Config{CA: ca, Network: sandbox.Network{
			Allow:   []string{"example.com", fmt.Sprintf("127.0.0.1:%d", pport)},
			Secrets: map[string]string{"GH_TOKEN": "gh"},
		}},
	})
	c, br, resp := h.connect(t, fmt.Sprintf("example.com:%d", pport))
	defer c.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: example.com\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", Placeholder("gh")); err != nil {
		t.Fatal(err)
	}
	presp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(presp.Body)
	presp.Body.Close()
	if string(b) != "plain upstream" {
		t.Fatalf("through the tunnel: %d %q, want the plain upstream's answer", presp.StatusCode, b)
	}
	if a := got.Get("Authorization"); a != "Bearer "+Placeholder("gh") {
		t.Errorf("the plain upstream saw Authorization %q, want the placeholder as sent", a)
	}
}

// connectTLS opens a CONNECT tunnel to authority and starts TLS in it.
func connectTLS(t *testing.T, h *harness, authority, sni string, roots *x509.CertPool) (*tls.Conn, error) {
	c, br, resp := h.connect(t, authority)
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s: %d", authority, resp.StatusCode)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the CONNECT answer")
	}
	// No name at all: a client that sends no SNI (and so checks none).
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: roots, InsecureSkipVerify: sni == ""}) //nolint:gosec // the test of a client without SNI
	return tc, tc.Handshake()
}

// TestInterceptRefusesOtherNames: inside an intercepted tunnel, a TLS
// client asking for another name (SNI), or a request for another Host,
// is refused and reported, and reaches nothing.
func TestInterceptRefusesOtherNames(t *testing.T) {
	h, up, ca := interceptHarness(t, true)
	authority := fmt.Sprintf("example.com:%d", up.Port())
	for _, sni := range []string{"other.test", ""} {
		if _, err := connectTLS(t, h, authority, sni, poolOf(ca.Certificate())); err == nil {
			t.Errorf("a handshake asking for %q in a tunnel to example.com succeeded", sni)
		}
	}
	tc, err := connectTLS(t, h, authority, "example.com", poolOf(ca.Certificate()))
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{fmt.Sprintf("other.test:%d", up.Port()), "example.com:1", "example.com.evil.test"} {
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMisdirectedRequest {
			t.Errorf("Host %s inside the tunnel: %d, want 421", host, resp.StatusCode)
		}
		if resp.Close || resp.Header.Get("Connection") == "close" {
			tc.Close()
			if tc, err = connectTLS(t, h, authority, "example.com", poolOf(ca.Certificate())); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = tc.Close()
	if n := len(up.Seen()); n != 0 {
		t.Errorf("upstream saw %d requests", n)
	}
	rules := map[string]int{}
	for _, v := range h.rec.Violations() {
		rules[v.Rule]++
	}
	if rules["intercept:sni"] != 2 || rules["intercept:host"] != 3 {
		t.Errorf("violations by rule %v, want 2 intercept:sni and 3 intercept:host", rules)
	}
}

// TestInterceptOnlyOptedIn: a secret that does not opt in, and any tunnel
// of a gate without a CA, stay end to end: the client sees the upstream's
// own certificate, and no secret is added.
func TestInterceptOnlyOptedIn(t *testing.T) {
	h, up, _ := interceptHarness(t, true)
	// other.test's secret does not intercept: the upstream's own
	// certificate (for example.com) comes through the tunnel.
	tc, err := connectTLS(t, h, fmt.Sprintf("other.test:%d", up.Port()), "example.com", rootsOf(up.Server))
	if err != nil {
		t.Fatalf("an end-to-end tunnel: %v", err)
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: other.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := up.Seen(); len(s) != 1 || s[0].key != "" || s[0].auth != "" {
		t.Errorf("upstream saw %+v, want one request without a secret", s)
	}

	// Without a CA nothing is intercepted, opted in or not.
	h2, up2, _ := interceptHarness(t, false)
	tc, err = connectTLS(t, h2, fmt.Sprintf("example.com:%d", up2.Port()), "example.com", rootsOf(up2.Server))
	if err != nil {
		t.Fatalf("a tunnel of a gate without a CA: %v", err)
	}
	_ = tc.Close()
}

// TestCANameConstraints: the CA vouches for the hosts it was made for
// only, even with its own key.
func TestCANameConstraints(t *testing.T) {
	ca, err := NewCA("c", []string{"example.com", "*.corp.test"})
	if err != nil {
		t.Fatal(err)
	}
	for host, ok := range map[string]bool{"example.com": true, "api.example.com": true, "x.corp.test": true, "corp.test": false, "evil.test": false} {
		leaf, err := ca.leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: poolOf(ca.Certificate())})
		if (err == nil) != ok {
			t.Errorf("a leaf for %s: verify error %v, want ok=%v", host, err, ok)
		}
	}
	if b := ca.Bundle([]byte("ROOTS")); !strings.HasPrefix(string(b), "ROOTS\n") || strings.Contains(string(b), "PRIVATE") {
		t.Errorf("bundle %q", b)
	}
}
