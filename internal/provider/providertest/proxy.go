package providertest

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/provider"
)

// cutProxy is a TCP proxy between the host daemon and a sandbox's inner
// daemon that the suite can sever: Cut closes every connection through it
// (new ones are accepted again at once, as after a network blip).
type cutProxy struct {
	ln       net.Listener
	upstream func(ctx context.Context) (net.Conn, error)
	mu       sync.Mutex
	conns    map[net.Conn]bool
	cuts     int
}

// newCutProxy proxies to address, as client.New takes it (http://host:port
// or unix:///path).
func newCutProxy(address string) (*cutProxy, error) {
	var network, addr string
	switch {
	case strings.HasPrefix(address, "http://"):
		network, addr = "tcp", strings.TrimSuffix(strings.TrimPrefix(address, "http://"), "/")
	case strings.HasPrefix(address, "unix://"):
		network, addr = "unix", strings.TrimPrefix(address, "unix://")
	default:
		return nil, errors.New("providertest: cannot proxy " + address)
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, conns: map[net.Conn]bool{}, upstream: func(ctx context.Context) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	go p.serve()
	return p, nil
}

func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.pipe(c)
	}
}

func (p *cutProxy) pipe(c net.Conn) {
	u, err := p.upstream(context.Background())
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = u.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// Cut severs every open connection and returns how many there were.
func (p *cutProxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		_ = c.Close()
		n++
	}
	p.cuts++
	return n / 2
}

func (p *cutProxy) Close() {
	_ = p.ln.Close()
	p.Cut()
}

// cutting is the provider under test with a cutProxy in front of each
// sandbox's inner daemon: the host daemon reaches sandboxes through it.
type cutting struct {
	provider.Provider
	mu      sync.Mutex
	proxies map[string]*cutProxy
}

func newCutting(p provider.Provider) *cutting {
	return &cutting{Provider: p, proxies: map[string]*cutProxy{}}
}

func (c *cutting) front(sb provider.Sandbox) (provider.Sandbox, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.proxies[sb.ID]; old != nil {
		old.Close()
	}
	px, err := newCutProxy(sb.Address)
	if err != nil {
		return provider.Sandbox{}, err
	}
	c.proxies[sb.ID] = px
	sb.Address = px.URL()
	return sb, nil
}

func (c *cutting) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	sb, err := c.Provider.Create(ctx, spec)
	if err != nil {
		return sb, err
	}
	return c.front(sb)
}

func (c *cutting) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	sb, err := c.Provider.Connect(ctx, id, token)
	if err != nil {
		return sb, err
	}
	c.mu.Lock()
	px := c.proxies[id]
	c.mu.Unlock()
	if px != nil {
		sb.Address = px.URL()
		return sb, nil
	}
	return c.front(sb)
}

func (c *cutting) Destroy(ctx context.Context, id string) error {
	c.mu.Lock()
	if px := c.proxies[id]; px != nil {
		px.Close()
		delete(c.proxies, id)
	}
	c.mu.Unlock()
	return c.Provider.Destroy(ctx, id)
}

// List passes the provider's Lister through (nothing when it has none).
func (c *cutting) List(ctx context.Context, owner string) ([]string, error) {
	if l, ok := c.Provider.(provider.Lister); ok {
		return l.List(ctx, owner)
	}
	return nil, nil
}

// proxy returns the proxy in front of sandbox id.
func (c *cutting) proxy(id string) *cutProxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proxies[id]
}

func (c *cutting) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, px := range c.proxies {
		px.Close()
	}
}

// wrapped is the cutting provider as the host daemon is given it: with
// the provider's Pauser and Snapshotter passed through when it has them
// (a sandbox they give back is fronted by a proxy too), so the relay
// sees the abilities the provider has, and no others.
func (c *cutting) wrapped() provider.Provider {
	_, pz := c.Provider.(provider.Pauser)
	_, sn := c.Provider.(provider.Snapshotter)
	switch {
	case pz && sn:
		return cutBoth{cutPause{c}, cutSnap{c}}
	case pz:
		return cutPause{c}
	case sn:
		return cutSnap{c}
	}
	return c
}

type cutPause struct{ *cutting }

func (c cutPause) Pause(ctx context.Context, id string) error {
	return c.Provider.(provider.Pauser).Pause(ctx, id)
}

func (c cutPause) Resume(ctx context.Context, id, token string) (provider.Sandbox, error) {
	sb, err := c.Provider.(provider.Pauser).Resume(ctx, id, token)
	if err != nil {
		return sb, err
	}
	return c.front(sb)
}

type cutSnap struct{ *cutting }

func (c cutSnap) Snapshot(ctx context.Context, id string) (string, error) {
	return c.Provider.(provider.Snapshotter).Snapshot(ctx, id)
}

func (c cutSnap) CreateFrom(ctx context.Context, snapshotID string, spec provider.Spec) (provider.Sandbox, error) {
	sb, err := c.Provider.(provider.Snapshotter).CreateFrom(ctx, snapshotID, spec)
	if err != nil {
		return sb, err
	}
	return c.front(sb)
}

func (c cutSnap) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	return c.Provider.(provider.Snapshotter).DeleteSnapshot(ctx, snapshotID)
}

// cutBoth has both (the embedded *cutting's methods are reached through
// cutPause; cutSnap's copy of them is shadowed).
type cutBoth struct {
	cutPause
	cutSnap
}

func (c cutBoth) Name() string                        { return c.cutPause.Name() }
func (c cutBoth) Capabilities() provider.Capabilities { return c.cutPause.Capabilities() }
func (c cutBoth) Health(ctx context.Context) error    { return c.cutPause.Health(ctx) }
func (c cutBoth) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	return c.cutPause.Create(ctx, spec)
}
func (c cutBoth) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	return c.cutPause.Connect(ctx, id, token)
}
func (c cutBoth) Destroy(ctx context.Context, id string) error { return c.cutPause.Destroy(ctx, id) }
func (c cutBoth) List(ctx context.Context, owner string) ([]string, error) {
	return c.cutPause.List(ctx, owner)
}
