// Package egress is agentbox's egress proxy: the only way out of a sandbox
// whose network mode is "proxy". Every connection a sandboxed process opens
// to 127.0.0.1:3128 arrives here (through the runtime's
// sandbox.EgressSandbox listener), speaking HTTP (a forward-proxy request, a
// CONNECT, or a request on a route) or SOCKS5, and is decided by the
// sandbox's network policy before anything leaves:
//
//   - names are checked against the always-denied metadata names and the
//     policy's deny and allow rules before any DNS query;
//   - a destination no rule settles is denied, or (default "ask") raises a
//     per-connection approval through an Asker — an approval is good for
//     that one connection and is never remembered;
//   - the proxy resolves names itself and checks every resolved address,
//     like every address literal (in any encoding), against the cloud
//     metadata addresses (never reachable) and the internal ranges
//     (loopback, private, link-local...: reachable only where the
//     operator's global policy names them), and dials only an address it
//     checked;
//   - routes ("/llm/<name>/...") forward a sandboxed agent's model API
//     calls to their upstream over TLS and add the real API key there, and
//     secrets bound to a host are added to plain-HTTP requests for it and,
//     for secrets that opt in, to HTTPS requests inside tunnels the proxy
//     terminates with the sandbox's own CA (intercept.go), so credentials
//     never enter the sandbox;
//   - every connection is admitted first against the sandbox's and the
//     daemon's connection bounds (limit.go), before any work is done for
//     it;
//   - every decision is audited (Options.Audit), counted, and each denial
//     becomes a sandbox.Violation with a reason the client reads in the
//     403 body or the SOCKS5 reply.
//
// A Server holds what gates share (resolver, dialer, TLS roots, metrics);
// a Gate is one sandbox's proxy. A provider's sandbox with no network of
// its own reaches the host's gate for it through Forward, which carries
// the connections to the proxy's address inside, unread, over a Dialer
// (a unix socket the provider carries out of the sandbox).
package egress

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metric "github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// Defaults for the zero values of Options and Config.
const (
	DefaultDialTimeout      = 10 * time.Second
	DefaultAskTimeout       = time.Minute
	DefaultHandshakeTimeout = 30 * time.Second
	// RoutePrefix starts the path of every route request.
	RoutePrefix = "/llm/"
)

// Resolver looks names up; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure a Server.
type Options struct {
	// Resolver resolves the names the policy allows (default: the hosts
	// file, then DNS for the absolute name, so the host's search domains
	// never apply). "localhost" and names under .localhost are loopback
	// without a lookup (RFC 6761); other single-label names are refused.
	Resolver Resolver
	// DialTimeout bounds each upstream connect (default 10 s).
	DialTimeout time.Duration
	// HandshakeTimeout bounds reading a client's SOCKS5 handshake or first
	// request line (default 30 s).
	HandshakeTimeout time.Duration
	// RootCAs verifies routes' TLS upstreams (nil: the host's roots).
	RootCAs *x509.CertPool
	// Secrets finds the secrets a sandbox's policy names (nil: none).
	Secrets SecretSource
	// Audit gets one record per decision and per secret use. It must not
	// block, and it never sees a secret's value.
	Audit func(Record)
	// Closed, when set, is told when a gate is closed (its scope and id):
	// nothing more of that sandbox reaches Audit.
	Closed func(scope, id string)
	// MaxConnections bounds the client connections open through every
	// gate together (default DefaultServerMaxConnections; see
	// MaxConnectionsFor): past it a connection is refused like one past
	// its sandbox's own bound.
	MaxConnections int
	// Registerer, when set, gets the proxy's metrics.
	Registerer metric.Registerer
	Log        *slog.Logger
}

// Record is one audited decision or secret use.
type Record struct {
	Time time.Time
	// Scope and ID name the sandbox's owner (a session, exec or process).
	Scope, ID string
	// Type is "egress" (a connection or request decided) or "secret" (a
	// secret added to a request).
	Type string
	// Decision is "allow" or "deny"; By is "policy", "user", "timeout" or
	// "daemon".
	Decision, By string
	// Via is "http", "connect", "socks5" or "route".
	Via  string
	Host string
	Port int
	// Addr is the address dialled (allow) or refused (deny), when known.
	Addr string
	// Rule is what decided (e.g. "allow:*.github.com",
	// "always-deny:loopback"); Reason is the denial's sentence.
	Rule, Reason string
	// Route is the route's name; Secret a secret's name (never its value).
	Route, Secret string
	Process       *sandbox.Peer
	// Outcome is how an allowed HTTP request the proxy carried itself
	// (a route, plain HTTP, an intercepted host) ended: "completed",
	// "failed" (the upstream could not be reached; Reason says why) or
	// "aborted" (the client went away before the answer was carried: the
	// agent was killed or its sandbox closed mid-request). Every request
	// the proxy started gets its record, whichever way it ended.
	Outcome string
}

// Outcomes of a carried request (Record.Outcome).
const (
	OutcomeCompleted = "completed"
	OutcomeFailed    = "failed"
	OutcomeAborted   = "aborted"
)

// Server holds what every sandbox's gate shares. It is safe for concurrent
// use.
type Server struct {
	opts    Options
	metrics *metrics
	// conns counts the client connections of every gate.
	conns serverConns
	// routeTransport carries route requests to their (trusted) upstreams.
	routeTransport *http.Transport
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Resolver == nil {
		opts.Resolver = newSystemResolver()
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultServerMaxConnections
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, metrics: m}
	s.conns.max = int64(opts.MaxConnections)
	d := &net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}
	s.routeTransport = &http.Transport{
		DialContext:     d.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: opts.RootCAs, MinVersion: tls.VersionTLS12},
		// HTTP/2 where the build has it; scripts/build leaves it out
		// (nethttpomithttp2) and routes speak HTTP/1.1.
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   16,
		MaxIdleConns:          64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   opts.DialTimeout,
		ExpectContinueTimeout: time.Second,
		// Agents' requests carry their own encodings; the proxy passes
		// bodies through untouched.
		DisableCompression: true,
	}
	return s, nil
}

// Close releases the connections routes keep to their upstreams.
func (s *Server) Close() { s.routeTransport.CloseIdleConnections() }

// Route forwards a sandboxed agent's requests for one model API: a request
// to http://127.0.0.1:<port>/llm/<Name>/<path> inside the sandbox goes to
// Upstream/<path>, with Secret added. The upstream is the daemon's (or the
// session creator's) choice, not the sandbox's, so the sandbox's network
// policy does not apply to it; every request is audited.
type Route struct {
	Name     string
	Upstream *url.URL
	// Credentials are the credentials the route's client may send: each
	// one's value takes the place of its placeholder (Placeholder(Name))
	// only in its own Header, and only where that header's value is
	// exactly Format around the placeholder; the client picks which it
	// sends, as it would without the proxy. Several entries may share a
	// Name to accept it in several headers. Host is not consulted: the
	// route is bound to Upstream.
	Credentials []Secret
}

// Config is one sandbox's gate.
type Config struct {
	// Scope and ID name the owner in audit records ("session", "ses_…").
	Scope, ID string
	// Network is the sandbox's network: Default, Allow, Deny and Secrets
	// are used; Mode must be "proxy".
	Network sandbox.Network
	// Ask decides destinations no rule settles when Network.Default is
	// "ask". Nil denies them ("nobody to ask").
	Ask sandbox.Asker
	// AskTimeout bounds each Ask (default DefaultAskTimeout); past it the
	// connection is denied by timeout.
	AskTimeout time.Duration
	// OnViolation gets every denial. It must not block.
	OnViolation func(sandbox.Violation)
	// Routes are the model-API routes of this sandbox.
	Routes []Route
	// CA, when set, is the sandbox's own TLS interception CA (the
	// sandbox trusts it, and nothing else does): tunnels to the hosts of
	// the sandbox's secrets that opt in (Secret.InterceptTLS) are
	// terminated with its certificates, so the secrets can be added
	// inside. Nil: every tunnel is end to end.
	CA *CA
}

// Gate is one sandbox's proxy. Create it with Server.Gate, hand it the
// sandbox's Egress listener with Serve, and Close it after the sandbox.
type Gate struct {
	s    *Server
	cfg  Config
	port int
	// secretNames are the daemon secrets this sandbox holds placeholders
	// of; each request looks their values up, so a rotated secret is
	// used at once and a deleted one is added nowhere.
	secretNames []string
	routes      map[string]Route
	// ctx ends at Close: pending asks give up and active connections end.
	ctx    context.Context
	cancel context.CancelFunc
	httpd  *http.Server
	httpLn *connListener
	// interceptTransport carries intercepted requests upstream (nil
	// without a CA).
	interceptTransport *http.Transport
	// pool carries plain-HTTP requests allowed by a rule; connections to
	// a name are reused only for later requests that the rules allow too.
	// SetAllow replaces it (under mu).
	pool *http.Transport
	// maxConns bounds conns; refused rate-limits the audit records of
	// connections refused by a bound (limit.go).
	maxConns int

	mu     sync.Mutex
	policy Policy
	conns  map[net.Conn]struct{}
	// rate bounds new connections per second (under mu).
	rate   tokenBucket
	lns    []net.Listener
	closed bool
	wg     sync.WaitGroup
}

// ErrUnknownSecret is returned (wrapped) by Gate when a sandbox's policy
// names a secret the daemon does not hold.
var ErrUnknownSecret = errors.New("unknown secret")

// Gate makes the proxy of one sandbox. It fails when the network's rules
// do not parse or it names a secret the Server's Secrets do not hold.
func (s *Server) Gate(cfg Config) (*Gate, error) {
	if cfg.Network.Mode != sandbox.NetworkProxy {
		return nil, fmt.Errorf("egress: network mode %q has no proxy", cfg.Network.Mode)
	}
	pol, err := CompilePolicy(cfg.Network.Default, cfg.Network.Allow, cfg.Network.Deny)
	if err != nil {
		return nil, err
	}
	if cfg.AskTimeout <= 0 {
		cfg.AskTimeout = DefaultAskTimeout
	}
	g := &Gate{s: s, cfg: cfg, port: cfg.Network.Port(), policy: pol, conns: map[net.Conn]struct{}{}, routes: map[string]Route{},
		maxConns: cfg.Network.ConnectionLimit(), rate: newTokenBucket(cfg.Network.ConnectionRate())}
	for _, name := range sortedValues(cfg.Network.Secrets) {
		ok := false
		if s.opts.Secrets != nil {
			_, ok = s.opts.Secrets.Secret(name)
		}
		if !ok {
			return nil, fmt.Errorf("egress: %w %q (define it with serve --secrets-file or PUT /v1/secrets/%s)", ErrUnknownSecret, name, name)
		}
		g.secretNames = append(g.secretNames, name)
	}
	for _, r := range cfg.Routes {
		if r.Name == "" || strings.ContainsAny(r.Name, "/?#%") || r.Upstream == nil ||
			(r.Upstream.Scheme != "http" && r.Upstream.Scheme != "https") || r.Upstream.Host == "" {
			return nil, fmt.Errorf("egress: route %q: needs a name and an http(s) upstream", r.Name)
		}
		if _, dup := g.routes[r.Name]; dup {
			return nil, fmt.Errorf("egress: route %q twice", r.Name)
		}
		g.routes[r.Name] = r
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.pool = g.newPool()
	if cfg.CA != nil {
		g.interceptTransport = g.newInterceptTransport()
	}
	g.httpLn = newConnListener()
	g.httpd = &http.Server{
		Handler: g,
		// Requests end with the gate: Close gives up their asks and
		// dials (a request whose body is still to come learns of its
		// connection's end no other way).
		BaseContext:       func(net.Listener) context.Context { return g.ctx },
		ReadHeaderTimeout: s.opts.HandshakeTimeout,
		IdleTimeout:       2 * time.Minute,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ErrorLog: slog.NewLogLogger(s.opts.Log.Handler(), slog.LevelDebug),
	}
	g.wg.Go(func() { _ = g.httpd.Serve(g.httpLn) })
	return g, nil
}

func sortedValues(m map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range m {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// Attach makes the gate of sb, a sandbox created with network mode proxy
// (cfg.Network), and serves its Egress listener until the listener or the
// gate closes. It fails closed when the sandbox's runtime has no proxy
// transport.
func (s *Server) Attach(sb sandbox.Sandbox, cfg Config) (*Gate, error) {
	es, ok := sb.(sandbox.EgressSandbox)
	if !ok || es.Egress() == nil {
		return nil, fmt.Errorf("%w: the %s runtime has no egress proxy transport for this sandbox", sandbox.ErrUnenforceable, sb.Info().Runtime)
	}
	g, err := s.Gate(cfg)
	if err != nil {
		return nil, err
	}
	ln := es.Egress()
	go func() { _ = g.Serve(ln) }()
	return g, nil
}

// Tasks serves the sandboxes of one-shot tasks (code execution): they
// have nobody to ask, so a destination no rule settles is denied. It has
// the shape of execution.Network.
type Tasks struct{ Server *Server }

// Attach attaches a gate for the task scope/id to sb, created from spec.
// The returned function closes the gate.
func (t Tasks) Attach(sb sandbox.Sandbox, spec sandbox.Spec, scope, id string, onViolation func(sandbox.Violation)) (func(), error) {
	g, err := t.Server.Attach(sb, Config{Scope: scope, ID: id, Network: spec.Network, OnViolation: onViolation})
	if err != nil {
		return nil, err
	}
	return func() { _ = g.Close() }, nil
}

// RouteURL is the base URL of route name inside a sandbox whose proxy
// answers on port.
func RouteURL(port int, name string) string {
	return "http://127.0.0.1:" + strconv.Itoa(port) + RoutePrefix + name
}

// ProxyURL is the proxy's address inside the sandbox.
func ProxyURL(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }

// Serve handles every connection ln yields until ln or the gate closes.
// It returns nil then.
func (g *Gate) Serve(ln net.Listener) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		_ = ln.Close()
		return nil
	}
	g.lns = append(g.lns, ln)
	g.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			if g.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("egress: accept: %w", err)
		}
		// The bounds come first: a connection past one costs nothing
		// more than its descriptor, for the moment it takes to close it.
		rule, reason, ok := g.admit(c)
		if !ok {
			_ = c.Close()
			return nil
		}
		if rule != "" {
			g.refuseConn(c, rule, reason)
			continue
		}
		go func() {
			defer g.wg.Done()
			g.handle(c)
		}()
	}
}

// enter counts an HTTP request in wg, so that Close waits for it and no
// audit record or violation follows Close; false once closed.
func (g *Gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

func (g *Gate) untrack(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.conns[c]; ok {
		delete(g.conns, c)
		g.s.metrics.active.Dec()
		g.s.conns.release()
	}
}

// Close stops the gate: its listeners and every connection through it
// close, and pending approvals are given up (denied by the daemon). It is
// safe to call twice.
func (g *Gate) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	lns := g.lns
	conns := make([]net.Conn, 0, len(g.conns))
	for c := range g.conns {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	g.cancel()
	for _, ln := range lns {
		_ = ln.Close()
	}
	_ = g.httpLn.Close()
	_ = g.httpd.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	g.wg.Wait()
	g.currentPool().CloseIdleConnections()
	if g.interceptTransport != nil {
		g.interceptTransport.CloseIdleConnections()
	}
	if g.s.opts.Closed != nil {
		g.s.opts.Closed(g.cfg.Scope, g.cfg.ID)
	}
	return nil
}

// newPool makes the transport of plain-HTTP requests a rule allowed.
func (g *Gate) newPool() *http.Transport {
	return &http.Transport{
		DialContext:         g.dialChecked,
		MaxIdleConnsPerHost: 8,
		// Idle upstream connections hold descriptors too.
		MaxIdleConns:       32,
		IdleConnTimeout:    60 * time.Second,
		DisableCompression: true,
		// Absolute-URI requests for https are refused; nothing here
		// speaks TLS to an upstream on the sandbox's behalf.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// currentPool returns the pool of the rules in force.
func (g *Gate) currentPool() *http.Transport {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pool
}

// SetAllow replaces the allow rules (the deny rules and the default stay).
// Connections already open stay open; every later connection and request
// is decided by the new rules.
func (g *Gate) SetAllow(allow []string) error {
	rules, err := parseRules(allow)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.policy.Allow = rules
	// A new pool: a pooled connection's address is not checked again,
	// and one in use now would go back to the old pool when its request
	// ends, to carry a later request the new rules may refuse.
	old := g.pool
	g.pool = g.newPool()
	g.mu.Unlock()
	old.CloseIdleConnections()
	return nil
}

// currentPolicy returns the rules in force.
func (g *Gate) currentPolicy() Policy {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.policy
}

// connKey finds the client connection of an HTTP request.
type connKey struct{}

// peerOf looks up the process behind c, when its runtime can tell. What
// the runtime reports is the sandbox's word: it is sanitised here again,
// whichever runtime built it, before any event, audit record or ask.
func peerOf(c net.Conn) *sandbox.Peer {
	for c != nil {
		if pc, ok := c.(sandbox.PeerConn); ok {
			if p, ok := pc.Peer(); ok && !p.IsZero() {
				p = p.Sanitized()
				return &p
			}
			return nil
		}
		u, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			return nil
		}
		c = u.Unwrap()
	}
	return nil
}

// request is one decision in the making: a connection (CONNECT, SOCKS5)
// or a plain-HTTP request.
type request struct {
	via    string
	target Target
	client net.Conn
	// outcome is how a carried request ended (Record.Outcome), once it has.
	outcome string
}

// decision is the settled outcome of a request.
type decision struct {
	allow  bool
	by     string // policy | user | timeout | daemon
	rule   string
	reason string
	// oneShot: allowed by an approval, good for this connection only.
	oneShot bool
	process *sandbox.Peer
}

// decide settles r: by the rules, or by asking. It audits and reports a
// denial; an allowed request still has its addresses checked when dialled.
func (g *Gate) decide(ctx context.Context, r request) decision {
	pol := g.currentPolicy()
	o := pol.decide(r.target)
	d := decision{allow: o.verdict == verdictAllow, by: "policy", rule: o.rule, reason: o.reason}
	if o.verdict == verdictAsk {
		d = g.ask(ctx, r)
	}
	if d.allow {
		// Counted once dialled (allowed) or failed upstream: the
		// address gate may still deny it.
		return d
	}
	g.deny(r, d, "")
	return d
}

// ask raises a per-connection approval and waits for it, at most
// AskTimeout.
func (g *Gate) ask(ctx context.Context, r request) decision {
	peer := peerOf(r.client)
	d := decision{by: "daemon", rule: "ask", process: peer, oneShot: true}
	if g.cfg.Ask == nil {
		d.reason = fmt.Sprintf("%s is not in the sandbox's network allow list, and there is nobody to ask", r.target)
		return d
	}
	// The Asker enforces the timeout itself (and says "timeout"); the
	// deadline here only guards against one that does not.
	ctx, cancel := context.WithTimeout(ctx, g.cfg.AskTimeout+5*time.Second)
	defer cancel()
	req := sandbox.NetworkRequest{Host: r.target.HostString(), Port: int(r.target.Port), Via: r.via, Timeout: g.cfg.AskTimeout}
	if peer != nil {
		req.Peer = *peer
	}
	start := time.Now()
	type answer struct {
		ans sandbox.NetworkAnswer
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		ans, err := g.cfg.Ask(ctx, req)
		answered <- answer{ans, err}
	}()
	var ans sandbox.NetworkAnswer
	var err error
	select {
	case a := <-answered:
		ans, err = a.ans, a.err
	case <-ctx.Done():
		// An Asker that ignores its context holds neither the
		// connection nor Close.
		err = ctx.Err()
	}
	g.s.metrics.askSeconds.Observe(time.Since(start).Seconds())
	switch {
	case err != nil && ctx.Err() == context.DeadlineExceeded && g.ctx.Err() == nil:
		d.by, d.reason = "timeout", fmt.Sprintf("nobody approved the connection to %s within %s", r.target, g.cfg.AskTimeout)
	case err != nil:
		d.reason = fmt.Sprintf("the approval of the connection to %s was given up: %v", r.target, err)
	case ans.Allow:
		d.allow, d.by = true, orDefault(ans.By, "user")
		d.rule = "ask:allowed-once"
	default:
		d.by = orDefault(ans.By, "user")
		d.reason = fmt.Sprintf("the connection to %s was denied", r.target)
		if d.by == "timeout" {
			d.reason = fmt.Sprintf("nobody approved the connection to %s in time", r.target)
		}
		if ans.Message != "" {
			d.reason += ": " + ans.Message
		}
	}
	return d
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// deny records a refused request: audit, metric and violation. addr is the
// refused address when the refusal came from the address gate.
func (g *Gate) deny(r request, d decision, addr string) {
	g.s.metrics.decisions.WithLabelValues(r.via, "deny", d.by).Inc()
	if d.process == nil {
		d.process = peerOf(r.client)
	}
	g.audit(Record{Type: "egress", Decision: "deny", By: d.by, Via: r.via, Host: r.target.HostString(),
		Port: int(r.target.Port), Addr: addr, Rule: d.rule, Reason: d.reason, Process: d.process})
	if g.cfg.OnViolation != nil {
		action := "blocked"
		if strings.HasPrefix(d.rule, "ask") {
			action = "asked"
		}
		g.cfg.OnViolation(sandbox.Violation{
			Kind: sandbox.ViolationNetwork, Detail: d.reason, Target: r.target.String(),
			Host: r.target.HostString(), Port: int(r.target.Port), Process: d.process,
			Rule: d.rule, Action: action,
		})
	}
}

// allowed audits an allowed connection once its address is known.
func (g *Gate) allowed(r request, d decision, addr string) {
	g.s.metrics.decisions.WithLabelValues(r.via, "allow", d.by).Inc()
	g.audit(Record{Type: "egress", Decision: "allow", By: d.by, Via: r.via, Host: r.target.HostString(),
		Port: int(r.target.Port), Addr: addr, Rule: d.rule, Process: d.process, Outcome: r.outcome})
}

func (g *Gate) audit(rec Record) {
	if g.s.opts.Audit == nil {
		return
	}
	rec.Time, rec.Scope, rec.ID = time.Now().UTC(), g.cfg.Scope, g.cfg.ID
	g.s.opts.Audit(rec)
}

// denied is the error of a dial the address gate refused.
type denied struct {
	rule, reason, addr string
}

func (e *denied) Error() string { return e.reason }

// resolve returns the addresses to try for t, each checked: an address
// literal as it is, a name resolved by the proxy. A name with no
// acceptable address fails with *denied.
func (g *Gate) resolve(ctx context.Context, t Target) ([]netip.Addr, error) {
	pol := g.currentPolicy()
	if !t.IsName() {
		if o := pol.checkAddr(t.Addr, t.Port); o.verdict == verdictDeny {
			return nil, &denied{o.rule, o.reason, t.Addr.String()}
		}
		return []netip.Addr{t.Addr}, nil
	}
	addrs, err := lookup(ctx, g.s.opts.Resolver, t.Host)
	if err != nil {
		return nil, err
	}
	var ok []netip.Addr
	var first *denied
	for _, a := range addrs {
		a = a.Unmap()
		if o := pol.checkAddr(a, t.Port); o.verdict == verdictDeny {
			if first == nil {
				first = &denied{o.rule, fmt.Sprintf("%s resolves to %s, which is refused: %s", t.Host, a, o.reason), a.String()}
			}
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		if first != nil {
			return nil, first
		}
		return nil, fmt.Errorf("cannot resolve %s: no addresses", t.Host)
	}
	return ok, nil
}

// secrets returns the current values of the sandbox's secrets; one
// deleted since the gate was made is left out.
func (g *Gate) secrets() []Secret {
	if len(g.secretNames) == 0 || g.s.opts.Secrets == nil {
		return nil
	}
	out := make([]Secret, 0, len(g.secretNames))
	for _, name := range g.secretNames {
		if sec, ok := g.s.opts.Secrets.Secret(name); ok {
			out = append(out, sec)
		}
	}
	return out
}

// loopbackAddrs are what "localhost" is.
var loopbackAddrs = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}

// lookup resolves a host name for the proxy.
func lookup(ctx context.Context, r Resolver, host string) ([]netip.Addr, error) {
	switch {
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return loopbackAddrs, nil
	case !strings.Contains(host, "."):
		return nil, fmt.Errorf("cannot resolve %s: single-label names are not looked up (the host would complete them with its search domains); use the fully qualified name", host)
	}
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("cannot resolve %s: %w", host, err)
	}
	return addrs, nil
}

// dialChecked connects to t (a "host:port" string, as http.Transport
// dials) through resolve; the dialer's Control hook checks the address
// once more just before connect(2), so nothing but a checked address is
// ever reached.
func (g *Gate) dialChecked(ctx context.Context, network, hostport string) (net.Conn, error) {
	t, err := ParseTarget(hostport, 0)
	if err != nil {
		return nil, err
	}
	c, _, err := g.dialTarget(ctx, t)
	return c, err
}

// dialTarget connects to t and returns the connection and the address.
func (g *Gate) dialTarget(ctx context.Context, t Target) (net.Conn, netip.Addr, error) {
	addrs, err := g.resolve(ctx, t)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	pol := g.currentPolicy()
	d := net.Dialer{
		Timeout:   g.s.opts.DialTimeout,
		KeepAlive: 30 * time.Second,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("egress: dial %s: %w", address, err)
			}
			if o := pol.checkAddr(ap.Addr(), ap.Port()); o.verdict == verdictDeny {
				return &denied{o.rule, o.reason, ap.Addr().String()}
			}
			return nil
		},
	}
	var errs []error
	for _, a := range addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, t.Port).String())
		if err == nil {
			return c, a, nil
		}
		var den *denied
		if errors.As(err, &den) {
			return nil, a, den
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("cannot connect to %s: %w", t, errors.Join(errs...))
}
