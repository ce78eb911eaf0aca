package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

func port(p int) string { return strconv.Itoa(p) }

func TestGateForwardAllowed(t *testing.T) {
	up := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"127.0.0.1:" + port(up.Port())},
	}}})

	resp, body := h.get(t, "http://127.0.0.1:"+port(up.Port())+"/hello?x=1")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "hello from 127.0.0.1:") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	reqs := up.Requests()
	if len(reqs) != 1 || reqs[0].URL.Path != "/hello" || reqs[0].URL.RawQuery != "x=1" {
		t.Fatalf("upstream saw %v", reqs)
	}
	if reqs[0].Header.Get("Proxy-Connection") != "" || reqs[0].Header.Get("X-Forwarded-For") != "" {
		t.Errorf("upstream saw proxy headers: %v", reqs[0].Header)
	}
	recs := h.rec.waitRecords(t, 1, func(r Record) bool { return r.Type == "egress" })
	want := Record{Scope: "session", ID: "ses_1", Type: "egress", Decision: "allow", By: "policy", Via: "http",
		Host: "127.0.0.1", Port: up.Port(), Addr: "127.0.0.1", Rule: "allow:127.0.0.1:" + port(up.Port()), Outcome: OutcomeCompleted}
	got := recs[0]
	if got.Time.IsZero() || time.Since(got.Time) > time.Minute {
		t.Errorf("record time %v", got.Time)
	}
	got.Time = time.Time{}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("record\n got %+v\nwant %+v", got, want)
	}
	if v := h.rec.Violations(); len(v) != 0 {
		t.Errorf("violations %+v", v)
	}

	// A Go client with the gate as HTTP_PROXY, keeping connections alive.
	c := h.client(true)
	for i := range 3 {
		resp, err := c.Get("http://127.0.0.1:" + port(up.Port()) + "/n" + strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if n := up.conns.Load(); n >= 4 {
		t.Errorf("upstream saw %d connections for 4 requests: the pool kept none", n)
	}
	// A response can be read before its handler has counted it.
	h.rec.waitRecords(t, 4, func(r Record) bool { return r.Type == "egress" && r.Decision == "allow" })
	m := h.metrics(t)
	if !strings.Contains(m, `agentbox_egress_decisions_total{by="policy",decision="allow",via="http"} 4`) {
		t.Errorf("metrics:\n%s", m)
	}
}

func TestGateForwardDenied(t *testing.T) {
	up := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"127.0.0.1:" + port(up.Port())},
	}}})

	resp, body := h.get(t, "http://public.test/x")
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if !strings.Contains(body, "public.test:80 is not in the sandbox's network allow list") {
		t.Errorf("body %q does not give the reason", body)
	}
	if d := resp.Header.Get("X-Agentbox-Denied"); d == "" || !strings.Contains(body, d) {
		t.Errorf("X-Agentbox-Denied %q, body %q", d, body)
	}
	if h.res.Queried("public.test") {
		t.Error("a denied name was looked up")
	}
	v := h.rec.Violations()
	if len(v) != 1 {
		t.Fatalf("violations %+v", v)
	}
	wantV := sandbox.Violation{Kind: sandbox.ViolationNetwork, Detail: "public.test:80 is not in the sandbox's network allow list",
		Target: "public.test:80", Host: "public.test", Port: 80, Rule: "default:deny", Action: "blocked"}
	if fmt.Sprintf("%+v", v[0]) != fmt.Sprintf("%+v", wantV) {
		t.Errorf("violation\n got %+v\nwant %+v", v[0], wantV)
	}
	recs := h.rec.find(func(r Record) bool { return r.Type == "egress" })
	if len(recs) != 1 || recs[0].Decision != "deny" || recs[0].By != "policy" || recs[0].Via != "http" ||
		recs[0].Host != "public.test" || recs[0].Port != 80 || recs[0].Rule != "default:deny" || recs[0].Reason == "" {
		t.Errorf("records %+v", recs)
	}

	// Not a forward-proxy request at all.
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: 127.0.0.1:" + port(up.Port()) + "\r\n\r\n",
		"GET https://127.0.0.1:" + port(up.Port()) + "/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET ftp://127.0.0.1:" + port(up.Port()) + "/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http:///x HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		resp, body := h.raw(t, req)
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Agentbox-Denied") == "" {
			t.Errorf("%q: %d %q", req, resp.StatusCode, body)
		}
	}
	if n := up.conns.Load(); n != 0 {
		t.Errorf("upstream saw %d connections", n)
	}
}

// TestGateInternalAlwaysDenied: loopback, in every spelling, and metadata
// addresses are refused, whether named as literals or reached through an
// allowed name that resolves to them; the target never sees a connection.
func TestGateInternalAlwaysDenied(t *testing.T) {
	allowed := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	target := newCounter(t, "tcp", "127.0.0.1:0", nil)
	target6 := newCounter(t, "tcp", "[::1]:0", nil)
	p, p6 := port(target.Port()), port(target6.Port())
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"127.0.0.1:" + port(allowed.Port()), "rebind.test", "rebind6.test", "meta.test", "meta6.test",
			"mixed.test", "private.test", "metadata.google.internal", "0.0.0.0/0", "::/0", "169.254.169.254"},
	}}})

	tests := []struct {
		host string // as the client writes it, with the port
		rule string
	}{
		{"127.0.0.1:" + p, "always-deny:loopback"},
		{"2130706433:" + p, "always-deny:loopback"},
		{"0x7f000001:" + p, "always-deny:loopback"},
		{"0177.0.0.1:" + p, "always-deny:loopback"},
		{"127.1:" + p, "always-deny:loopback"},
		{"127.0.1:" + p, "always-deny:loopback"},
		{"0x7f.0.0.1:" + p, "always-deny:loopback"},
		{"127.0.0.1.:" + p, "always-deny:loopback"},
		{"[::ffff:127.0.0.1]:" + p, "always-deny:loopback"},
		{"[::ffff:7f00:1]:" + p, "always-deny:loopback"},
		{"[::1]:" + p6, "always-deny:loopback"},
		{"[0:0:0:0:0:0:0:1]:" + p6, "always-deny:loopback"},
		{"0.0.0.0:" + p, "always-deny:this-network"},
		{"0:" + p, "always-deny:this-network"},
		{"[::]:" + p6, "always-deny:IPv4-compatible-or-unspecified"},
		{"rebind.test:" + p, "always-deny:loopback"},
		{"REBIND.test.:" + p, "always-deny:loopback"},
		{"rebind6.test:" + p6, "always-deny:loopback"},
		{"169.254.169.254:80", "always-deny:metadata"},
		{"0xa9fea9fe:80", "always-deny:metadata"},
		{"[::ffff:169.254.169.254]:80", "always-deny:metadata"},
		{"[fd00:ec2::254]:80", "always-deny:metadata"},
		{"meta.test:80", "always-deny:metadata"},
		{"meta6.test:80", "always-deny:metadata"},
		{"metadata.google.internal:80", "always-deny:metadata"},
		{"mixed.test:" + p, "always-deny:metadata"},
		{"private.test:80", "always-deny:private"},
		{"10.1.2.3:80", "always-deny:private"},
	}
	for _, tt := range tests {
		for _, via := range []string{"http", "connect", "socks5"} {
			name := via + " " + tt.host
			before := len(h.rec.Violations())
			switch via {
			case "http":
				resp, body := h.get(t, "http://"+tt.host+"/")
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "refused") {
					t.Errorf("%s: %d %q", name, resp.StatusCode, body)
				}
			case "connect":
				c, _, resp := h.connect(t, tt.host)
				c.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s: %d", name, resp.StatusCode)
				}
			case "socks5":
				hostport, err := ParseTarget(tt.host, 0)
				if err != nil {
					t.Fatal(err)
				}
				host := hostport.HostString()
				if !hostport.IsName() {
					// Send literals as written (ATYP domain), and as the
					// parsed address in its own ATYP.
					written := strings.Trim(tt.host[:strings.LastIndex(tt.host, ":")], "[]")
					c, rep := h.socksReq(t, socksDomainRequest(socksConnect, written, int(hostport.Port)))
					c.Close()
					if rep != repNotAllowed {
						t.Errorf("%s (as a domain): reply %d", name, rep)
					}
				}
				c, rep := h.socks(t, socksConnect, host, int(hostport.Port))
				c.Close()
				if rep != repNotAllowed {
					t.Errorf("%s: reply %d", name, rep)
				}
			}
			vs := h.rec.Violations()
			if len(vs) == before {
				t.Errorf("%s: no violation", name)
				continue
			}
			if v := vs[len(vs)-1]; v.Rule != tt.rule || v.Kind != sandbox.ViolationNetwork || v.Action != "blocked" {
				t.Errorf("%s: violation %+v, want rule %s", name, v, tt.rule)
			}
		}
	}
	if n := target.Count() + target6.Count(); n != 0 {
		t.Errorf("the loopback targets saw %d connections", n)
	}
	if n := allowed.conns.Load(); n != 0 {
		t.Errorf("the allowed server saw %d connections", n)
	}
	// The port that is allowed works, through the name too.
	if resp, body := h.get(t, "http://rebind.test:"+port(allowed.Port())+"/"); resp.StatusCode != http.StatusOK {
		t.Errorf("rebind.test on the allowed port: %d %q", resp.StatusCode, body)
	}
}

func TestGateConnect(t *testing.T) {
	e := newCounter(t, "tcp", "127.0.0.1:0", echo)
	other := newCounter(t, "tcp", "127.0.0.1:0", echo)
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"127.0.0.1:" + port(e.Port()), "echo.test"},
	}}})

	for _, authority := range []string{"127.0.0.1:" + port(e.Port()), "echo.test:" + port(e.Port())} {
		c, br, resp := h.connect(t, authority)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %s: %d", authority, resp.StatusCode)
		}
		msg := strings.Repeat("ping through "+authority+"\n", 1000)
		if got := roundTrip(t, c, br, msg); got != msg {
			t.Fatalf("CONNECT %s: echoed %d bytes, want %d", authority, len(got), len(msg))
		}
		c.Close()
	}

	// Bytes sent right behind the request (an eager TLS hello) go first.
	c := h.dial(t)
	if _, err := fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\nearly bytes|", e.Port()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("eager CONNECT: %v %v", resp, err)
	}
	if got := roundTrip(t, c, br, "late bytes"); got != "early bytes|late bytes" {
		t.Errorf("eager CONNECT echoed %q", got)
	}

	recs := h.rec.waitRecords(t, 3, func(r Record) bool { return r.Via == "connect" && r.Decision == "allow" })
	if recs[1].Host != "echo.test" || recs[1].Addr != "127.0.0.1" || recs[1].Rule != "allow:echo.test" {
		t.Errorf("record %+v", recs[1])
	}

	// Denied: 403 with the reason, and nothing reached.
	for _, authority := range []string{"127.0.0.1:" + port(other.Port()), "echo.test:" + port(other.Port()), "public.test:443"} {
		c, br, resp := h.connect(t, authority)
		body, _ := io.ReadAll(br)
		c.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Agentbox-Denied") == "" || !strings.Contains(string(body), "refused") {
			t.Errorf("CONNECT %s: %d %q", authority, resp.StatusCode, body)
		}
	}
	// Malformed authorities.
	for _, authority := range []string{"echo.test", "/path", "http://echo.test:443", "[::1", "echo.test:0", "echo.test:99999"} {
		c, _, resp := h.connect(t, authority)
		c.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("CONNECT %s: %d", authority, resp.StatusCode)
		}
	}
	if n := other.Count(); n != 0 {
		t.Errorf("the denied server saw %d connections", n)
	}
	// A refused upstream is a 502, not a denial.
	closed := newCounter(t, "tcp", "127.0.0.1:0", nil)
	closedPort := closed.Port()
	closed.ln.Close()
	if err := h.gate.SetAllow([]string{"127.0.0.1:" + port(closedPort)}); err != nil {
		t.Fatal(err)
	}
	c, _, resp = h.connect(t, "127.0.0.1:"+port(closedPort))
	c.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT to a closed port: %d", resp.StatusCode)
	}
}

func TestGateSOCKS(t *testing.T) {
	e := newCounter(t, "tcp", "127.0.0.1:0", echo)
	e6 := newCounter(t, "tcp", "[::1]:0", echo)
	other := newCounter(t, "tcp", "127.0.0.1:0", echo)
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"127.0.0.1:" + port(e.Port()), "[::1]:" + port(e6.Port()), "echo.test", "rebind6.test"},
	}}})

	for _, tt := range []struct {
		host string
		port int
	}{
		{"127.0.0.1", e.Port()},        // ATYP IPv4
		{"::1", e6.Port()},             // ATYP IPv6
		{"::ffff:127.0.0.1", e.Port()}, // ATYP IPv6, mapped
		{"echo.test", e.Port()},        // ATYP domain
		{"rebind6.test", e6.Port()},    // ATYP domain, IPv6 address
		{"2130706433", e.Port()},       // ATYP domain holding an address
	} {
		c, rep := h.socks(t, socksConnect, tt.host, tt.port)
		if rep != repSuccess {
			t.Errorf("SOCKS %s:%d: reply %d", tt.host, tt.port, rep)
			continue
		}
		msg := "hello " + tt.host
		if got := roundTrip(t, c, c, msg); got != msg {
			t.Errorf("SOCKS %s: echoed %q", tt.host, got)
		}
		c.Close()
	}
	recs := h.rec.waitRecords(t, 6, func(r Record) bool { return r.Via == "socks5" && r.Decision == "allow" })
	if recs[3].Host != "echo.test" || recs[3].Rule != "allow:echo.test" || recs[3].Addr != "127.0.0.1" {
		t.Errorf("record %+v", recs[3])
	}

	// Denied: reply 0x02.
	for _, tt := range []struct {
		host string
		port int
	}{
		{"127.0.0.1", other.Port()},
		{"echo.test", other.Port()},
		{"::1", other.Port()},
		{"public.test", 443},
		{"169.254.169.254", 80},
	} {
		c, rep := h.socks(t, socksConnect, tt.host, tt.port)
		c.Close()
		if rep != repNotAllowed {
			t.Errorf("SOCKS %s:%d: reply %d, want %d", tt.host, tt.port, rep, repNotAllowed)
		}
	}
	if n := other.Count(); n != 0 {
		t.Errorf("the denied server saw %d connections", n)
	}
	if v := h.rec.Violations(); len(v) != 5 || v[0].Host != "127.0.0.1" || v[0].Port != other.Port() || v[0].Rule != "always-deny:loopback" {
		t.Errorf("violations %+v", v)
	}

	// BIND and UDP ASSOCIATE: 0x07; an unknown ATYP: 0x08; a bad name
	// or port 0: 0x04.
	for _, cmd := range []byte{2, 3} {
		c, rep := h.socks(t, cmd, "127.0.0.1", e.Port())
		c.Close()
		if rep != repCmdUnsupported {
			t.Errorf("SOCKS command %d: reply %d", cmd, rep)
		}
	}
	replyTo := func(req []byte) (byte, error) {
		c := h.dial(t)
		defer c.Close()
		socksHello(t, c)
		if _, err := c.Write(req); err != nil {
			return 0, err
		}
		var rep [10]byte
		if _, err := io.ReadFull(c, rep[:]); err != nil {
			return 0, err
		}
		return rep[1], nil
	}
	for _, tt := range []struct {
		req  []byte
		want byte
	}{
		{[]byte{5, 1, 0, 5, 1, 2, 3, 4, 0, 80}, repAtypUnsupported},
		{socksRequest(socksConnect, "exa mple.com", 80), repHostUnreachable},
		{socksRequest(socksConnect, "127.0.0.1", 0), repHostUnreachable},
		{[]byte{4, 1, 0, 1, 127, 0, 0, 1, 0, 80}, repGeneralFailure},
		{[]byte{5, 1, 1, 1, 127, 0, 0, 1, 0, 80}, repGeneralFailure},
	} {
		if rep, err := replyTo(tt.req); err != nil || rep != tt.want {
			t.Errorf("SOCKS %v: reply %d, %v; want %d", tt.req, rep, err, tt.want)
		}
	}
	// No acceptable method.
	c := h.dial(t)
	if _, err := c.Write([]byte{5, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c); err != nil || string(b) != "\x05\xff" {
		t.Errorf("SOCKS without no-auth: %q %v", b, err)
	}
	// A refused upstream: 0x05.
	closed := newCounter(t, "tcp", "127.0.0.1:0", nil)
	closedPort := closed.Port()
	closed.ln.Close()
	if err := h.gate.SetAllow([]string{"127.0.0.1:" + port(closedPort)}); err != nil {
		t.Fatal(err)
	}
	c, rep := h.socks(t, socksConnect, "127.0.0.1", closedPort)
	c.Close()
	if rep != repRefused {
		t.Errorf("SOCKS to a closed port: reply %d", rep)
	}
}

// asker is an Asker the test controls.
type asker struct {
	asks    atomic.Int64
	mu      sync.Mutex
	reqs    []sandbox.NetworkRequest
	answer  func(ctx context.Context, req sandbox.NetworkRequest) (sandbox.NetworkAnswer, error)
	pending chan sandbox.NetworkRequest
}

func (a *asker) ask(ctx context.Context, req sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
	a.asks.Add(1)
	a.mu.Lock()
	a.reqs = append(a.reqs, req)
	a.mu.Unlock()
	if a.pending != nil {
		a.pending <- req
	}
	return a.answer(ctx, req)
}

func TestGateAsk(t *testing.T) {
	e := newCounter(t, "tcp", "127.0.0.1:0", echo)
	up := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	other := newCounter(t, "tcp", "127.0.0.1:0", echo)
	answers := make(chan sandbox.NetworkAnswer, 10)
	a := &asker{answer: func(ctx context.Context, _ sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
		select {
		case ans := <-answers:
			return ans, nil
		case <-ctx.Done():
			return sandbox.NetworkAnswer{}, ctx.Err()
		}
	}}
	h := newHarness(t, harnessOpts{cfg: Config{
		Network: sandbox.Network{Default: DefaultAsk,
			// The addresses are open; the names are what is asked about.
			Allow: []string{"127.0.0.1:" + port(e.Port()), "127.0.0.1:" + port(up.Port())},
			Deny:  []string{"denied.test"}},
		Ask: a.ask, AskTimeout: 5 * time.Second,
	}})
	ep := port(e.Port())

	// Allowed once: that connection works; the next one asks again.
	for i := range 2 {
		answers <- sandbox.NetworkAnswer{Allow: true, By: "user"}
		c, br, resp := h.connect(t, "ask.test:"+ep)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT %d: %d", i, resp.StatusCode)
		}
		if got := roundTrip(t, c, br, "x"); got != "x" {
			t.Fatalf("echoed %q", got)
		}
		c.Close()
		if n := a.asks.Load(); n != int64(i+1) {
			t.Fatalf("after %d connections, %d asks", i+1, n)
		}
	}
	answers <- sandbox.NetworkAnswer{Allow: true}
	c, rep := h.socks(t, socksConnect, "ask.test", e.Port())
	if rep != repSuccess {
		t.Fatalf("SOCKS after an approval: reply %d", rep)
	}
	c.Close()
	if n := a.asks.Load(); n != 3 {
		t.Fatalf("%d asks, want 3", n)
	}
	a.mu.Lock()
	if got := a.reqs[0]; got.Host != "ask.test" || got.Port != e.Port() || got.Via != "connect" {
		t.Errorf("request %+v", got)
	}
	if got := a.reqs[2]; got.Via != "socks5" {
		t.Errorf("request %+v", got)
	}
	a.mu.Unlock()
	recs := h.rec.waitRecords(t, 3, func(r Record) bool { return r.Decision == "allow" && r.Rule == "ask:allowed-once" })
	if recs[0].By != "user" || recs[0].Host != "ask.test" || recs[0].Addr != "127.0.0.1" {
		t.Errorf("record %+v", recs[0])
	}

	// Plain HTTP on one keep-alive connection: every request asks.
	conn := h.dial(t)
	br := bufio.NewReader(conn)
	for i := range 2 {
		answers <- sandbox.NetworkAnswer{Allow: true}
		fmt.Fprintf(conn, "GET http://ask.test:%d/%d HTTP/1.1\r\nHost: ask.test\r\n\r\n", up.Port(), i)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %d: %d", i, resp.StatusCode)
		}
	}
	conn.Close()
	if n := a.asks.Load(); n != 5 {
		t.Fatalf("%d asks, want 5", n)
	}

	// Denied by the user: refused, with the message.
	answers <- sandbox.NetworkAnswer{Allow: false, By: "user", Message: "not today"}
	c, br, resp := h.connect(t, "ask.test:"+ep)
	body, _ := io.ReadAll(br)
	c.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "not today") {
		t.Errorf("denied CONNECT: %d %q", resp.StatusCode, body)
	}
	answers <- sandbox.NetworkAnswer{Allow: false}
	c, rep = h.socks(t, socksConnect, "ask.test", e.Port())
	c.Close()
	if rep != repNotAllowed {
		t.Errorf("denied SOCKS: reply %d", rep)
	}
	vs := h.rec.Violations()
	if len(vs) != 2 || vs[0].Action != "asked" || vs[0].Rule != "ask" || vs[0].Host != "ask.test" {
		t.Errorf("violations %+v", vs)
	}
	if n := a.asks.Load(); n != 7 {
		t.Fatalf("%d asks, want 7", n)
	}

	// Rules still settle what they settle: no ask.
	c, _, resp = h.connect(t, "denied.test:443")
	c.Close()
	if resp.StatusCode != http.StatusForbidden || a.asks.Load() != 7 {
		t.Errorf("a denied name: %d, %d asks", resp.StatusCode, a.asks.Load())
	}
	c, _, resp = h.connect(t, "127.0.0.1:"+ep)
	c.Close()
	if resp.StatusCode != http.StatusOK || a.asks.Load() != 7 {
		t.Errorf("an allowed address: %d, %d asks", resp.StatusCode, a.asks.Load())
	}
	// An approval never lifts the address checks.
	answers <- sandbox.NetworkAnswer{Allow: true}
	c, _, resp = h.connect(t, "ask.test:"+port(other.Port()))
	c.Close()
	if resp.StatusCode != http.StatusForbidden || other.Count() != 0 {
		t.Errorf("an approved loopback port: %d, %d connections", resp.StatusCode, other.Count())
	}
	// Asked about 127.0.0.1 itself? Never: the address gate decides.
	c, _, resp = h.connect(t, "127.0.0.1:"+port(other.Port()))
	c.Close()
	if resp.StatusCode != http.StatusForbidden || a.asks.Load() != 8 {
		t.Errorf("a loopback literal: %d, %d asks", resp.StatusCode, a.asks.Load())
	}
	if len(answers) != 0 {
		t.Errorf("%d answers left", len(answers))
	}
	m := h.metrics(t)
	for _, want := range []string{
		// The approval the address gate refused counts as a denial only.
		`agentbox_egress_decisions_total{by="user",decision="allow",via="connect"} 2`,
		`agentbox_egress_decisions_total{by="policy",decision="deny",via="connect"} 3`,
		`agentbox_egress_decisions_total{by="user",decision="deny",via="connect"} 1`,
		`agentbox_egress_ask_seconds_count 8`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, m)
		}
	}
}

func TestGateAskTimeout(t *testing.T) {
	t.Parallel()
	e := newCounter(t, "tcp", "127.0.0.1:0", echo)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	const askTimeout = 100 * time.Millisecond
	for _, tt := range []struct {
		name   string
		answer func(ctx context.Context, _ sandbox.NetworkRequest) (sandbox.NetworkAnswer, error)
		// slow: the gate's own guard (AskTimeout + 5 s) decides.
		slow   bool
		wantBy string
	}{
		// The daemon's Asker waits req.Timeout and answers "timeout".
		{"answers timeout", func(ctx context.Context, req sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
			if req.Timeout != askTimeout {
				return sandbox.NetworkAnswer{}, fmt.Errorf("req.Timeout %v", req.Timeout)
			}
			select {
			case <-time.After(req.Timeout):
				return sandbox.NetworkAnswer{By: "timeout"}, nil
			case <-ctx.Done():
				return sandbox.NetworkAnswer{}, ctx.Err()
			}
		}, false, "timeout"},
		// One that never answers but honours ctx.
		{"honours ctx", func(ctx context.Context, _ sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
			<-ctx.Done()
			return sandbox.NetworkAnswer{}, ctx.Err()
		}, true, "timeout"},
		// One that never answers and ignores ctx must not hold the
		// connection for ever either.
		{"ignores ctx", func(context.Context, sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
			<-release
			return sandbox.NetworkAnswer{Allow: true}, nil
		}, true, "timeout"},
		{"nil Ask", nil, false, "daemon"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := &asker{answer: tt.answer}
			cfg := Config{
				Network:    sandbox.Network{Default: DefaultAsk, Allow: []string{"127.0.0.1:" + port(e.Port())}},
				AskTimeout: askTimeout,
			}
			if tt.answer != nil {
				cfg.Ask = a.ask
			}
			h := newHarness(t, harnessOpts{cfg: cfg})
			limit := 3 * time.Second
			if tt.slow {
				limit += 5 * time.Second
			}
			// The three ways in, at once: each waits for its own answer.
			var wg sync.WaitGroup
			start := time.Now()
			wg.Go(func() {
				c, _, resp := h.connect(t, "ask.test:"+port(e.Port()))
				c.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("CONNECT: %d", resp.StatusCode)
				}
			})
			wg.Go(func() {
				c, rep := h.socks(t, socksConnect, "ask.test", e.Port())
				c.Close()
				if rep != repNotAllowed {
					t.Errorf("SOCKS: reply %d", rep)
				}
			})
			wg.Go(func() {
				resp, body := h.get(t, "http://ask.test:"+port(e.Port())+"/")
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("GET: %d %q", resp.StatusCode, body)
				}
			})
			wg.Wait()
			if d := time.Since(start); d > limit {
				t.Errorf("the asks took %v with AskTimeout %v", d, askTimeout)
			}
			recs := h.rec.waitRecords(t, 3, func(r Record) bool { return r.Decision == "deny" })
			for _, r := range recs {
				if r.By != tt.wantBy || r.Rule != "ask" || !strings.Contains(r.Reason, "ask.test") {
					t.Errorf("record %+v, want by %s", r, tt.wantBy)
				}
			}
			if e.Count() != 0 {
				t.Errorf("%d connections reached the server", e.Count())
			}
		})
	}
}

func TestGateSetAllow(t *testing.T) {
	up := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	e := newCounter(t, "tcp", "127.0.0.1:0", echo)
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"127.0.0.1:" + port(up.Port()), "api.test"},
	}}})
	uri := "http://api.test:" + port(up.Port()) + "/"
	c := h.client(true)
	get := func() int {
		resp, err := c.Get(uri)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := get(); s != http.StatusOK {
		t.Fatalf("before: %d", s)
	}
	if c, _, resp := h.connect(t, "127.0.0.1:"+port(e.Port())); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT before: %d", resp.StatusCode)
	} else {
		c.Close()
	}

	if err := h.gate.SetAllow([]string{"127.0.0.1:" + port(e.Port())}); err != nil {
		t.Fatal(err)
	}
	if s := get(); s != http.StatusForbidden {
		t.Errorf("after SetAllow: %d", s)
	}
	tun, br, resp := h.connect(t, "127.0.0.1:"+port(e.Port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT after SetAllow: %d", resp.StatusCode)
	}
	// An open tunnel stays open through a change of rules.
	if err := h.gate.SetAllow(nil); err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(t, tun, br, "still"); got != "still" {
		t.Errorf("tunnel after SetAllow: %q", got)
	}
	if _, _, resp := h.connect(t, "127.0.0.1:"+port(e.Port())); resp.StatusCode != http.StatusForbidden {
		t.Errorf("CONNECT after SetAllow(nil): %d", resp.StatusCode)
	}
	// A bad rule changes nothing.
	if err := h.gate.SetAllow([]string{"127.0.0.1:" + port(up.Port()), "not a rule"}); err == nil {
		t.Error("SetAllow took a bad rule")
	}
	if s := get(); s != http.StatusForbidden {
		t.Errorf("after a failed SetAllow: %d", s)
	}
	if err := h.gate.SetAllow([]string{"127.0.0.1:" + port(up.Port()), "api.test"}); err != nil {
		t.Fatal(err)
	}
	if s := get(); s != http.StatusOK {
		t.Errorf("after allowing again: %d", s)
	}
	// Deny rules stay.
	h2 := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{Deny: []string{"api.test"}}}})
	if err := h2.gate.SetAllow([]string{"api.test", "127.0.0.1:" + port(up.Port())}); err != nil {
		t.Fatal(err)
	}
	if resp, _ := h2.get(t, uri); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a denied name after SetAllow: %d", resp.StatusCode)
	}
}

// routeHarness is a gate with a route to a TLS upstream.
func routeHarness(t *testing.T, handler http.HandlerFunc) (*harness, *httptest.Server, *[]*http.Request, *sync.Mutex) {
	var mu sync.Mutex
	var seen []*http.Request
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Clone(context.Background()))
		mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(ts.Close)
	u, err := url.Parse(ts.URL + "/api/")
	if err != nil {
		t.Fatal(err)
	}
	sec := &Secret{Name: "k", Value: "real-key", Host: "api.anthropic.test", Header: "x-api-key"}
	h := newHarness(t, harnessOpts{
		opts: Options{RootCAs: rootsOf(ts)},
		cfg: Config{Routes: []Route{
			{Name: "anth", Upstream: u, Credentials: []Secret{*sec}},
			{Name: "open", Upstream: u},
		}},
	})
	return h, ts, &seen, &mu
}

func TestGateRoute(t *testing.T) {
	h, _, seen, mu := routeHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream", "yes")
		_, _ = fmt.Fprintf(w, "upstream %s %s key=%s", r.Method, r.URL.RequestURI(), r.Header.Get("x-api-key"))
	})
	if got := RouteURL(h.gate.port, "anth"); got != "http://127.0.0.1:3128/llm/anth" {
		t.Errorf("RouteURL = %q", got)
	}

	c := h.dial(t)
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "POST /llm/anth/v1/messages?beta=true HTTP/1.1\r\nHost: 127.0.0.1:3128\r\nx-api-key: %s\r\n"+
		"Authorization: Bearer %s\r\nContent-Length: 5\r\n\r\nhello", Placeholder("k"), Placeholder("k"))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Upstream") != "yes" {
		t.Fatalf("route: %d %q", resp.StatusCode, body)
	}
	mu.Lock()
	r0 := (*seen)[0]
	mu.Unlock()
	if r0.URL.Path != "/api/v1/messages" || r0.URL.RawQuery != "beta=true" || r0.Method != "POST" {
		t.Errorf("upstream saw %s %s", r0.Method, r0.URL)
	}
	if got := r0.Header.Get("x-api-key"); got != "real-key" {
		t.Errorf("upstream saw x-api-key %q", got)
	}
	// The value goes only in its own header: elsewhere the placeholder
	// stays, so an upstream echoing a header cannot hand it back.
	if got := r0.Header.Get("Authorization"); got != "Bearer "+Placeholder("k") {
		t.Errorf("upstream saw Authorization %q, want the placeholder as sent", got)
	}
	if strings.Contains(r0.Host, "3128") {
		t.Errorf("upstream saw the sandbox's Host %q", r0.Host)
	}

	// Without the placeholder, no key is added (the agent chose to send
	// none); a route without credentials adds none.
	resp, body2 := h.raw(t, "GET /llm/anth/v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(body2, "key=") {
		t.Errorf("route without placeholder: %d %q", resp.StatusCode, body2)
	}
	resp, body2 = h.raw(t, "GET /llm/open/v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: "+Placeholder("k")+"\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(body2, "key="+Placeholder("k")) {
		t.Errorf("route without a secret: %d %q", resp.StatusCode, body2)
	}

	// Escaped but harmless paths pass as they are.
	resp, body2 = h.raw(t, "GET /llm/anth/v1/a%20b/c..d/.e HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body2, "/api/v1/a%20b/c..d/.e") {
		t.Errorf("escaped path: %d %q", resp.StatusCode, body2)
	}

	// Climbing out of the route is refused before anything is sent.
	mu.Lock()
	n := len(*seen)
	mu.Unlock()
	for _, p := range []string{
		"/llm/anth/..", "/llm/anth/../x", "/llm/anth/v1/../../x", "/llm/anth/v1/./x",
		"/llm/anth/%2e%2e/x", "/llm/anth/%2E%2e/x", "/llm/anth/.%2e/x", "/llm/anth/%2e/x",
		"/llm/anth/v1/%2e%2e%2f%2e%2e/x", "/llm/anth/a%2fb", "/llm/anth/a%5cb", "/llm/anth/..%5cx",
		"/llm/anth/a\\..\\b", "/llm/anth/%zz",
	} {
		resp, body := h.raw(t, "GET "+p+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(body, "real-key") {
			t.Errorf("GET %s: %d %q", p, resp.StatusCode, body)
		}
	}
	resp, body2 = h.raw(t, "GET /llm/nope/v1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown route: %d %q", resp.StatusCode, body2)
	}
	mu.Lock()
	if len(*seen) != n {
		t.Errorf("refused paths reached the upstream: %v", (*seen)[n:])
	}
	mu.Unlock()

	// One use: the first request carried the placeholder; the others
	// carried none, and the route added nothing to them.
	recs := h.rec.waitRecords(t, 1, func(r Record) bool { return r.Type == "secret" })
	if len(recs) != 1 {
		t.Errorf("%d secret records, want 1: %+v", len(recs), recs)
	}
	if r := recs[0]; r.Secret != "k" || r.Via != "route" || r.Decision != "allow" {
		t.Errorf("secret record %+v", r)
	}
	egress := h.rec.waitRecords(t, 4, func(r Record) bool { return r.Type == "egress" && r.Via == "route" && r.Decision == "allow" })
	if len(egress) != 4 || egress[0].Route != "anth" || egress[0].Rule != "route:anth" || egress[0].Host != "127.0.0.1" {
		t.Errorf("route records %+v", egress)
	}
	// Refused route requests are audited too.
	refusedRecs := h.rec.waitRecords(t, 1, func(r Record) bool {
		return r.Type == "egress" && r.Via == "route" && r.Decision == "deny" && r.Route == "nope"
	})
	if len(refusedRecs) != 1 || !strings.Contains(refusedRecs[0].Reason, "no route") {
		t.Errorf("unknown-route records %+v", refusedRecs)
	}
	for _, r := range h.rec.Records() {
		if strings.Contains(fmt.Sprintf("%+v %#v", r, r), "real-key") {
			t.Errorf("a record holds the secret's value: %+v", r)
		}
	}
	for _, v := range h.rec.Violations() {
		if strings.Contains(fmt.Sprintf("%+v", v), "real-key") {
			t.Errorf("a violation holds the secret's value: %+v", v)
		}
	}
	m := h.metrics(t)
	if strings.Contains(m, "real-key") {
		t.Errorf("the metrics hold the secret's value")
	}
	if !strings.Contains(m, `agentbox_egress_secret_injections_total{secret="k"} 1`) {
		t.Errorf("metrics:\n%s", m)
	}
}

func TestGateRouteStreaming(t *testing.T) {
	next := make(chan struct{})
	h, _, _, _ := routeHarness(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: event %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	})
	c := h.dial(t)
	fmt.Fprintf(c, "GET /llm/anth/v1/stream HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for i := range 3 {
		// Each event arrives before the upstream is let to write the next.
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		line, err := r.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: event %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		if blank, err := r.ReadString('\n'); err != nil || blank != "\n" {
			t.Fatalf("event %d end: %q %v", i, blank, err)
		}
		next <- struct{}{}
	}
}

func TestGateRouteUpstreamDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h := newHarness(t, harnessOpts{cfg: Config{Routes: []Route{{Name: "down", Upstream: &url.URL{Scheme: "http", Host: addr},
		Credentials: []Secret{{Name: "k", Value: "real-key", Host: "x.test", Header: "x-api-key"}}}}}})
	resp, body := h.raw(t, "GET /llm/down/x HTTP/1.1\r\nHost: x\r\nx-api-key: "+Placeholder("k")+"\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, "real-key") {
		t.Errorf("route to a closed port: %d %q", resp.StatusCode, body)
	}
	recs := h.rec.waitRecords(t, 1, func(r Record) bool { return r.Via == "route" && r.Type == "egress" })
	if recs[0].Reason == "" {
		t.Errorf("record %+v has no reason", recs[0])
	}
}

func TestGateSecrets(t *testing.T) {
	up := newHTTPCounter(t, "tcp", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "auth=%s", r.Header.Get("Authorization"))
	})
	store := NewSecrets()
	if err := store.Put(Secret{Name: "gh", Value: "gh-real", Host: "api.test", Header: "Authorization", Format: "Bearer {value}"}, "api"); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(Secret{Name: "unused", Value: "unused-real", Host: "*.unused.test", Header: "X-Unused"}, "api"); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{
		opts: Options{Secrets: store},
		cfg: Config{Network: sandbox.Network{
			Allow:   []string{"api.test", "other.test", "127.0.0.1:" + port(up.Port())},
			Secrets: map[string]string{"GH_TOKEN": "gh", "GITHUB_TOKEN": "gh"},
		}},
	})
	p := port(up.Port())
	for _, tt := range []struct {
		host, want string
	}{
		{"api.test", "auth=Bearer gh-real"},
		{"API.test.", "auth=Bearer gh-real"},
		{"other.test", "auth=Bearer " + Placeholder("gh")},
		{"127.0.0.1", "auth=Bearer " + Placeholder("gh")},
	} {
		resp, body := h.raw(t, "GET http://"+tt.host+":"+p+"/ HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "+
			Placeholder("gh")+"\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != http.StatusOK || body != tt.want {
			t.Errorf("GET via %s: %d %q, want %q", tt.host, resp.StatusCode, body, tt.want)
		}
	}
	recs := h.rec.waitRecords(t, 2, func(r Record) bool { return r.Type == "secret" })
	if len(recs) != 2 || recs[0].Secret != "gh" || recs[0].Host != "api.test" || recs[0].Via != "http" {
		t.Errorf("secret records %+v", recs)
	}
	for _, r := range h.rec.Records() {
		if s := fmt.Sprintf("%+v", r); strings.Contains(s, "gh-real") || strings.Contains(s, "unused-real") {
			t.Errorf("a record holds a value: %s", s)
		}
	}
	if m := h.metrics(t); strings.Contains(m, "gh-real") || !strings.Contains(m, `agentbox_egress_secret_injections_total{secret="gh"} 2`) {
		t.Errorf("metrics:\n%s", m)
	}
	for _, r := range up.Requests() {
		if r.Header.Get("X-Unused") != "" {
			t.Errorf("an unbound secret was sent: %v", r.Header)
		}
	}

	// The running gate uses the store's current value: a rotated secret
	// at once, a deleted one nowhere.
	get := func() string {
		_, body := h.raw(t, "GET http://api.test:"+p+"/ HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer "+Placeholder("gh")+"\r\nConnection: close\r\n\r\n")
		return body
	}
	if err := store.Put(Secret{Name: "gh", Value: "gh-rotated", Host: "api.test", Header: "Authorization", Format: "Bearer {value}"}, "api"); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "auth=Bearer gh-rotated" {
		t.Errorf("after rotation the upstream saw %q", got)
	}
	store.Delete("gh")
	if got := get(); got != "auth=Bearer "+Placeholder("gh") {
		t.Errorf("after deletion the upstream saw %q, want only the placeholder", got)
	}

	// A secret the daemon does not hold: no gate.
	srv, err := New(Options{Secrets: store, Resolver: newResolver(nil)})
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []*Server{srv, func() *Server { s, _ := New(Options{}); return s }()} {
		_, err = opts.Gate(Config{Network: sandbox.Network{Mode: sandbox.NetworkProxy, Secrets: map[string]string{"X": "nope"}}})
		if !errors.Is(err, ErrUnknownSecret) || !strings.Contains(err.Error(), `"nope"`) {
			t.Errorf("Gate with an unknown secret: %v", err)
		}
	}
}

func TestGateConfigErrors(t *testing.T) {
	srv, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	up := &url.URL{Scheme: "https", Host: "api.example"}
	for _, cfg := range []Config{
		{Network: sandbox.Network{}},
		{Network: sandbox.Network{Mode: sandbox.NetworkHost}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy, Default: "allow"}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy, Allow: []string{"http://x"}}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy, Deny: []string{"1.2.3.4.5"}}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy}, Routes: []Route{{Name: "", Upstream: up}}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy}, Routes: []Route{{Name: "a/b", Upstream: up}}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy}, Routes: []Route{{Name: "a"}}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy}, Routes: []Route{{Name: "a", Upstream: &url.URL{Scheme: "ftp", Host: "x"}}}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy}, Routes: []Route{{Name: "a", Upstream: &url.URL{Scheme: "https"}}}},
		{Network: sandbox.Network{Mode: sandbox.NetworkProxy}, Routes: []Route{{Name: "a", Upstream: up}, {Name: "a", Upstream: up}}},
	} {
		if g, err := srv.Gate(cfg); err == nil {
			g.Close()
			t.Errorf("Gate(%+v) succeeded", cfg)
		}
	}
	// Two servers cannot share a registry.
	h := newHarness(t, harnessOpts{})
	if _, err := New(Options{Registerer: h.reg}); err == nil {
		t.Error("New registered its metrics twice")
	}
}

func TestGateClose(t *testing.T) {
	e := newCounter(t, "tcp", "127.0.0.1:0", echo)
	asked := make(chan sandbox.NetworkRequest, 10)
	ctxDone := make(chan struct{}, 10)
	a := &asker{pending: asked, answer: func(ctx context.Context, _ sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
		<-ctx.Done()
		ctxDone <- struct{}{}
		return sandbox.NetworkAnswer{}, ctx.Err()
	}}
	// A slow (if not blocking) violation handler: Close must still wait
	// for it.
	slow := &recorder{}
	h := newHarness(t, harnessOpts{cfg: Config{
		Network: sandbox.Network{Default: DefaultAsk, Allow: []string{"127.0.0.1:" + port(e.Port())}},
		Ask:     a.ask, AskTimeout: time.Hour,
		OnViolation: func(v sandbox.Violation) {
			time.Sleep(20 * time.Millisecond)
			slow.violation(v)
		},
	}})
	ep := port(e.Port())

	tun, _, resp := h.connect(t, "127.0.0.1:"+ep)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	stun, rep := h.socks(t, socksConnect, "127.0.0.1", e.Port())
	if rep != repSuccess {
		t.Fatalf("SOCKS: %d", rep)
	}
	// Pending asks, by each way in; the POST's body is still to come.
	var clients []net.Conn
	for _, req := range []string{
		"CONNECT ask.test:" + ep + " HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET http://ask.test:" + ep + "/ HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST http://ask.test:" + ep + "/ HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n",
	} {
		c := h.dial(t)
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	sc := h.dial(t)
	socksHello(t, sc)
	if _, err := sc.Write(socksRequest(socksConnect, "ask.test", e.Port())); err != nil {
		t.Fatal(err)
	}
	clients = append(clients, sc)
	for range 4 {
		select {
		case <-asked:
		case <-time.After(5 * time.Second):
			t.Fatal("the asks did not arrive")
		}
	}
	// An idle client, and one in the middle of a request line.
	idle := h.dial(t)
	half := h.dial(t)
	io.WriteString(half, "GET http://x")
	clients = append(clients, idle, half)

	done := make(chan error, 1)
	go func() { done <- h.gate.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	// Close waited for the requests it ended: their denials are in, and
	// nothing follows.
	denials := func() int { return len(h.rec.find(func(r Record) bool { return r.Decision == "deny" })) }
	if n, nv := denials(), len(slow.Violations()); n != 4 || nv != 4 {
		t.Errorf("%d denials and %d violations when Close returned, want the 4 given-up asks", n, nv)
	}
	nv := len(slow.Violations())
	for i := range 4 {
		select {
		case <-ctxDone:
		case <-time.After(2 * time.Second):
			t.Fatalf("only %d of 4 pending asks were given up", i)
		}
	}
	for i, c := range append([]net.Conn{tun, stun}, clients...) {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("connection %d still open after Close", i)
		}
	}
	if err := h.gate.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	// A closed gate serves nothing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.gate.Serve(ln); err != nil {
		t.Errorf("Serve after Close: %v", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Serve after Close left its listener open: %v", err)
	}
	if m := h.metrics(t); !strings.Contains(m, "agentbox_egress_connections_active 0") {
		t.Errorf("metrics after Close:\n%s", m)
	}
	time.Sleep(50 * time.Millisecond)
	if n := denials(); n != 4 || len(slow.Violations()) != nv {
		t.Errorf("records or violations after Close: %d denials, %d violations (%d before)", n, len(slow.Violations()), nv)
	}
	// The asks given up by Close are the daemon's denials, not timeouts.
	for _, r := range h.rec.find(func(r Record) bool { return r.Decision == "deny" }) {
		if r.By != "daemon" {
			t.Errorf("record %+v", r)
		}
	}
}

func TestGateSpoofedHost(t *testing.T) {
	a := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	b := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"127.0.0.1:" + port(a.Port()), "api.test"},
	}}})
	ap, bp := port(a.Port()), port(b.Port())
	for _, req := range []string{
		"GET http://127.0.0.1:" + ap + "/ HTTP/1.1\r\nHost: 127.0.0.1:" + bp + "\r\nConnection: close\r\n\r\n",
		"GET http://127.0.0.1:" + ap + "/ HTTP/1.1\r\nHost: metadata.google.internal\r\nConnection: close\r\n\r\n",
		"GET http://api.test:" + ap + "/ HTTP/1.1\r\nHost: rebind.test:" + bp + "\r\nConnection: close\r\n\r\n",
		"GET http://api.test:" + ap + "/ HTTP/1.1\r\nHost: 127.0.0.1:" + bp + "\r\nX-Forwarded-Host: 127.0.0.1:" + bp + "\r\nConnection: close\r\n\r\n",
	} {
		resp, body := h.raw(t, req)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, ":"+ap) {
			t.Errorf("%q: %d %q", req, resp.StatusCode, body)
		}
	}
	for _, r := range a.Requests() {
		if strings.Contains(r.Host, bp) || strings.Contains(r.Host, "metadata") || r.Header.Get("X-Forwarded-Host") != "" {
			t.Errorf("upstream saw Host %q, headers %v", r.Host, r.Header)
		}
	}
	// The other way round: a denied URI with an allowed Host header.
	for _, req := range []string{
		"GET http://127.0.0.1:" + bp + "/ HTTP/1.1\r\nHost: 127.0.0.1:" + ap + "\r\nConnection: close\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: 127.0.0.1:" + ap + "\r\nConnection: close\r\n\r\n",
		"GET //127.0.0.1:" + ap + "/ HTTP/1.1\r\nHost: 127.0.0.1:" + ap + "\r\nConnection: close\r\n\r\n",
	} {
		if resp, body := h.raw(t, req); resp.StatusCode/100 != 4 {
			t.Errorf("%q: %d %q", req, resp.StatusCode, body)
		}
	}
	if n := b.conns.Load(); n != 0 {
		t.Errorf("the spoofed host saw %d connections", n)
	}
	if n := len(a.Requests()); n != 4 {
		t.Errorf("the allowed host saw %d requests, want 4", n)
	}
}

// peerListener hands out connections that know their process.
type peerListener struct{ net.Listener }

type peerConn struct{ net.Conn }

func (peerConn) Peer() (sandbox.Peer, bool) {
	return sandbox.Peer{Pid: 42, Name: "curl", CommandLine: "curl http://x"}, true
}

func (l peerListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return peerConn{c}, nil
}

func TestGatePeer(t *testing.T) {
	e := newCounter(t, "tcp", "127.0.0.1:0", echo)
	rec := &recorder{}
	a := &asker{answer: func(context.Context, sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
		return sandbox.NetworkAnswer{Allow: false, By: "user"}, nil
	}}
	srv, err := New(Options{Resolver: newResolver(testResolverMap), Audit: rec.audit})
	if err != nil {
		t.Fatal(err)
	}
	g, err := srv.Gate(Config{Network: sandbox.Network{Mode: sandbox.NetworkProxy, Default: DefaultAsk,
		Allow: []string{"127.0.0.1:" + port(e.Port())}}, Ask: a.ask, OnViolation: rec.violation})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(peerListener{ln})
	h := &harness{addr: ln.Addr().String(), rec: rec}
	c, _, resp := h.connect(t, "ask.test:"+port(e.Port()))
	c.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	c, rep := h.socks(t, socksConnect, "169.254.169.254", 80)
	c.Close()
	if rep != repNotAllowed {
		t.Fatalf("SOCKS: %d", rep)
	}
	want := sandbox.Peer{Pid: 42, Name: "curl", CommandLine: "curl http://x"}
	a.mu.Lock()
	if len(a.reqs) != 1 || a.reqs[0].Peer != want {
		t.Errorf("asked %+v", a.reqs)
	}
	a.mu.Unlock()
	vs := rec.Violations()
	if len(vs) != 2 {
		t.Fatalf("violations %+v", vs)
	}
	for _, v := range vs {
		if v.Process == nil || *v.Process != want {
			t.Errorf("violation %+v without the process", v)
		}
	}
	for _, r := range rec.Records() {
		if r.Process == nil || *r.Process != want {
			t.Errorf("record %+v without the process", r)
		}
	}
}

func TestGateHandshakeTimeout(t *testing.T) {
	h := newHarness(t, harnessOpts{opts: Options{HandshakeTimeout: 100 * time.Millisecond}})
	for _, first := range []string{"", "\x05", "\x05\x01\x00", "GET http://x"} {
		c := h.dial(t)
		io.WriteString(c, first)
		start := time.Now()
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || time.Since(start) > 2*time.Second {
			t.Errorf("%q: the gate kept a silent client for %v", first, time.Since(start))
		}
	}
}

func TestForwardTargetIgnoresHost(t *testing.T) {
	for _, tt := range []struct {
		uri, want string
	}{
		{"http://example.com/x", "example.com:80"},
		{"HTTP://Example.com:8080/x?y", "example.com:8080"},
		{"http://user:pass@example.com/", "example.com:80"},
		{"http://[::1]:8080/", "[::1]:8080"},
		{"http://2130706433/", "127.0.0.1:80"},
	} {
		got, err := ForwardTarget(http.MethodGet, tt.uri)
		if err != nil || got.String() != tt.want {
			t.Errorf("ForwardTarget(%q) = %v, %v; want %s", tt.uri, got, err, tt.want)
		}
	}
	for _, uri := range []string{"/x", "*", "https://example.com/", "ftp://example.com/", "http:///x", "http://:80/",
		"http://example.com:0/", "http://example.com:99999/", "http://exa_mple..com/", "http://%e2%84%aa.com/", "http://[fe80::1%25eth0]/"} {
		if got, err := ForwardTarget(http.MethodGet, uri); err == nil {
			t.Errorf("ForwardTarget(%q) = %v", uri, got)
		}
	}
	if _, err := ForwardTarget(http.MethodConnect, "example.com:443"); err == nil {
		t.Error("ForwardTarget took a CONNECT")
	}
	if _, err := ConnectTarget(""); err == nil {
		t.Error("ConnectTarget took an empty authority")
	}
	if got, err := ConnectTarget("Example.com:443"); err != nil || got.String() != "example.com:443" {
		t.Errorf("ConnectTarget = %v, %v", got, err)
	}
}

func TestGateLookup(t *testing.T) {
	up := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	p := port(up.Port())
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"localhost", "*.localhost", "intranet", "127.0.0.1:" + p},
	}}})
	// localhost is loopback without a lookup, and still needs the
	// address rule.
	for _, host := range []string{"localhost", "LOCALHOST.", "app.localhost"} {
		if resp, body := h.get(t, "http://"+host+":"+p+"/"); resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d %q", host, resp.StatusCode, body)
		}
	}
	if resp, _ := h.get(t, "http://localhost:"+port(up.Port()+1)+"/"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("localhost on another port: %d", resp.StatusCode)
	}
	// A single-label name is never looked up.
	if resp, _ := h.get(t, "http://intranet:"+p+"/"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("intranet: %d", resp.StatusCode)
	}
	for _, q := range []string{"localhost", "app.localhost", "intranet"} {
		if h.res.Queried(q) {
			t.Errorf("%s was looked up", q)
		}
	}
	// An unknown name is the upstream's failure, not a denial.
	if err := h.gate.SetAllow([]string{"*.test"}); err != nil {
		t.Fatal(err)
	}
	if resp, body := h.get(t, "http://nxdomain.test/"); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "cannot resolve") {
		t.Errorf("nxdomain.test: %d %q", resp.StatusCode, body)
	}
}

// TestGateSetAllowInFlight: a connection in use while the rules change
// must not carry a later request the new rules refuse.
func TestGateSetAllowInFlight(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newHTTPCounter(t, "tcp", "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			arrived <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "ok")
	})
	other := newHTTPCounter(t, "tcp", "127.0.0.1:0", nil)
	p := port(up.Port())
	h := newHarness(t, harnessOpts{cfg: Config{Network: sandbox.Network{
		Allow: []string{"api.test", "127.0.0.1:" + p},
	}}})
	c := h.client(true)
	get := func(path string) (int, string) {
		resp, err := c.Get("http://api.test:" + p + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	done := make(chan int)
	go func() {
		s, _ := get("/block")
		done <- s
	}()
	<-arrived
	// api.test stays allowed by name, but 127.0.0.1:p is no longer open.
	if err := h.gate.SetAllow([]string{"api.test", "other.test", "127.0.0.1:" + port(other.Port())}); err != nil {
		t.Fatal(err)
	}
	// Another request through the pool meanwhile.
	if resp, body := h.get(t, "http://other.test:"+port(other.Port())+"/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("other.test: %d %q", resp.StatusCode, body)
	}
	close(release)
	if s := <-done; s != http.StatusOK {
		t.Fatalf("the request in flight: %d", s)
	}
	// Let the upstream connection go back to the pool.
	time.Sleep(50 * time.Millisecond)
	if s, body := get("/after"); s != http.StatusForbidden {
		t.Errorf("after SetAllow: %d %q", s, body)
	}
	for _, r := range up.Requests() {
		if r.URL.Path == "/after" {
			t.Errorf("a request the new rules refuse reached the upstream over a kept connection")
		}
	}
}

// TestGateRouteAbsoluteURI: a client that sends its route requests
// through the proxy as a forward-proxy request (it ignores NO_PROXY) still
// reaches the route, not a refused loopback address.
func TestGateRouteAbsoluteURI(t *testing.T) {
	h, _, _, _ := routeHarness(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "upstream %s key=%s", r.URL.Path, r.Header.Get("x-api-key"))
	})
	for _, host := range []string{"127.0.0.1:3128", "localhost:3128"} {
		resp, body := h.raw(t, "GET http://"+host+"/llm/anth/v1/models HTTP/1.1\r\nHost: "+host+"\r\nx-api-key: "+Placeholder("k")+"\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "key=real-key") || !strings.Contains(body, "/v1/models") {
			t.Errorf("absolute route URI via %s: %d %q", host, resp.StatusCode, body)
		}
	}
	// Another port of the sandbox's loopback is no route: it is the
	// host's loopback, refused.
	resp, _ := h.raw(t, "GET http://127.0.0.1:3129/llm/anth/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("another loopback port: %d, want 403", resp.StatusCode)
	}
}
