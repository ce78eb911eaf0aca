package gvisor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
)

// TestEgressProxy is network mode proxy end to end: a real egress gate
// serves the box's Egress listener; curl inside reaches an allowed host
// server through 127.0.0.1:3128 and nothing else.
func TestEgressProxy(t *testing.T) {
	rt := needRunsc(t)
	var allowedHits, otherHits atomic.Int64
	allowedPort := serveHTTP(t, "hello from the host\n", &allowedHits)
	otherPort := serveHTTP(t, "must not be reached\n", &otherHits)

	spec := baseSpec(t)
	spec.Network = sandbox.Network{Mode: sandbox.NetworkProxy}
	// Host sockets, mode 0777, in the workspace, in a policy read path
	// and in the host root read_outside_workspace shows (see
	// host_sockets_unreachable below).
	readDir := t.TempDir()
	outsideDir, err := os.MkdirTemp("/var/tmp", "agentbox-egress-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(outsideDir) })
	for _, d := range []string{readDir, outsideDir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec.ReadPaths = []string{readDir}
	spec.ReadOutsideWorkspace = true
	wsSock, readSock := filepath.Join(spec.Workspace, "ws.sock"), filepath.Join(readDir, "read.sock")
	outsideSock := filepath.Join(outsideDir, "outside.sock")
	var sockHits atomic.Int64
	for _, p := range []string{wsSock, readSock, outsideSock} {
		listenUnix(t, p, &sockHits)
	}
	sb := newBox(t, rt, spec)
	es, ok := sb.(sandbox.EgressSandbox)
	if !ok {
		t.Fatalf("a proxy box (%T) is no sandbox.EgressSandbox", sb)
	}
	if m := strings.Join(sb.Info().Mechanisms, " "); !strings.Contains(m, "network:proxy") || strings.Contains(m, "network:none") {
		t.Errorf("Mechanisms %q: want network:proxy", m)
	}

	srv, err := egress.New(egress.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var violations []sandbox.Violation
	g, err := srv.Gate(egress.Config{
		Network: sandbox.Network{Mode: sandbox.NetworkProxy, Allow: []string{"127.0.0.1:" + strconv.Itoa(allowedPort)}},
		OnViolation: func(v sandbox.Violation) {
			mu.Lock()
			defer mu.Unlock()
			violations = append(violations, v)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })

	proxyEnv := map[string]string{"http_proxy": "http://127.0.0.1:3128", "HTTP_PROXY": "http://127.0.0.1:3128"}
	allowedURL := fmt.Sprintf("http://127.0.0.1:%d/", allowedPort)
	curl := func(args ...string) sandbox.Cmd {
		return sandbox.Cmd{Args: append([]string{"curl", "-sS", "--max-time", "20", "-w", "\n%{http_code}"}, args...), Env: proxyEnv}
	}

	// A connection made before anybody serves Egress waits for it.
	var early syncBuffer
	c := curl(allowedURL)
	c.Stdout, c.Stderr = &early, &early
	p, err := sb.Start(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	go func() { _ = g.Serve(es.Egress()) }()
	if e, err := p.Wait(); err != nil || e.Code != 0 || early.String() != "hello from the host\n\n200" {
		t.Fatalf("curl before Serve: exit %+v, %v, output %q", e, err, early.String())
	}

	t.Run("allowed", func(t *testing.T) {
		r := run(t, sb, curl(allowedURL))
		if r.exit.Code != 0 || r.stdout != "hello from the host\n\n200" {
			t.Errorf("curl %s: exit %+v stdout %q stderr %q; want 200 and the body", allowedURL, r.exit, r.stdout, r.stderr)
		}
		// CONNECT: the tunnel's bytes and its half-closes cross the
		// forwarder both ways.
		r = run(t, sb, curl("--proxytunnel", allowedURL))
		if r.exit.Code != 0 || r.stdout != "hello from the host\n\n200" {
			t.Errorf("curl --proxytunnel: exit %+v stdout %q stderr %q", r.exit, r.stdout, r.stderr)
		}
	})

	t.Run("denied", func(t *testing.T) {
		r := run(t, sb, curl(fmt.Sprintf("http://127.0.0.1:%d/", otherPort)))
		if !strings.HasSuffix(r.stdout, "\n403") {
			t.Errorf("curl to another loopback port: exit %+v stdout %q stderr %q; want 403", r.exit, r.stdout, r.stderr)
		}
		if otherHits.Load() != 0 {
			t.Errorf("the denied server was reached %d times", otherHits.Load())
		}
		// The forwarder told the host who asked.
		mu.Lock()
		defer mu.Unlock()
		var found bool
		for _, v := range violations {
			if v.Port == otherPort && v.Process != nil && v.Process.Name == "curl" && v.Process.Pid > 0 &&
				strings.Contains(v.Process.CommandLine, strconv.Itoa(otherPort)) {
				found = true
			}
		}
		if !found {
			t.Errorf("no violation for port %d naming curl as the process: %+v", otherPort, violations)
		}
	})

	t.Run("direct", func(t *testing.T) {
		before := allowedHits.Load()
		// 127.0.0.1 inside is the sandbox's own loopback; the host's
		// other address has no route.
		urls := []string{allowedURL, fmt.Sprintf("http://192.0.2.1:%d/", allowedPort)}
		if ip := hostIPv4(); ip != "" {
			urls = append(urls, fmt.Sprintf("http://%s:%d/", ip, allowedPort))
		}
		for _, u := range urls {
			r := run(t, sb, sandbox.Cmd{Args: []string{"curl", "-sS", "--max-time", "5", "--noproxy", "*", u}})
			if r.exit.Code == 0 || !containsAny(r.stderr, "Couldn't connect", "Failed to connect", "No route", "unreachable") {
				t.Errorf("direct curl %s: exit %+v stdout %q stderr %q; want a connect failure", u, r.exit, r.stdout, r.stderr)
			}
		}
		if n := allowedHits.Load() - before; n != 0 {
			t.Errorf("direct connections reached the host server %d times", n)
		}
	})

	t.Run("forwarder_is_root_only", func(t *testing.T) {
		r := run(t, sb, sandbox.Cmd{Args: []string{"python3", "-c", `
import errno, os, socket, time
def op(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
def forwarders():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and open("/proc/%s/cmdline" % p).read().split("\0")[1:2] == ["` + forwardFlag + `"]]
op("kill_forwarder", lambda: [os.kill(p, 9) for p in forwarders() or exit("no forwarder")])
# A connection in flight: the forwarder holds a host socketpair end for it
# besides its control socket (stdin).
held = socket.create_connection(("127.0.0.1", 3128), timeout=10)
time.sleep(0.5)
d = "/proc/%d/fd/" % forwarders()[0]
res, host_sockets = set(), 0
for f in sorted(os.listdir(d)):
    l = os.readlink(d + f)
    try:
        os.close(os.open(d + f, os.O_RDWR)); res.add("ok:" + l)
    except OSError as e:
        res.add(errno.errorcode.get(e.errno, str(e.errno)))
        host_sockets += l.startswith("host:") and e.errno == errno.ENXIO
print("forwarder_host_sockets", host_sockets)
print("open_forwarder_fds", " ".join(sorted(res)))
held.close()
# A wildcard listener on the proxy port (bind succeeds in gVisor with
# SO_REUSEADDR) does not take the forwarder's connections.
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    l.bind(("0.0.0.0", 3128)); l.listen(8); l.settimeout(0.5)
except OSError as e:
    l = None
for i in range(3):
    c = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    c.sendall(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n")
    print("proxied", c.recv(12).decode())
    c.close()
`}})
		got := strings.Split(strings.TrimSpace(r.stdout), "\n")
		ok := r.exit.Code == 0 && len(got) == 6 && got[0] == "kill_forwarder EPERM" && got[3] == "proxied HTTP/1.1 403" &&
			got[4] == got[3] && got[5] == got[3]
		// The host sockets are the control socket and the in-flight
		// connection's end at least; every descriptor refuses to open
		// (sockets ENXIO, the 0600 host log file and pipes EACCES, anon
		// inodes ENODEV).
		if n, err := strconv.Atoi(strings.TrimPrefix(got[min(1, len(got)-1)], "forwarder_host_sockets ")); err != nil || n < 2 {
			ok = false
		}
		if f := strings.Fields(got[min(2, len(got)-1)]); len(f) < 2 || f[0] != "open_forwarder_fds" ||
			slices.ContainsFunc(f[1:], func(e string) bool { return e != "ENXIO" && e != "EACCES" && e != "ENODEV" }) {
			ok = false
		}
		if !ok {
			t.Errorf("exit %+v stdout %q stderr %q; want the forwarder unkillable, its descriptors unopenable, and 403s through it", r.exit, r.stdout, r.stderr)
		}
	})

	// No host socket file is bound into a proxy sandbox and runsc has no
	// --host-uds: host unix sockets in bind-mounted paths (a policy read
	// path; /var/tmp under read_outside_workspace's host root) are as
	// unreachable as in mode none, and nothing of the egress path shows
	// in the file system.
	t.Run("host_sockets_unreachable", func(t *testing.T) {
		script := sandbox.Cmd{Args: []string{"python3", "-c", `
import errno, os, socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p); print("connected")
    except OSError as e:
        print(errno.errorcode.get(e.errno, e.errno))
    s.close()
try:
    os.lstat("/run/agentbox"); print("/run/agentbox exists")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
print(any(f[1].startswith("/run") for f in (l.split() for l in open("/proc/self/mounts"))))
`, wsSock, readSock, outsideSock}}
		none := spec
		none.Network = sandbox.Network{Mode: sandbox.NetworkNone}
		noneBox := newBox(t, rt, none)
		want := run(t, noneBox, script)
		got := run(t, sb, script)
		// gVisor without --host-uds refuses connect(2) to every host
		// socket with EPERM, the workspace's (overlay) included.
		wantLines := []string{"EPERM", "EPERM", "EPERM", "ENOENT", "False"}
		if want.exit.Code != 0 || strings.Join(strings.Fields(want.stdout), " ") != strings.Join(wantLines, " ") {
			t.Errorf("mode none: exit %+v stdout %q stderr %q; want %q", want.exit, want.stdout, want.stderr, wantLines)
		}
		if got.exit.Code != 0 || got.stdout != want.stdout {
			t.Errorf("mode proxy: exit %+v stdout %q stderr %q; want what mode none gives, %q", got.exit, got.stdout, got.stderr, want.stdout)
		}
		if n := sockHits.Load(); n != 0 {
			t.Errorf("host sockets were connected to %d times", n)
		}
	})

	t.Run("close", func(t *testing.T) {
		ln := es.Egress()
		if _, err := sb.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { _, err := ln.Accept(); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Accept after Close blocks")
		}
	})
}

// TestEgressOnlyInProxyMode: other modes are no EgressSandbox; no mode
// gives runsc --host-uds, and the probe has no row for it; a forwarder that
// does not get its control socket fails a proxy box closed, naming the
// mechanism, and leaves nothing behind.
func TestEgressOnlyInProxyMode(t *testing.T) {
	rt := needRunsc(t)
	sb := newBox(t, rt, baseSpec(t))
	if _, ok := sb.(sandbox.EgressSandbox); ok {
		t.Error("a network none box is a sandbox.EgressSandbox")
	}
	for _, m := range rt.Probe(t.Context()).Mechanisms {
		if strings.Contains(m.Name, "uds") {
			t.Errorf("probe row %+v", m)
		}
	}
	for _, mode := range []string{sandbox.NetworkNone, sandbox.NetworkProxy, sandbox.NetworkHost} {
		args := rt.runscCmd(t.Context(), "/state", mode, "run").Args
		if slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "host-uds") }) {
			t.Errorf("mode %s: runsc %q", mode, args)
		}
		if want := "--network=" + mode; mode == sandbox.NetworkProxy && !slices.Contains(args, "--network=none") ||
			mode != sandbox.NetworkProxy && !slices.Contains(args, want) {
			t.Errorf("mode %s: runsc %q", mode, args)
		}
	}

	forwarderStdin = func(*os.File) (*os.File, error) { return os.Open(os.DevNull) }
	t.Cleanup(func() { forwarderStdin = func(f *os.File) (*os.File, error) { return f, nil } })
	spec := baseSpec(t)
	spec.Network.Mode = sandbox.NetworkProxy
	spec.AllowDegraded = true
	_, err := rt.Create(t.Context(), spec)
	if !errors.Is(err, sandbox.ErrUnenforceable) || !strings.Contains(err.Error(), fdPassing) {
		t.Errorf("Create without the control socket: %v; want ErrUnenforceable naming %s", err, fdPassing)
	}
	if entries, _ := os.ReadDir(rt.opts.StateDir); len(entries) != 1 {
		t.Errorf("state dir after a failed Create: %v; want only the none box", entries)
	}
}

func serveHTTP(t *testing.T, body string, hits *atomic.Int64) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, body)
	})}
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// listenUnix accepts (and closes) connections on a host unix socket at
// path, mode 0777, counting them.
func listenUnix(t *testing.T, path string, hits *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			_ = c.Close()
		}
	}()
}

// hostIPv4 is a non-loopback address of the host, "" when it has none.
func hostIPv4() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// Host-side tests of the listener, the protocol and the forwarder's parts;
// they need no runsc.

// testListener returns a listener and the forwarder's raw end of its
// control socket.
func testListener(t *testing.T) (*egressListener, *net.UnixConn) {
	t.Helper()
	l, f, err := newEgressListener(3128, sandbox.Network{}.HostConnectionLimit())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.wait)
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return l, c.(*net.UnixConn)
}

// exchange sends one packet (with fds) on the forwarder's end and returns
// the reply and the descriptors it carried.
func exchange(t *testing.T, c *net.UnixConn, pkt string, fds ...int) (string, []int) {
	t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix([]byte(pkt), oob, nil); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf, ob := make([]byte, 64), make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, ob)
	if err != nil {
		t.Fatalf("reply to %.40q: %v", pkt, err)
	}
	return string(buf[:n]), rights(ob[:oobn])
}

// connOf sends pkt and makes a conn of the one descriptor the reply must
// carry.
func connOf(t *testing.T, fwd *net.UnixConn, pkt string) *net.UnixConn {
	t.Helper()
	reply, fds := exchange(t, fwd, pkt)
	if reply != connReply || len(fds) != 1 {
		closeFDs(fds)
		t.Fatalf("reply %q with %d descriptors; want %q with one", reply, len(fds), connReply)
	}
	c, err := streamConn(fds[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readyUp does the forwarder's first request and its check connection.
func readyUp(t *testing.T, l *egressListener, c *net.UnixConn) {
	t.Helper()
	check := connOf(t, c, readyPacket)
	if _, err := io.WriteString(check, readyPacket); err != nil {
		t.Fatal(err)
	}
	_ = check.CloseWrite()
	select {
	case <-l.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("not ready after the check connection")
	}
}

func acceptTimeout(t *testing.T, l net.Listener) (net.Conn, error) {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := l.Accept(); ch <- res{c, err} }()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-time.After(5 * time.Second):
		t.Fatal("Accept timed out")
		return nil, nil
	}
}

func TestEgressListener(t *testing.T) {
	l, fwd := testListener(t)
	good := formatPeerHeader(sandbox.Peer{Pid: 42, Name: "curl", CommandLine: "curl -x http://127.0.0.1:3128 example.com"})
	refused := func(pkt string, fds ...int) {
		t.Helper()
		if r, got := exchange(t, fwd, pkt, fds...); r != refusedReply || len(got) != 0 {
			closeFDs(got)
			t.Errorf("packet %.40q: reply %q with %d descriptors; want %q", pkt, r, len(got), refusedReply)
		}
	}

	// Before the ready request, nothing else is served.
	refused(good)
	select {
	case <-l.ready:
		t.Fatal("ready without a check connection")
	default:
	}
	readyUp(t, l, fwd)
	refused(readyPacket) // once only

	// Bad packets are refused without reaching Accept.
	for _, p := range []string{
		"GET / HTTP/1.1\r\n", "peer/1\t-1\t\t\n", "peer/1\t12\tcurl\n", strings.Repeat("x", 4096), "peer/1\t0\tname\t\n",
		strings.TrimSuffix(good, "\n"), good + "\n", good + "GET / HTTP/1.1\r\n", "peer/1\t1\t\t" + strings.Repeat("c", maxHeader) + "\n",
		connReply, refusedReply,
	} {
		refused(p)
	}
	// A good header carrying a descriptor is refused, and the host closes
	// what it received: the pipe ends once our write end is closed.
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	refused(good, int(pw.Fd()))
	_ = pw.Close()
	_ = pr.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := pr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Errorf("pipe passed to the host: read %d, %v; want EOF (the host closes it)", n, err)
	}
	_ = pr.Close()
	if n := len(l.conns); n != 0 {
		t.Fatalf("%d connections queued after bad requests", n)
	}

	// A good request: the connection Accept yields is the other end of
	// the one the forwarder got, with the peer of the header.
	c := connOf(t, fwd, good)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\n"); err != nil {
		t.Fatal(err)
	}
	ac, err := acceptTimeout(t, l)
	if err != nil {
		t.Fatal(err)
	}
	pc, ok := ac.(sandbox.PeerConn)
	if !ok {
		t.Fatalf("accepted %T, not a sandbox.PeerConn", ac)
	}
	if p, ok := pc.Peer(); !ok || p != (sandbox.Peer{Pid: 42, Name: "curl", CommandLine: "curl -x http://127.0.0.1:3128 example.com"}) {
		t.Errorf("Peer = %+v, %v", p, ok)
	}
	line, err := bufio.NewReader(ac).ReadString('\n')
	if err != nil || line != "GET / HTTP/1.1\r\n" {
		t.Errorf("first line %q, %v", line, err)
	}
	// Half-close both ways.
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if n, err := ac.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("read after the client's CloseWrite: %d, %v; want EOF", n, err)
	}
	if _, err := io.WriteString(ac, "reply"); err != nil {
		t.Fatal(err)
	}
	if err := ac.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c); err != nil || string(b) != "reply" {
		t.Errorf("client read %q, %v", b, err)
	}
	_ = ac.Close()
	if a := l.Addr().String(); a != "127.0.0.1:3128" {
		t.Errorf("Addr = %s", a)
	}

	// pid 0: no peer.
	connOf(t, fwd, formatPeerHeader(sandbox.Peer{}))
	ac, err = acceptTimeout(t, l)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := ac.(sandbox.PeerConn).Peer(); ok || !p.IsZero() {
		t.Errorf("Peer of a pid-0 header = %+v, %v", p, ok)
	}
	_ = ac.Close()

	// At most pendingConns wait for Accept; one accepted makes room.
	var held []*net.UnixConn
	for range l.pending {
		held = append(held, connOf(t, fwd, good))
	}
	refused(good)
	ac, err = acceptTimeout(t, l)
	if err != nil {
		t.Fatal(err)
	}
	held = append(held, connOf(t, fwd, good))
	// At most maxOpen are open, accepted ones included; one closed makes
	// room.
	accepted := []net.Conn{ac}
	for len(l.conns) > 0 {
		c, err := acceptTimeout(t, l)
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, c)
	}
	for l.open.Load() < l.maxOpen {
		held = append(held, connOf(t, fwd, good))
		c, err := acceptTimeout(t, l)
		if err != nil {
			t.Fatal(err)
		}
		accepted = append(accepted, c)
	}
	refused(good)
	_ = accepted[0].Close()
	_ = accepted[0].Close() // twice: counted once
	held = append(held, connOf(t, fwd, good))
	refused(good)
	for _, c := range held {
		_ = c.Close()
	}
	for _, c := range accepted {
		_ = c.Close()
	}
	if n := l.open.Load(); n != 1 {
		t.Errorf("%d connections open, want the 1 waiting", n)
	}

	// Close: a connection waiting for Accept is closed (the forwarder's
	// end reads EOF), the control socket too, and Accept reports
	// net.ErrClosed.
	waiting := connOf(t, fwd, good)
	start := time.Now()
	l.wait()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	_ = waiting.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := waiting.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("waiting connection after Close: %d, %v; want EOF", n, err)
	}
	_ = fwd.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, oobn, _, _, err := fwd.ReadMsgUnix(make([]byte, 64), make([]byte, 64)); n != 0 || oobn != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("control socket after Close: %d, %d, %v; want end of stream", n, oobn, err)
	}
	if n := l.open.Load(); n != 0 {
		t.Errorf("%d connections open after Close", n)
	}
}

// TestEgressListenerEnds: the listener ends when the forwarder's end
// closes (net.ErrClosed), and fails when the check connection does not
// carry exactly the ready line (an error naming it, never ready).
func TestEgressListenerEnds(t *testing.T) {
	l, fwd := testListener(t)
	readyUp(t, l, fwd)
	_ = fwd.Close()
	if _, err := acceptTimeout(t, l); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after the forwarder went: %v; want net.ErrClosed", err)
	}

	for _, data := range []string{"nope\n", readyPacket + "x", readyPacket[:3]} {
		l, fwd := testListener(t)
		check := connOf(t, fwd, readyPacket)
		_, _ = io.WriteString(check, data)
		_ = check.Close()
		if _, err := acceptTimeout(t, l); err == nil || errors.Is(err, net.ErrClosed) || !strings.Contains(err.Error(), "check connection") {
			t.Errorf("check connection %q: Accept %v; want the check's error", data, err)
		}
		select {
		case <-l.ready:
			t.Errorf("check connection %q: ready", data)
		default:
		}
	}
}

func TestPeerHeader(t *testing.T) {
	for _, c := range []struct {
		in   sandbox.Peer
		want sandbox.Peer
	}{
		{sandbox.Peer{}, sandbox.Peer{}},
		{sandbox.Peer{Pid: 1, Name: "sh", CommandLine: "sh -c curl x"}, sandbox.Peer{Pid: 1, Name: "sh", CommandLine: "sh -c curl x"}},
		{sandbox.Peer{Pid: -3, Name: "x"}, sandbox.Peer{}},
		{sandbox.Peer{Pid: maxPid + 1, Name: "x"}, sandbox.Peer{}},
		{sandbox.Peer{Pid: 9, Name: "a\tb\nc\x00", CommandLine: "x\xffy\u0085z\u00e9\u202e\x1b]52;c;aGk=\x07"},
			sandbox.Peer{Pid: 9, Name: `a\x09b\x0ac\x00`, CommandLine: `x\xffy\u0085z` + "\u00e9" + `\u202e\x1b]52;c;aGk=\x07`}},
		{sandbox.Peer{Pid: maxPid, Name: strings.Repeat("n", 100), CommandLine: strings.Repeat("é", 600)},
			sandbox.Peer{Pid: maxPid, Name: strings.Repeat("n", maxPeerName-3) + "…", CommandLine: strings.Repeat("é", (maxCommandLine-3)/2) + "…"}},
	} {
		h := formatPeerHeader(c.in)
		if len(h) > maxHeader || !strings.HasSuffix(h, "\n") || strings.Count(h, "\n") != 1 {
			t.Errorf("formatPeerHeader(%+v) = %q", c.in, h)
		}
		got, err := parsePeerHeader([]byte(strings.TrimSuffix(h, "\n")))
		if err != nil || got != c.want {
			t.Errorf("parse(format(%+v)) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{
		"", "peer/1", "peer/1\t", "peer/1\t1\tx", "peer/1\t1\tx\ty\tz", "peer/2\t1\tx\ty", "Peer/1\t1\tx\ty",
		"peer/1\t01\tx\ty", "peer/1\t+1\tx\ty", "peer/1\t-1\tx\ty", "peer/1\t 1\tx\ty", "peer/1\t4194305\tx\ty",
		"peer/1\t99999999999999999999\tx\ty", "peer/1\t0\tx\t", "peer/1\t0\t\ty", "peer/1\t1\tx\ry\tz",
		"peer/1\t1\t\xff\tz", "peer/1\t1\tx\t\x7f", "peer/1\t1\t" + strings.Repeat("n", maxPeerName+1) + "\t",
		"peer/1\t1\t\t" + strings.Repeat("c", maxCommandLine+1), readyPacket[:len(readyPacket)-1], connReply[:len(connReply)-1],
		// What formatPeerHeader would have escaped: a compromised
		// forwarder's bidi override, C1 control, zero-width space.
		"peer/1\t1\tx\u202e\ty", "peer/1\t1\tx\ty\u009b", "peer/1\t1\tx\u200b\ty",
	} {
		if p, err := parsePeerHeader([]byte(bad)); err == nil {
			t.Errorf("parsePeerHeader(%q) = %+v, want an error", bad, p)
		}
	}
	// parseRequest takes exactly one header line, its newline included,
	// within maxHeader.
	for _, bad := range []string{"", "\n", "peer/1\t1\t\t", "peer/1\t1\t\t\n\n", "peer/1\t1\t\t\nx", "peer/1\t1\t\t" + strings.Repeat("c", 3*maxHeader) + "\n"} {
		if p, err := parseRequest([]byte(bad)); !errors.Is(err, errBadHeader) {
			t.Errorf("parseRequest(%.40q) = %+v, %v; want errBadHeader", bad, p, err)
		}
	}
	if p, err := parseRequest([]byte("peer/1\t7\tsh\tsh -c x\n")); err != nil || p != (sandbox.Peer{Pid: 7, Name: "sh", CommandLine: "sh -c x"}) {
		t.Errorf("parseRequest of a good packet = %+v, %v", p, err)
	}
}

// FuzzParsePeerHeader: any line or request packet parses or fails without
// panicking, what parses is within the limits and formats back to the same
// bytes, and what formatPeerHeader writes is always a request that parses.
func FuzzParsePeerHeader(f *testing.F) {
	f.Add("peer/1\t0\t\t", 0, "", "")
	f.Add("peer/1\t123\tcurl\tcurl -x http://127.0.0.1:3128 http://example.com", 5, "python3", "python3 -c 'x'")
	f.Add("peer/1\t4194304\t\xe2\x82\xac\t\t", 1, "a\tb", "\xff\n")
	f.Add("peer/1\t1\tx\ty\n", 1, "", "")
	f.Fuzz(func(t *testing.T, line string, pid int, name, cmdline string) {
		if p, err := parsePeerHeader([]byte(line)); err == nil {
			if p.Pid < 0 || p.Pid > maxPid || len(p.Name) > maxPeerName || len(p.CommandLine) > maxCommandLine {
				t.Fatalf("parsed %q to %+v, past the limits", line, p)
			}
			if back := formatPeerHeader(p); back != line+"\n" {
				t.Fatalf("parsed %q to %+v, which formats as %q", line, p, back)
			}
		}
		if p, err := parseRequest([]byte(line)); err == nil {
			if back := formatPeerHeader(p); back != line {
				t.Fatalf("request %q parsed to %+v, which formats as %q", line, p, back)
			}
		}
		h := formatPeerHeader(sandbox.Peer{Pid: pid, Name: name, CommandLine: cmdline})
		if len(h) > maxHeader {
			t.Fatalf("header of %d bytes", len(h))
		}
		if _, err := parseRequest([]byte(h)); err != nil {
			t.Fatalf("formatPeerHeader wrote %q, which does not parse: %v", h, err)
		}
	})
}

// TestForward runs the forwarder's side on the host: the control socket's
// ready check, the peer lookup (a python3 child as the client, found
// through the host's /proc/net/tcp, whose format gVisor's follows), the
// request, and the copy with its half-closes.
func TestForward(t *testing.T) {
	l, f, err := newEgressListener(3128, sandbox.Network{}.HostConnectionLimit())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.wait)
	ctl, err := controlSocket(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.ready(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.ready:
	case <-time.After(5 * time.Second):
		t.Fatal("not ready after control.ready")
	}
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	port := tcp.Addr().(*net.TCPAddr).Port
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	cmd := exec.Command(py, "-c", fmt.Sprintf(`
import socket, sys
s = socket.create_connection(("127.0.0.1", %d))
s.sendall(b"ping")
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    b = s.recv(100)
    if not b: break
    data += b
sys.stdout.write(data.decode())
`, port), "marker-arg")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	client, err := tcp.Accept()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- forward(client.(*net.TCPConn), ctl) }()
	ac, err := acceptTimeout(t, l)
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	p, ok := ac.(sandbox.PeerConn).Peer()
	if !ok || p.Pid != cmd.Process.Pid || !strings.HasPrefix(p.Name, "python") || !strings.HasSuffix(p.CommandLine, "marker-arg") {
		t.Errorf("Peer = %+v, %v; want pid %d, python, its command line", p, ok, cmd.Process.Pid)
	}
	b, err := io.ReadAll(ac)
	if err != nil || string(b) != "ping" {
		t.Errorf("host read %q, %v", b, err)
	}
	if _, err := io.WriteString(ac, "pong"); err != nil {
		t.Fatal(err)
	}
	_ = ac.(interface{ CloseWrite() error }).CloseWrite()
	if err := cmd.Wait(); err != nil || out.String() != "pong" {
		t.Errorf("client: %v, output %q", err, out.String())
	}
	if err := <-done; err != nil {
		t.Errorf("forward: %v", err)
	}

	// The host gone: forward reports it (the forwarder then exits).
	l.wait()
	c1, err := net.Dial("tcp4", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	s1, err := tcp.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if err := forward(s1.(*net.TCPConn), ctl); err == nil || errors.Is(err, errRefused) {
		t.Errorf("forward with the host gone: %v; want an error", err)
	}
}

// TestControlSocket: the forwarder takes only a unix SOCK_SEQPACKET
// socket as its control socket.
func TestControlSocket(t *testing.T) {
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlSocket(devnull); err == nil {
		t.Error("controlSocket(/dev/null) succeeded")
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	if _, err := controlSocket(os.NewFile(uintptr(fds[0]), "stream")); err == nil || !strings.Contains(err.Error(), "SOCK_SEQPACKET") {
		t.Errorf("controlSocket(a stream socket): %v", err)
	}
}
