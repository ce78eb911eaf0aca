package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/seccomp"
)

// Network mode "proxy": the container has gVisor's netstack with only
// loopback (--network=none, exactly as mode none), and a forwarder of ours
// runs in it as root without capabilities (seccomp's default profile),
// listening on 127.0.0.1:<proxy port>. Nothing of the host's is bound into
// the container for it and runsc gets no --host-uds (which would open every
// host unix socket in every bound path to the workload): the forwarder's
// only way to the host is the descriptor it is started with, its stdin,
// one end of a host SOCK_SEQPACKET socketpair, the control socket. (`runsc
// exec` 20221219 passes a process's stdin, stdout and stderr into the
// sandbox and no other descriptor; gVisor imports a host socket there as a
// socket and can receive host descriptors over it with SCM_RIGHTS.) For
// every connection it accepts, the forwarder asks the host for a fresh
// connection over the control socket and copies bytes both ways between
// the two, half-closing each side (CloseWrite) when the other stops
// sending:
//
//	workload (uid 1000) --tcp 127.0.0.1:3128--> forwarder (root, in gVisor)
//	forwarder --control socket (stdin): "peer/1\t<pid>\t<name>\t<cmdline>\n"--> host
//	host --"conn/1\n" + SCM_RIGHTS(end A of a new socketpair)--> forwarder
//	forwarder <--unix stream A/B--> host: end B is what Egress().Accept() yields
//
// The protocol is one SOCK_SEQPACKET packet per message; every request is
// answered by exactly one reply, in order (the forwarder sends a request
// and reads its reply under one lock):
//
//   - first, once it listens, the forwarder sends readyPacket; the host
//     answers connReply with a check connection, on which the forwarder
//     writes readyPacket and half-closes. That proves the whole path (the
//     stdin socket both ways, SCM_RIGHTS into gVisor, the received
//     socket's writes and shutdown); Create returns only then, and fails
//     with sandbox.ErrUnenforceable naming fdPassing where it does not
//     work.
//   - then, per accepted connection, the forwarder sends its header (pid 0
//     with empty fields when the peer lookup found nothing), and the host
//     answers connReply with end A of a new socketpair whose end B it
//     queues for Accept as a sandbox.PeerConn naming that peer, or
//     refusedReply with no descriptor (the forwarder then closes the
//     client). A control socket that ends or answers anything else ends
//     the forwarder, and its end ends the listener: egress fails closed.
//
// The host trusts nothing from inside: it reads one packet at a time into
// a buffer of maxHeader+1 bytes; it refuses a packet that is truncated,
// carries descriptors (it closes them) or is not exactly one of the two
// requests (the header parser accepts only what formatPeerHeader writes),
// and refuses connections while pendingConns (or fewer) wait for Accept or
// the sandbox's connection bound (sandbox.Network.MaxConnections, plus a
// little slack: the egress proxy refuses and reports connections past the
// bound itself) are open, so a flood costs the host at most that many
// descriptors. It
// never sends into the sandbox anything but its two replies and fresh
// socketpair ends. A compromised forwarder can name any process of its
// sandbox, or none, but cannot make the host read more than a packet at a
// time, hold more connections than its bound, or reach anything but the
// Egress listener.
//
// gVisor does not check ptrace access on /proc/<pid>/fd, so the forwarder,
// root without capabilities, can map the client's socket inode (from
// /proc/net/tcp) to its process; the sandbox user can list those links
// too, but opening a socket's link fails (ENXIO, the control socket and
// the socketpair ends, "host:[N]" links, included) and the forwarder's
// log, its stdout and stderr, is a 0600 host file (EACCES), so it cannot
// take the forwarder's descriptors.
const (
	// forwardFlag selects the forwarder mode of our binary (wrapper.go).
	forwardFlag = "--egress-forward"
	// readyPacket is the forwarder's first request, and what it writes on
	// the check connection the host answers it with.
	readyPacket = "ready/1\n"
	// peerPrefix starts every connection request (its header).
	peerPrefix = "peer/1\t"
	// The host's replies: connReply carries exactly one descriptor,
	// refusedReply none.
	connReply    = "conn/1\n"
	refusedReply = "refused/1\n"
	// fdPassing names the mechanism in the forwarder's start errors, which
	// fail a proxy sandbox with sandbox.ErrUnenforceable.
	fdPassing = "host socket passing into gVisor (runsc exec stdin, SCM_RIGHTS)"
)

// Limits of the header and the connections. A header longer than
// maxHeader, or with a field past its limit, is refused.
const (
	maxPeerName    = sandbox.MaxPeerName
	maxCommandLine = sandbox.MaxPeerCommandLine
	maxPid         = 1 << 22 // gVisor's (and Linux's) PID_MAX_LIMIT
	maxHeader      = len(peerPrefix) + 7 + 1 + maxPeerName + 1 + maxCommandLine + 1
	// pendingConns bounds the connections waiting for Accept; the
	// listener's maxOpen (sandbox.Network.HostConnectionLimit)
	// those open on the host (waiting or accepted, until closed); past
	// either, requests are refused.
	pendingConns = 256
	// readyTimeout bounds the check connection's read; forwarderTimeout
	// the forwarder's start.
	readyTimeout     = 10 * time.Second
	forwarderTimeout = 15 * time.Second
)

var (
	errBadHeader = errors.New("gvisor: malformed egress header")
	// errRefused: the host answered a request with refusedReply.
	errRefused = errors.New("gvisor: egress connection refused by the host")
)

// formatPeerHeader is the header the forwarder sends: the prefix, then the
// pid, the name and the command line separated by tabs, then a newline.
// The fields are sanitised and cut as sandbox.NewPeer does (control
// characters, tabs and newlines included, become escapes), so the line
// always parses.
func formatPeerHeader(p sandbox.Peer) string {
	if p.Pid <= 0 || p.Pid > maxPid {
		return peerPrefix + "0\t\t\n"
	}
	p = p.Sanitized()
	return peerPrefix + strconv.Itoa(p.Pid) + "\t" + p.Name + "\t" + p.CommandLine + "\n"
}

// parsePeerHeader parses one header line (without its newline). It accepts
// exactly what formatPeerHeader writes: a decimal pid in [0, maxPid] with
// no sign or leading zeros, and a name and a command line as
// sandbox.NewPeer leaves them (within their limits, nothing to escape);
// pid 0 carries empty fields.
func parsePeerHeader(line []byte) (sandbox.Peer, error) {
	if len(line) >= maxHeader || !bytes.HasPrefix(line, []byte(peerPrefix)) {
		return sandbox.Peer{}, errBadHeader
	}
	fields := bytes.Split(line[len(peerPrefix):], []byte("\t"))
	if len(fields) != 3 {
		return sandbox.Peer{}, errBadHeader
	}
	pid, ok := parsePid(fields[0])
	if !ok {
		return sandbox.Peer{}, errBadHeader
	}
	name, cmdline := fields[1], fields[2]
	if !cleanField(name, maxPeerName) || !cleanField(cmdline, maxCommandLine) {
		return sandbox.Peer{}, errBadHeader
	}
	if pid == 0 && (len(name) > 0 || len(cmdline) > 0) {
		return sandbox.Peer{}, errBadHeader
	}
	return sandbox.Peer{Pid: pid, Name: string(name), CommandLine: string(cmdline)}, nil
}

func parsePid(b []byte) (int, bool) {
	if len(b) == 0 || len(b) > 7 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, n <= maxPid
}

// cleanField reports whether b is as sandbox.CleanReported leaves text
// within limit bytes.
func cleanField(b []byte, limit int) bool {
	return len(b) <= limit && sandbox.CleanReported(string(b), limit) == string(b)
}

// parseRequest parses one connection request packet: exactly one header
// line as formatPeerHeader writes it, its newline included.
func parseRequest(p []byte) (sandbox.Peer, error) {
	if len(p) == 0 || len(p) > maxHeader || p[len(p)-1] != '\n' {
		return sandbox.Peer{}, errBadHeader
	}
	return parsePeerHeader(p[:len(p)-1])
}

// rights returns the descriptors of SCM_RIGHTS messages in oob.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if fs, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, fs...)
		}
	}
	return fds
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// streamConn makes a *net.UnixConn of a unix stream socket descriptor,
// which it owns (it is closed on failure too).
func streamConn(fd int) (*net.UnixConn, error) {
	f := os.NewFile(uintptr(fd), "egress-conn")
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok || uc.LocalAddr().Network() != "unix" {
		_ = c.Close()
		return nil, fmt.Errorf("not a unix stream socket (%T)", c)
	}
	return uc, nil
}

// egressListener is the host side of a proxy box's control socket:
// Accept yields each connection the forwarder asked for with a header that
// parsed, as a *peerConn. Connections wait (unaccepted, at most
// pendingConns of them) until somebody serves it.
type egressListener struct {
	ctl   *net.UnixConn // the host's end of the control socket
	port  int
	conns chan *peerConn // waiting for Accept; only loop sends
	done  chan struct{}
	// ready is closed when the forwarder's check connection proved the
	// path.
	ready     chan struct{}
	open      atomic.Int64 // host ends open: waiting or accepted
	maxOpen   int64        // bound of open
	pending   int          // bound of conns waiting for Accept
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu       sync.Mutex
	err      error         // why the listener failed, if it did
	checking *net.UnixConn // the check connection being read
	closed   bool
}

// newEgressListener creates the control socketpair and starts serving
// its host end. The other end is the forwarder's stdin: the caller passes
// it to `runsc exec` and closes it.
func newEgressListener(port, maxOpen int) (*egressListener, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("gvisor: egress control socket: %w", err)
	}
	f := os.NewFile(uintptr(fds[0]), "egress-control")
	c, err := net.FileConn(f)
	_ = f.Close()
	if err != nil {
		_ = unix.Close(fds[1])
		return nil, nil, fmt.Errorf("gvisor: egress control socket: %w", err)
	}
	pending := min(pendingConns, maxOpen)
	l := &egressListener{ctl: c.(*net.UnixConn), port: port, conns: make(chan *peerConn, pending),
		maxOpen: int64(maxOpen), pending: pending, done: make(chan struct{}), ready: make(chan struct{})}
	l.wg.Go(l.loop)
	return l, os.NewFile(uintptr(fds[1]), "egress-control-forwarder"), nil
}

// loop reads the forwarder's requests, one packet at a time, and answers
// each. It ends, closing l, when the forwarder closes its end (it is gone),
// on any error of the control socket, or when l is closed.
func (l *egressListener) loop() {
	defer func() { _ = l.Close() }() // the forwarder is gone: so is the listener
	buf := make([]byte, maxHeader+1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	checked := false
	for {
		n, oobn, flags, _, err := l.ctl.ReadMsgUnix(buf, oob)
		// A forwarder never sends descriptors: close what came, first.
		closeFDs(rights(oob[:oobn]))
		if errors.Is(err, io.EOF) || err == nil && n == 0 && oobn == 0 {
			// End of stream (or an empty packet, which Go reads as
			// such): the forwarder is gone.
			return
		}
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.fail(fmt.Errorf("gvisor: egress control socket: %w", err))
			}
			return
		}
		pkt := buf[:n]
		switch {
		case oobn > 0 || flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0:
			err = l.reply(refusedReply, -1)
		case !checked:
			if string(pkt) != readyPacket {
				err = l.reply(refusedReply, -1)
				break
			}
			checked = true
			if err = l.check(); err != nil {
				l.fail(err)
				return
			}
		default:
			peer, perr := parseRequest(pkt)
			if perr != nil {
				err = l.reply(refusedReply, -1)
				break
			}
			err = l.connect(peer)
		}
		if err != nil {
			return // the control socket broke, or l was closed
		}
	}
}

// reply sends one reply packet, with fd (which it closes) unless it is -1.
func (l *egressListener) reply(msg string, fd int) error {
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
		defer func() { _ = unix.Close(fd) }() // sent (or not): our copy goes
	}
	_, _, err := l.ctl.WriteMsgUnix([]byte(msg), oob, nil)
	return err
}

// pair returns a new unix stream socketpair: the host's end as a conn,
// the other as a descriptor.
func pair() (*net.UnixConn, int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, -1, err
	}
	c, err := streamConn(fds[0])
	if err != nil {
		_ = unix.Close(fds[1])
		return nil, -1, err
	}
	return c, fds[1], nil
}

// check answers the forwarder's ready request with a check connection and
// reads it: exactly readyPacket, then end of stream. An error means the
// path does not work (or l was closed).
func (l *egressListener) check() error {
	c, fd, err := pair()
	if err != nil {
		return fmt.Errorf("gvisor: egress check connection: %w", err)
	}
	defer func() { _ = c.Close() }() // a check connection, done with
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = unix.Close(fd)
		return net.ErrClosed
	}
	l.checking = c
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.checking = nil
		l.mu.Unlock()
	}()
	if err := l.reply(connReply, fd); err != nil {
		return fmt.Errorf("gvisor: egress control socket: %w", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(readyTimeout))
	b := make([]byte, len(readyPacket)+1)
	n, err := io.ReadFull(c, b)
	if n != len(readyPacket) || !errors.Is(err, io.ErrUnexpectedEOF) || string(b[:n]) != readyPacket {
		return fmt.Errorf("gvisor: egress check connection: read %q (%v), want %q and end of stream", b[:n], err, readyPacket) //nolint:errorlint // the read error is described, not wrapped: the mismatch is the error
	}
	close(l.ready)
	return nil
}

// connect answers a connection request: a new socketpair, one end sent to
// the forwarder, the other queued for Accept; refusedReply when too many
// connections wait or are open, or when the host cannot make one.
func (l *egressListener) connect(peer sandbox.Peer) error {
	if len(l.conns) >= l.pending || l.open.Load() >= l.maxOpen {
		return l.reply(refusedReply, -1)
	}
	c, fd, err := pair()
	if err != nil {
		return l.reply(refusedReply, -1)
	}
	pc := &peerConn{UnixConn: c, peer: peer, l: l}
	l.open.Add(1)
	// Queued before the forwarder hears of it: once it has its end, Accept
	// yields ours. Should the reply fail, the queued end reads end of
	// stream, which the proxy serves as a client gone.
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		_ = pc.Close()
		_ = unix.Close(fd)
		return net.ErrClosed
	}
	select {
	case l.conns <- pc: // room: loop alone sends, and it checked above
	default:
		_ = pc.Close()
	}
	l.mu.Unlock()
	return l.reply(connReply, fd)
}

// fail records err as why l stopped and closes it.
func (l *egressListener) fail(err error) {
	l.mu.Lock()
	if l.err == nil && !l.closed {
		l.err = err
	}
	l.mu.Unlock()
	_ = l.Close() // it reports nothing
}

// failure is the error l stopped with, nil when it was closed or the
// forwarder went away.
func (l *egressListener) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Accept implements net.Listener.
func (l *egressListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		if err := l.failure(); err != nil {
			return nil, err
		}
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener: it stops serving the control socket and
// closes the connections not yet accepted (accepted ones are their
// owner's). It is safe to call twice.
func (l *egressListener) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		if l.checking != nil {
			_ = l.checking.Close()
		}
		close(l.done)
		l.mu.Unlock()
		_ = l.ctl.Close()
		for {
			select {
			case c := <-l.conns:
				_ = c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// wait closes l and waits for its goroutine.
func (l *egressListener) wait() {
	_ = l.Close() // it reports nothing
	l.wg.Wait()
}

// Addr implements net.Listener: the proxy's address inside the sandbox.
func (l *egressListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port}
}

// peerConn is one connection from inside the sandbox: the host's end of
// a socketpair whose other end the forwarder copies to its client.
type peerConn struct {
	*net.UnixConn
	peer sandbox.Peer
	l    *egressListener
	once sync.Once
}

var _ sandbox.PeerConn = (*peerConn)(nil)

// Close closes the connection and frees its place among maxOpen.
func (c *peerConn) Close() error {
	err := c.UnixConn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// Peer returns the process the forwarder found behind the connection when
// it was accepted inside the sandbox; false when it found none (pid 0).
func (c *peerConn) Peer() (sandbox.Peer, bool) { return c.peer, c.peer.Pid != 0 }

// proxyBox is a box with network mode proxy: a sandbox.EgressSandbox.
type proxyBox struct{ *box }

var _ sandbox.EgressSandbox = proxyBox{}

// Egress implements sandbox.EgressSandbox.
func (b proxyBox) Egress() net.Listener { return b.egress }

// forwarderStdin is what the forwarder's `runsc exec` gets as stdin: the
// control socket's end. Tests replace it to break the path.
var forwarderStdin = func(ctl *os.File) (*os.File, error) { return ctl, nil }

// startForwarder starts the forwarder in the running container, as root
// without capabilities and with no_new_privs (gVisor 20221219 lets it read
// other users' /proc/<pid>/fd for the peer lookup all the same), with the
// control socket as its stdin, and waits until the check connection proved
// the path. The sandbox user can neither signal nor ptrace it, nor bind
// its port, nor open its descriptors.
func (b *box) startForwarder(ctx context.Context) error {
	l, ctl, err := newEgressListener(b.spec.Network.Port(), b.spec.Network.HostConnectionLimit())
	if err != nil {
		return err
	}
	b.egress = l
	defer ctl.Close() // runsc exec has its own copy once started
	stdin, err := forwarderStdin(ctl)
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	if stdin != ctl {
		defer stdin.Close()
	}
	args := []string{wrapperPath, forwardFlag, strconv.Itoa(b.spec.Network.Port())}
	ps := process(sandbox.Spec{}, args, map[string]string{"GOMAXPROCS": "1"}, "/")
	ps.User = specs.User{UID: 0, GID: 0}
	procFile := filepath.Join(b.dir, "forwarder.json")
	if err := writeJSON(procFile, ps); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	// 0600: the forwarder's stdout and stderr are this host file, which
	// the sandbox user must not open through /proc/<pid>/fd.
	logPath := filepath.Join(b.dir, "forwarder.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	defer log.Close()
	// Not bound to ctx: the forwarder lives as long as the container,
	// and its `runsc exec` ends with it.
	cmd := b.rt.runscCmd(context.Background(), b.state(), b.spec.Network.Mode, "exec", "--process", procFile, b.id)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("gvisor: egress forwarder: runsc exec: %w", err)
	}
	exited := make(chan struct{})
	b.forwarder, b.forwarderDone = cmd, exited
	go func() {
		_ = cmd.Wait() // its status is only read when it ends early, below
		close(exited)
	}()
	timer := time.NewTimer(forwarderTimeout)
	defer timer.Stop()
	select {
	case <-l.ready:
		return nil
	case <-exited:
	case <-l.done:
		if err := l.failure(); err != nil {
			// The forwarder got its socket but the path failed.
			return fmt.Errorf("%w: gvisor: network mode proxy needs %s: %w", sandbox.ErrUnenforceable, fdPassing, err)
		}
		// It closed the control socket: it is ending.
		select {
		case <-exited:
		case <-timer.C:
			return fmt.Errorf("gvisor: egress forwarder closed its control socket at start")
		}
	case <-timer.C:
		return fmt.Errorf("gvisor: egress forwarder not ready within %v", forwarderTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
	out, _ := os.ReadFile(logPath)
	msg := strings.TrimSpace(lastLine(out))
	if strings.Contains(msg, fdPassing) {
		return fmt.Errorf("%w: gvisor: network mode proxy needs %s: %s", sandbox.ErrUnenforceable, fdPassing, msg)
	}
	return fmt.Errorf("gvisor: egress forwarder ended at start: %s (%v)", msg, cmd.ProcessState)
}

// forwarderMain is our binary in forwarder mode, inside the container:
// the argument is the port, stdin the control socket.
func forwarderMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "agentbox: bad forwarder arguments")
		return 126
	}
	ctl, err := controlSocket(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: egress forwarder: %s: stdin: %v\n", fdPassing, err)
		return 1
	}
	ln, err := new(net.ListenConfig).Listen(context.Background(), "tcp4", net.JoinHostPort("127.0.0.1", args[0]))
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: egress forwarder: %v\n", err)
		return 1
	}
	// The default profile: ptrace, mount, unshare and the rest are denied
	// to the forwarder too.
	if err := seccomp.Install(seccomp.ProfileDefault, nil); err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: egress forwarder: %v\n", err)
		return 126
	}
	if err := ctl.ready(); err != nil {
		fmt.Fprintf(os.Stderr, "agentbox: egress forwarder: %s: %v\n", fdPassing, err)
		return 1
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			fmt.Fprintf(os.Stderr, "agentbox: egress forwarder: %v\n", err)
			return 1
		}
		go func() {
			if err := forward(c.(*net.TCPConn), ctl); err != nil {
				// The host is gone or broke the protocol: nothing more
				// can be forwarded.
				fmt.Fprintf(os.Stderr, "agentbox: egress forwarder: control socket: %v\n", err)
				os.Exit(1)
			}
		}()
	}
}

// control is the forwarder's end of the control socket. Requests are
// serialized: each waits for its reply.
type control struct {
	mu sync.Mutex
	c  *net.UnixConn
}

// controlSocket makes the control socket of f, which must be a unix
// SOCK_SEQPACKET socket; f is closed.
func controlSocket(f *os.File) (*control, error) {
	defer f.Close()
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	typ, serr := 0, error(nil)
	if err := sc.Control(func(fd uintptr) { typ, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE) }); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("not a socket: %w", serr)
	}
	if typ != unix.SOCK_SEQPACKET {
		return nil, fmt.Errorf("socket type %d, want SOCK_SEQPACKET", typ)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		_ = c.Close()
		return nil, fmt.Errorf("not a unix socket (%T)", c)
	}
	return &control{c: uc}, nil
}

// request sends one request packet and reads the host's reply: the
// connection it carries, errRefused, or another error, after which the
// control socket is of no further use.
func (c *control) request(pkt string) (*net.UnixConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.c.Write([]byte(pkt)); err != nil {
		return nil, err
	}
	buf := make([]byte, len(refusedReply)+1)
	oob := make([]byte, unix.CmsgSpace(4))
	n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
	fds := rights(oob[:oobn])
	if err != nil {
		closeFDs(fds)
		return nil, err
	}
	whole := flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) == 0
	switch {
	case whole && string(buf[:n]) == connReply && len(fds) == 1:
		return streamConn(fds[0])
	case whole && string(buf[:n]) == refusedReply && len(fds) == 0:
		return nil, errRefused
	}
	closeFDs(fds)
	if n == 0 && oobn == 0 {
		return nil, io.EOF
	}
	return nil, fmt.Errorf("unexpected reply %q with %d descriptors", buf[:n], len(fds))
}

// ready sends the first request and proves the check connection it gets.
func (c *control) ready() error {
	conn, err := c.request(readyPacket)
	if err != nil {
		return fmt.Errorf("no connection from the host: %w", err)
	}
	defer func() { _ = conn.Close() }() // the check is written or failed already
	if _, err := io.WriteString(conn, readyPacket); err != nil {
		return fmt.Errorf("check connection: %w", err)
	}
	if err := conn.CloseWrite(); err != nil {
		return fmt.Errorf("check connection: %w", err)
	}
	return nil
}

// lookups serializes peer lookups: each is a walk of /proc (~1-3 ms in
// gVisor), and concurrent ones would each hold a thread in blocking file
// syscalls — threads that count against the sandbox's pids limit.
var lookups sync.Mutex

// forward carries one client connection to a host connection it asks for
// over ctl. It returns an error only when ctl is of no further use; a
// refused connection just closes the client.
func forward(client *net.TCPConn, ctl *control) error {
	defer func() { _ = client.Close() }() // the connection is over
	lookups.Lock()
	peer, _ := findPeer(client)
	lookups.Unlock()
	upstream, err := ctl.request(formatPeerHeader(peer))
	if errors.Is(err, errRefused) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = upstream.Close() }() // likewise
	pipe(client, upstream)
	return nil
}

// halfCloser is a connection that can stop sending and still receive.
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// pipe copies both ways until both directions end; a direction that ends
// with EOF half-closes its destination, an error closes both.
func pipe(a, b halfCloser) {
	var wg sync.WaitGroup
	one := func(dst, src halfCloser) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			_ = a.Close()
			_ = b.Close()
			return
		}
		_ = dst.CloseWrite()
	}
	wg.Add(2)
	go one(a, b)
	go one(b, a)
	wg.Wait()
}

// findPeer finds the process at the other end of an accepted loopback
// connection: its socket is the /proc/net/tcp entry whose local address
// is the connection's remote one and whose remote address is ours, and
// the process is one with an fd linking to that socket's inode (see
// pidOfSocket).
func findPeer(c net.Conn) (sandbox.Peer, bool) {
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return sandbox.Peer{}, false
	}
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return sandbox.Peer{}, false
	}
	inode := tcpInode(data, remote, local)
	if inode == "" {
		return sandbox.Peer{}, false
	}
	pid := pidOfSocket(inode)
	if pid == 0 {
		return sandbox.Peer{}, false
	}
	var name, cmdline string
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		name = strings.TrimSuffix(string(b), "\n")
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		cmdline = strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " ")
	}
	// What the process calls itself: sanitised, a claim, not a fact.
	return sandbox.NewPeer(pid, name, cmdline), true
}

// tcpInode returns the inode of the /proc/net/tcp socket whose local and
// remote addresses are the given ones ("" when there is none).
func tcpInode(data []byte, local, remote *net.TCPAddr) string {
	want := procTCPAddr(local) + " " + procTCPAddr(remote)
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[1]+" "+f[2] != want {
			continue
		}
		if f[9] != "0" {
			return f[9]
		}
	}
	return ""
}

// procTCPAddr formats an IPv4 address as /proc/net/tcp does: the address
// as a native-endian (little-endian here) 32-bit hex number, then the port.
func procTCPAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		return ""
	}
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], a.Port)
}

// pidOfSocket returns the highest pid (not ours) holding socket inode:
// pids are walked newest first, as the client is most often the newest
// process (a process that forked after connecting shares the socket with
// its children; the newest of them is named).
func pidOfSocket(inode string) int {
	target := "socket:[" + inode + "]"
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 && pid != self {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	for i := len(pids) - 1; i >= 0; i-- {
		dir := "/proc/" + strconv.Itoa(pids[i]) + "/fd"
		fds, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(dir + "/" + fd.Name()); err == nil && l == target {
				return pids[i]
			}
		}
	}
	return 0
}
