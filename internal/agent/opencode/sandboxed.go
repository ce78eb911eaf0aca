package opencode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/sandbox"
)

// A sandboxed session gets an `opencode serve` of its own, inside its
// sandbox. That server listens on 127.0.0.1 of the sandbox's network
// namespace (gVisor's netstack, or the process runtime's namespace), which
// the daemon cannot reach, and the sandbox gets no new route: the daemon
// reaches the server through the one channel every runtime gives a process
// it starts, its stdio. Each HTTP connection the daemon's client opens is
// a relay process started in the sandbox (relayJS, run by the opencode
// binary itself as Bun), which connects to the server's port there and
// copies bytes between the connection and its stdin and stdout. The
// daemon's end of a connection is those pipes (relayConn); closing it
// ends the relay.

// sandboxedDir is the directory below the adapter's home that holds the
// homes of sandboxed sessions, one each (see sessionHome).
const sandboxedDir = "sandboxed"

// configName is the generated config in a sandboxed session's home.
const configName = "opencode.json"

// maxRelays bounds the connections, and so the relay processes, the
// daemon keeps to one sandboxed server: the event stream and a few calls.
const maxRelays = 6

// relayJS is the relay, run by the opencode binary as Bun (BUN_BE_BUN=1,
// `-e`): it connects to 127.0.0.1:PORT (its last argument), copies stdin
// to the connection and the connection to stdout, and exits when either
// side ends: stdin's end is the daemon closing the connection (HTTP
// clients never half-close), the socket's end is the server closing it,
// after which stdout is flushed.
const relayJS = `const net = require("node:net");
const s = net.connect(Number(process.argv[process.argv.length - 1]), "127.0.0.1");
s.on("error", () => process.exit(1));
s.on("close", () => process.stdout.write("", () => process.exit(0)));
s.pipe(process.stdout, { end: false });
process.stdin.pipe(s, { end: false });
process.stdin.on("end", () => s.destroy());
`

// sessionHome is the home of sandboxed session id: a directory of its own
// (Home/sandboxed/id) holding OpenCode's HOME, XDG directories and
// opencode.json, so that its agent sees no other session's state. The
// config is rewritten each time, confined to the adapter's home (the agent
// may have left a symbolic link in its home), and names neither the
// upstream nor a key: it reads both from the server's environment
// ({env:AGENTBOX_OPENCODE_BASE_URL}, {env:AGENTBOX_OPENCODE_API_KEY}),
// which holds the session's provider (in a sandbox: the route and the
// placeholder).
func (a *adapter) sessionHome(id, model string) (string, error) {
	if !agent.PlainName(id) {
		return "", fmt.Errorf("opencode: %q is not a session id", id)
	}
	base, err := a.home.Make()
	if err != nil {
		return "", err
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return "", err
	}
	defer root.Close()
	rel := filepath.Join(sandboxedDir, id)
	for _, d := range homeDirs {
		if err := root.MkdirAll(filepath.Join(rel, d), 0o700); err != nil {
			return "", err
		}
	}
	b, err := configJSON("{env:"+baseURLEnv+"}", model, a.opts.Models)
	if err != nil {
		return "", err
	}
	if err := root.WriteFile(filepath.Join(rel, configName), b, 0o600); err != nil {
		return "", err
	}
	return filepath.Join(base, rel), nil
}

// RemoveState implements agent.SandboxNeeder: the home of a sandboxed
// session, where sessionHome makes it; nothing is made or written.
func (a *adapter) RemoveState(sessionID string) error {
	home := a.home.Made()
	if home != "" {
		home = filepath.Join(home, sandboxedDir)
	}
	return agent.RemoveSessionDir(home, sessionID)
}

// SandboxPaths implements agent.SandboxNeeder: the installed CLI (read)
// and the session's own home (write).
func (a *adapter) SandboxPaths(cfg agent.Config) (read, write []string) {
	if home, err := a.sessionHome(cfg.SessionID, a.keyFor(cfg).model); err == nil {
		write = append(write, home)
	}
	if bin, _, err := a.opts.Binary(); err == nil && bin != "" {
		read = append(read, agent.InstallRoot(bin))
	}
	return read, write
}

// Providers implements agent.ProviderUser: the OpenAI-compatible API, as
// the session's Env or the adapter's defaults configure it. A sandboxed
// session's server is configured from it (in a sandbox: the route and the
// placeholder).
func (a *adapter) Providers(cfg agent.Config) []agent.Provider {
	return []agent.Provider{a.provider(cfg)}
}

func (a *adapter) provider(cfg agent.Config) agent.Provider {
	return agent.OpenAI(cfg.Env, a.opts.BaseURL, a.opts.APIKey)
}

var (
	_ agent.SandboxNeeder = (*adapter)(nil)
	_ agent.ProviderUser  = (*adapter)(nil)
)

// startOwn starts a sandboxed session: an `opencode serve` of its own
// inside the session's sandbox, with a home of its own, and its OpenCode
// session on it. The server lives as long as the session.
func (a *adapter) startOwn(ctx context.Context, cfg agent.Config, host agent.Host, rules []rule) (agent.Session, error) {
	bin, _, err := a.opts.Binary()
	if err != nil || bin == "" {
		if err == nil {
			err = errors.New("no path")
		}
		return nil, fmt.Errorf("opencode: the CLI is not installed (run `agentbox agents install opencode`): %w", err)
	}
	key := a.keyFor(cfg)
	p := a.provider(cfg)
	key.baseURL, key.apiKey = p.Upstream(), p.Key()
	// The server's environment holds the session's Env whole, as other
	// agents' processes do: in a sandbox OPENAI_BASE_URL is the route and
	// OPENAI_API_KEY its placeholder, for the agent's tools too.
	if len(cfg.Env) > 0 {
		b, err := json.Marshal(cfg.Env)
		if err != nil {
			return nil, fmt.Errorf("opencode: %w", err)
		}
		key.env = string(b)
	}
	if key, err = withMCP(key, cfg.MCPServers); err != nil {
		return nil, err
	}
	home, err := a.sessionHome(cfg.SessionID, key.model)
	if err != nil {
		return nil, fmt.Errorf("opencode: home directory: %w", err)
	}
	srv, err := a.spawnOwn(ctx, cfg.Sandbox, bin, home, key)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		go srv.stop(a.opts.CloseGrace)
		return nil, fmt.Errorf("opencode: the adapter is closed")
	}
	srv.refs = 1
	a.own[srv] = struct{}{}
	a.mu.Unlock()
	s, err := startSession(ctx, a, srv, cfg, host, rules)
	if err != nil {
		a.release(srv)
		return nil, err
	}
	return s, nil
}

// spawnOwn starts a server in sb, listening on a port the kernel picks in
// the sandbox's network namespace, and waits until it answers through a
// relay.
func (a *adapter) spawnOwn(ctx context.Context, sb sandbox.Sandbox, bin, home string, key serverKey) (*server, error) {
	s := newServer(key)
	s.proc = &agent.Proc{Path: bin, Args: []string{"serve", "--hostname", "127.0.0.1", "--port", "0"},
		Env: a.environ(bin, home, filepath.Join(home, configName), key, s.password), Dir: filepath.Join(home, "work"), Sandbox: sb}
	r := &relay{sb: sb, bin: bin, home: home, stderr: s.stderr}
	s.http = &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true,
		DialContext: r.dial, MaxConnsPerHost: maxRelays}}
	start := time.Now()
	stdin, stdout, stderr, err := s.proc.StartPiped()
	if err != nil {
		return nil, fmt.Errorf("opencode: start %s: %w", bin, err)
	}
	stdin.Close() // the server reads nothing from it
	errDone := make(chan struct{})
	go func() {
		defer close(errDone)
		_, _ = io.Copy(s.stderr, stderr)
	}()
	urlc := s.scanListening(stdout)
	go func() {
		ex := s.proc.Wait()
		select {
		case <-errDone:
		case <-time.After(time.Second): // a grandchild holds the pipe
		}
		stderr.Close()
		stdout.Close()
		s.exit = ex.Ended("the opencode server", false, s.stderr.String())
		close(s.done)
	}()
	return a.ready(ctx, s, urlc, start)
}

// relay opens connections to a sandboxed server (see relayJS).
type relay struct {
	sb     sandbox.Sandbox
	bin    string
	home   string
	stderr io.Writer // the server's output tail: a relay's errors
}

// dial implements http.Transport.DialContext: addr is the address the
// server said it listens on, 127.0.0.1:PORT inside the sandbox; the
// connection is a new relay's stdio. Nothing is dialled on the host.
func (r *relay) dial(_ context.Context, _, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || host != "127.0.0.1" || n < 1 || n > 65535 {
		return nil, fmt.Errorf("opencode: %q is not a loopback address of the sandbox", addr)
	}
	p := &agent.Proc{Path: r.bin, Args: []string{"-e", relayJS, port}, Sandbox: r.sb, Dir: filepath.Join(r.home, "work"),
		Env: []string{"BUN_BE_BUN=1", "HOME=" + filepath.Join(r.home, "home")}}
	in, out, errR, err := p.StartPiped()
	if err != nil {
		return nil, fmt.Errorf("opencode: start a relay to the server in the sandbox: %w", err)
	}
	go func() {
		_, _ = io.Copy(r.stderr, errR)
		errR.Close()
	}()
	go p.Wait() // reaps it; Close kills it
	return &relayConn{in: in, out: out, proc: p, addr: relayAddr(addr)}, nil
}

// relayConn is the daemon's end of a connection through a relay: its
// stdin and stdout.
type relayConn struct {
	in, out *os.File
	proc    *agent.Proc
	addr    relayAddr
	once    sync.Once
}

func (c *relayConn) Read(b []byte) (int, error)  { return c.out.Read(b) }
func (c *relayConn) Write(b []byte) (int, error) { return c.in.Write(b) }

// Close ends the connection: the relay exits at the end of its stdin,
// and SIGTERM makes sure of it. Not SIGKILL: under gVisor that kills the
// whole sandbox, the server with it.
func (c *relayConn) Close() error {
	c.once.Do(func() {
		c.in.Close()
		c.out.Close()
		_ = c.proc.Terminate()
	})
	return nil
}

func (c *relayConn) LocalAddr() net.Addr  { return c.addr }
func (c *relayConn) RemoteAddr() net.Addr { return c.addr }

func (c *relayConn) SetDeadline(t time.Time) error {
	return errors.Join(c.in.SetWriteDeadline(t), c.out.SetReadDeadline(t))
}
func (c *relayConn) SetReadDeadline(t time.Time) error  { return c.out.SetReadDeadline(t) }
func (c *relayConn) SetWriteDeadline(t time.Time) error { return c.in.SetWriteDeadline(t) }

// relayAddr is the server's address in the sandbox.
type relayAddr string

func (relayAddr) Network() string  { return "opencode-relay" }
func (a relayAddr) String() string { return string(a) }
