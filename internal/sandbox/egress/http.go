package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ServeHTTP implements http.Handler for the sandbox's HTTP proxy traffic:
// CONNECT tunnels, absolute-URI (forward proxy) requests, and requests on
// routes (origin-form, "/llm/<name>/...").
func (g *Gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.enter() {
		g.refuse(w, http.StatusServiceUnavailable, "agentbox egress proxy: the sandbox's proxy is closed")
		return
	}
	defer g.wg.Done()
	client, _ := r.Context().Value(connKey{}).(net.Conn)
	switch {
	case r.Method == http.MethodConnect:
		g.serveConnect(w, r, client)
	case strings.HasPrefix(r.RequestURI, RoutePrefix):
		g.serveRoute(w, r)
	default:
		t, err := ForwardTarget(r.Method, r.RequestURI)
		if err != nil {
			g.refuse(w, http.StatusBadRequest, err.Error())
			return
		}
		if g.isSelf(t) && strings.HasPrefix(r.URL.Path, RoutePrefix) {
			// A client that sends even its requests for the proxy's own
			// address through the proxy (it ignores NO_PROXY): the
			// route is what it means.
			g.serveRoute(w, r)
			return
		}
		g.serveForward(w, r, client, t)
	}
}

// isSelf reports whether t is the proxy's own address inside the sandbox.
func (g *Gate) isSelf(t Target) bool {
	if int(t.Port) != g.port {
		return false
	}
	if t.IsName() {
		return t.Host == "localhost"
	}
	return t.Addr.IsLoopback()
}

// ForwardTarget parses the request target of a forward-proxy request
// (absolute-URI form, "GET http://host[:port]/path"): only plain http is
// forwarded, since https goes through CONNECT. The Host header plays no
// part: the policy is decided on the URI's host, and that is where the
// request goes (with a Host header to match).
func ForwardTarget(method, requestURI string) (Target, error) {
	if method == http.MethodConnect {
		return Target{}, errors.New("CONNECT has no URI")
	}
	u, err := url.ParseRequestURI(requestURI)
	if err != nil {
		return Target{}, fmt.Errorf("agentbox egress proxy: bad request target: %w", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
	case "":
		return Target{}, errors.New("agentbox egress proxy: this is a proxy: send absolute URIs (set HTTP_PROXY), or use a route under " + RoutePrefix)
	case "https":
		return Target{}, errors.New("agentbox egress proxy: https goes through CONNECT (set HTTPS_PROXY), not as an absolute URI")
	default:
		return Target{}, fmt.Errorf("agentbox egress proxy: scheme %q is not proxied", u.Scheme)
	}
	if u.Host == "" {
		return Target{}, errors.New("agentbox egress proxy: the URI has no host")
	}
	return ParseTarget(u.Host, 80)
}

// ConnectTarget parses a CONNECT request's authority ("host:port"; the port
// is required).
func ConnectTarget(authority string) (Target, error) {
	if authority == "" {
		return Target{}, errors.New("agentbox egress proxy: CONNECT without host:port")
	}
	return ParseTarget(authority, 0)
}

// refuse answers a request the proxy will not carry, with the reason in
// the body and in X-Agentbox-Denied.
func (g *Gate) refuse(w http.ResponseWriter, status int, reason string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Agentbox-Denied", headerSafe(reason))
	h.Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = fmt.Fprintln(w, reason)
}

// denyMessage is what a client reads about a denial.
func denyMessage(t Target, reason string) string {
	return fmt.Sprintf("agentbox: the sandbox's network policy refused %s: %s", t, reason)
}

func headerSafe(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	return clip(s, 512)
}

// serveConnect opens a tunnel after the decision and the address check.
func (g *Gate) serveConnect(w http.ResponseWriter, r *http.Request, client net.Conn) {
	t, err := ConnectTarget(r.RequestURI)
	if err != nil {
		g.refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	req := request{via: "connect", target: t, client: client}
	d := g.decide(r.Context(), req)
	if !d.allow {
		g.refuse(w, http.StatusForbidden, denyMessage(t, d.reason))
		return
	}
	if g.intercepts(t) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			g.refuse(w, http.StatusInternalServerError, "agentbox egress proxy: cannot take over the connection")
			return
		}
		conn, rw, err := hj.Hijack()
		if err != nil {
			return
		}
		if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
			_ = conn.Close()
			return
		}
		// A TLS hello sent eagerly was read ahead into rw.
		g.intercept(bufferedConn(conn, rw.Reader), req, d)
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.s.opts.DialTimeout+5*time.Second)
	up, addr, err := g.dialTarget(ctx, t)
	cancel()
	if err != nil {
		g.dialFailed(w, req, d, err)
		return
	}
	g.allowed(req, d, addr.String())
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		g.refuse(w, http.StatusInternalServerError, "agentbox egress proxy: cannot take over the connection")
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		_ = conn.Close()
		_ = up.Close()
		return
	}
	// Bytes the client sent after the request (an eager TLS hello) were
	// read ahead into rw: they go first.
	if n := rw.Reader.Buffered(); n > 0 {
		b, _ := rw.Peek(n)
		if _, err := up.Write(b); err != nil {
			_ = conn.Close()
			_ = up.Close()
			return
		}
	}
	splice(g.ctx, conn, up)
}

// dialFailed answers a request whose dial failed: a refusal by the
// address gate is a denial (403, violation, audit); anything else is the
// upstream's failure (502).
func (g *Gate) dialFailed(w http.ResponseWriter, req request, d decision, err error) {
	var den *denied
	if errors.As(err, &den) {
		d.allow, d.rule, d.reason = false, den.rule, den.reason
		// An approval never lifts the address checks: the policy
		// decided.
		d.by = "policy"
		g.deny(req, d, den.addr)
		g.refuse(w, http.StatusForbidden, denyMessage(req.target, den.reason))
		return
	}
	// Allowed, and failed upstream.
	g.s.metrics.decisions.WithLabelValues(req.via, "allow", d.by).Inc()
	g.refuse(w, http.StatusBadGateway, fmt.Sprintf("agentbox egress proxy: %v", err))
}

// hopHeaders are hop-by-hop headers (RFC 9110 §7.6.1) and the proxy's own,
// none of which go upstream.
var hopHeaders = []string{"Proxy-Authorization", "Proxy-Connection", "Proxy-Authenticate"}

// serveForward carries one plain-HTTP request after the decision: through
// the gate's pool when a rule allowed it, on a connection of its own when
// an approval did (that connection is the one the approval was for).
func (g *Gate) serveForward(w http.ResponseWriter, r *http.Request, client net.Conn, t Target) {
	req := request{via: "http", target: t, client: client}
	d := g.decide(r.Context(), req)
	if !d.allow {
		g.refuse(w, http.StatusForbidden, denyMessage(t, d.reason))
		return
	}
	var addr string
	pool := g.currentPool()
	transport := http.RoundTripper(pool)
	if d.oneShot {
		transport = &http.Transport{
			DialContext:        g.dialChecked,
			DisableKeepAlives:  true,
			DisableCompression: true,
		}
	}
	target := &url.URL{Scheme: "http", Host: t.String(), Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { addr = hostOf(info.Conn.RemoteAddr()) }}
	forward(w, r, target, transport, trace,
		func(h http.Header) []string { return inject(h, t.HostString(), g.secrets()) },
		func(w http.ResponseWriter, err error) { g.dialFailed(w, req, d, err) },
		func(used []string, err error) {
			if pool != g.currentPool() {
				// The rules changed meanwhile: the connection is not kept
				// in a pool that nothing uses any more.
				pool.CloseIdleConnections()
			}
			if err == nil || errors.Is(err, errAborted) {
				req.outcome = outcomeOf(err)
				g.allowed(req, d, addr)
				g.secretsUsed(req, used)
			}
		})
}

// errAborted is the end of a carried request whose client went away
// before the answer was carried (the agent was killed, its sandbox
// closed).
var errAborted = errors.New("the client went away before the answer was carried")

// outcomeOf is Record.Outcome of a carried request that ended with err.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return OutcomeCompleted
	case errors.Is(err, errAborted):
		return OutcomeAborted
	}
	return OutcomeFailed
}

// forward proxies r to target over transport and answers w: the request
// goes to target's URL with target's host (never a Host header the
// sandbox sent), without the hop-by-hop proxy headers, with the
// credentials creds adds (it returns their names); failed answers a
// request that could not be carried. trace, when set, follows the
// upstream connection. end is the one place every carried request is
// accounted for: it is called once, however the request ended, with the
// names of the credentials sent (none when it failed) and the failure:
// errAborted when the client went away first, also when ReverseProxy
// aborts the handler (panics with http.ErrAbortHandler) because the
// client stopped reading mid-answer, which would otherwise skip the audit.
func forward(w http.ResponseWriter, r *http.Request, target *url.URL, transport http.RoundTripper, trace *httptrace.ClientTrace,
	creds func(http.Header) []string, failed func(http.ResponseWriter, error), end func(used []string, err error)) {
	var used, added []string
	var err error
	carried := false
	// whole: the upstream's answer was read to its end while the client
	// was still there; past that point a client that closes (it has the
	// answer: a Content-Length tells it so before the proxy reads EOF)
	// does not make the request aborted.
	var whole atomic.Bool
	defer func() {
		// The request's context ends before the handler returns only when
		// the client went away (or the sandbox closed): unless the answer
		// had been read whole before that (whole), it was not carried
		// whole, whatever ReverseProxy made of it. (It can return normally
		// then: when the upstream, cancelled in turn, ends its body cleanly
		// before the proxy sees the cancellation; the race made
		// TestAbortedRequestsAudited fail 1 run in 15.)
		if !carried || (r.Context().Err() != nil && !whole.Load()) {
			// The credentials went upstream with the request.
			used, err = added, fmt.Errorf("%w (%w)", errAborted, cmp.Or(err, context.Cause(r.Context()), errors.New("handler aborted")))
		}
		end(used, err)
	}()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = target
			pr.Out.Host = ""
			pr.Out.RequestURI = ""
			if trace != nil {
				pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), trace))
			}
			for _, h := range hopHeaders {
				pr.Out.Header.Del(h)
			}
			added = creds(pr.Out.Header)
			used = added
		},
		Transport:     transport,
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			res.Body = &endWatch{ReadCloser: res.Body, left: res.ContentLength, ctx: r.Context(), whole: &whole}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, e error) {
			used, err = nil, e
			failed(w, e)
		},
	}
	// Full duplex: an upstream may answer, and the answer's headers be
	// flushed, before the transport has read the request body's end. An
	// HTTP/1 server otherwise reads the rest of that body itself on the
	// first flush and closes it, so the transport's last read fails and
	// it closes the upstream connection under the answer: the agent's
	// model stream was cut (TestAnswerBeforeBodyEOF).
	_ = http.NewResponseController(w).EnableFullDuplex() // HTTP/1 only; an error means there is nothing to enable
	rp.ServeHTTP(w, r)
	carried = true
}

// secretsUsed audits and counts the secrets added to a request.
func (g *Gate) secretsUsed(req request, names []string) {
	for _, n := range names {
		g.s.metrics.secrets.WithLabelValues(n).Inc()
		g.audit(Record{Type: "secret", Decision: "allow", By: "policy", Via: req.via, Host: req.target.HostString(),
			Port: int(req.target.Port), Secret: n})
	}
}

// serveRoute forwards a request on a route to its upstream, with the
// route's secret added.
func (g *Gate) serveRoute(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), RoutePrefix)
	name, sub, _ := strings.Cut(rest, "/")
	refused := func(status int, reason string) {
		g.s.metrics.decisions.WithLabelValues("route", "deny", "policy").Inc()
		g.audit(Record{Type: "egress", Decision: "deny", By: "policy", Via: "route", Route: name, Rule: "route", Reason: reason})
		g.refuse(w, status, "agentbox egress proxy: "+reason)
	}
	rt, ok := g.routes[name]
	if !ok {
		refused(http.StatusNotFound, fmt.Sprintf("no route %q in this sandbox", clip(name, 64)))
		return
	}
	for _, seg := range strings.Split(sub, "/") {
		if u, err := url.PathUnescape(seg); err != nil || u == "." || u == ".." || strings.ContainsAny(u, "/\\") && seg != u {
			refused(http.StatusBadRequest, "the path of route "+name+" may not climb out of it")
			return
		}
	}
	up := rt.Upstream
	port := up.Port()
	if port == "" {
		port = "80"
		if up.Scheme == "https" {
			port = "443"
		}
	}
	pn, _ := strconv.Atoi(port)
	req := request{via: "route", target: Target{Host: up.Hostname(), Port: uint16(pn)}}
	if a, err := netip.ParseAddr(up.Hostname()); err == nil {
		req.target = Target{Addr: a.Unmap(), Port: uint16(pn)}
	}
	base := strings.TrimSuffix(up.EscapedPath(), "/")
	target := *up
	target.Path, target.RawPath = "", ""
	if p, err := url.PathUnescape(base + "/" + sub); err == nil {
		target.Path = p
		target.RawPath = base + "/" + sub
	}
	target.RawQuery = r.URL.RawQuery
	forward(w, r, &target, g.s.routeTransport, nil,
		func(h http.Header) []string {
			used := substitute(h, rt.Credentials)
			// The daemon secrets the sandbox holds placeholders of
			// (env.secrets) that are bound to the upstream's host go
			// with the request as on any other to that host: a model key
			// may be declared that way too.
			return append(used, inject(h, strings.ToLower(up.Hostname()), g.secrets())...)
		},
		func(w http.ResponseWriter, err error) {
			g.refuse(w, http.StatusBadGateway, fmt.Sprintf("agentbox egress proxy: route %s: %v", name, err))
		},
		func(used []string, err error) {
			g.s.metrics.decisions.WithLabelValues("route", "allow", "policy").Inc()
			g.audit(Record{Type: "egress", Decision: "allow", By: "policy", Via: "route", Route: name,
				Host: req.target.HostString(), Port: int(req.target.Port), Rule: "route:" + name, Reason: errString(err), Outcome: outcomeOf(err)})
			g.secretsUsed(req, used)
		})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// hostOf is the address part of a connection's remote address.
func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	return a.String()
}

// endWatch is an upstream answer's body that notes when it was read to
// its end (its Content-Length, or EOF) while ctx, the client's request,
// was still live.
type endWatch struct {
	io.ReadCloser
	left  int64 // bytes still to come; -1: unknown
	ctx   context.Context
	whole *atomic.Bool
}

func (b *endWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.left >= 0 {
		b.left -= int64(n)
	}
	if (b.left == 0 || errors.Is(err, io.EOF)) && b.ctx.Err() == nil {
		b.whole.Store(true)
	}
	return n, err
}
