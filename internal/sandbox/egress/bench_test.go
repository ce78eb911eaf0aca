package egress

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// benchUpstream is a loopback server answering a small body.
func benchUpstream(b *testing.B) *httptest.Server {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	b.Cleanup(ts.Close)
	return ts
}

func benchClient(proxy string, keepAlive bool) *http.Client {
	tr := &http.Transport{DisableKeepAlives: !keepAlive, MaxIdleConnsPerHost: 4}
	if proxy != "" {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})
	}
	return &http.Client{Transport: tr}
}

func benchGet(b *testing.B, c *http.Client, u string) {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
}

// BenchmarkProxyOverhead is one plain-HTTP GET to a loopback server per
// op, directly and through a gate, with keep-alive clients and with a new
// connection per request. The "added" sub-benchmarks alternate the two in
// one run and report the difference as added-us/op.
func BenchmarkProxyOverhead(b *testing.B) {
	ts := benchUpstream(b)
	h := newHarness(b, harnessOpts{
		opts: Options{Audit: func(Record) {}},
		// A new connection per request, as fast as they come: past the
		// default connection rate.
		cfg: Config{Network: sandbox.Network{Allow: []string{ts.Listener.Addr().String()}, MaxConnectionRate: 1 << 30}},
	})
	u := ts.URL + "/"
	for _, keepAlive := range []bool{true, false} {
		mode := "keepalive"
		if !keepAlive {
			mode = "newconn"
		}
		b.Run("direct/"+mode, func(b *testing.B) {
			c := benchClient("", keepAlive)
			for b.Loop() {
				benchGet(b, c, u)
			}
		})
		b.Run("proxy/"+mode, func(b *testing.B) {
			c := benchClient(h.addr, keepAlive)
			for b.Loop() {
				benchGet(b, c, u)
			}
		})
		b.Run("added/"+mode, func(b *testing.B) {
			direct, proxied := benchClient("", keepAlive), benchClient(h.addr, keepAlive)
			var td, tp time.Duration
			n := 0
			for b.Loop() {
				start := time.Now()
				benchGet(b, direct, u)
				mid := time.Now()
				benchGet(b, proxied, u)
				tp += time.Since(mid)
				td += mid.Sub(start)
				n++
			}
			b.ReportMetric(float64(td.Microseconds())/float64(n), "direct-us/op")
			b.ReportMetric(float64(tp.Microseconds())/float64(n), "proxy-us/op")
			b.ReportMetric(float64((tp-td).Microseconds())/float64(n), "added-us/op")
		})
	}
}

// BenchmarkAskRoundTrip is one connection that no rule settles, approved
// by an Asker that answers at once: ns per approved connection.
func BenchmarkAskRoundTrip(b *testing.B) {
	ts := benchUpstream(b)
	e := newCounter(b, "tcp", "127.0.0.1:0", echo)
	tsPort := ts.Listener.Addr().(*net.TCPAddr).Port
	h := newHarness(b, harnessOpts{
		opts: Options{Audit: func(Record) {}},
		cfg: Config{
			Network: sandbox.Network{Default: DefaultAsk, MaxConnectionRate: 1 << 30,
				Allow: []string{"127.0.0.1:" + port(tsPort), "127.0.0.1:" + port(e.Port())}},
			Ask: func(context.Context, sandbox.NetworkRequest) (sandbox.NetworkAnswer, error) {
				return sandbox.NetworkAnswer{Allow: true, By: "user"}, nil
			},
		},
	})
	b.Run("http", func(b *testing.B) {
		c := benchClient(h.addr, true)
		u := "http://ask.test:" + port(tsPort) + "/"
		for b.Loop() {
			benchGet(b, c, u)
		}
	})
	b.Run("connect", func(b *testing.B) {
		authority := "ask.test:" + port(e.Port())
		buf := make([]byte, 64)
		req := "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
		for b.Loop() {
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.WriteString(c, req); err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			_ = resp.Body.Close() // a CONNECT answer has no body; the tunnel follows
			if _, err := c.Write([]byte("x")); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(br, buf[:1]); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}
