package process

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Egress in the process runtime. With Network.Mode "proxy" the sandbox's
// network namespace holds only lo, and the init — the small forwarder
// inside — listens on 127.0.0.1:<port> there. It hands every connection it
// accepts to the supervisor whole, as a descriptor over a SOCK_SEQPACKET
// unix socket pair (one SCM_RIGHTS packet per connection), instead of
// copying bytes: the egress proxy then serves the sandbox's own TCP
// connection, so the forwarder adds no copy and no latency per request,
// there is no socket file a workload could reach, and the supervisor sees
// the connection's real peer (sandbox.PeerConn).

// egressPacket is the one-byte payload of a connection packet.
const egressPacket = 'c'

// serveEgress is the init's forwarder: accept on 127.0.0.1:port inside
// the sandbox and pass each connection to the supervisor over sock (fd).
// It returns once the listener is up; the loop ends when the supervisor
// goes away.
func serveEgress(port, fd int) error {
	f := os.NewFile(uintptr(fd), "egress")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("egress socket: %w", err)
	}
	sock, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return errors.New("egress socket is not a unix socket")
	}
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		_ = sock.Close() // the listen error is the one to report
		return fmt.Errorf("listen on 127.0.0.1:%d: %w", port, err)
	}
	go func() {
		// Both go with the sandbox; nothing is left to report to.
		defer func() { _ = ln.Close() }()
		defer func() { _ = sock.Close() }()
		for {
			tc, err := ln.AcceptTCP()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				if errors.Is(err, unix.EMFILE) || errors.Is(err, unix.ENFILE) || errors.Is(err, unix.ECONNABORTED) {
					continue
				}
				return
			}
			cf, err := tc.File()
			_ = tc.Close() // the duplicate in cf is what goes on
			if err != nil {
				continue
			}
			_, _, err = sock.WriteMsgUnix([]byte{egressPacket}, unix.UnixRights(int(cf.Fd())), nil)
			cf.Close()
			if err != nil {
				return // the supervisor is gone: the sandbox is ending
			}
		}
	}()
	return nil
}

// egressListener is the supervisor's end: the net.Listener of
// sandbox.EgressSandbox. It holds at most maxOpen connections on the host
// (handed out and not yet closed, or waiting for Accept): past that a
// received connection is closed at once, so a sandbox whose proxy falls
// behind cannot make the daemon hold more descriptors than its bound.
type egressListener struct {
	sock    *net.UnixConn
	port    int
	initPid int
	maxOpen int64
	open    atomic.Int64
	conns   chan net.Conn
	closed  chan struct{}
	once    sync.Once
}

// newEgressListener receives the sandbox's proxy connections on sock, at
// most maxOpen open at once (sandbox.Network.HostConnectionLimit).
func newEgressListener(sock *net.UnixConn, port, initPid, maxOpen int) *egressListener {
	l := &egressListener{sock: sock, port: port, initPid: initPid, maxOpen: int64(maxOpen),
		conns: make(chan net.Conn), closed: make(chan struct{})}
	go l.receive()
	return l
}

// receive turns the init's packets into connections. The init is not
// trusted further than its own sandbox: anything but one TCP socket bound
// to the proxy's loopback address inside is dropped.
func (l *egressListener) receive() {
	defer func() { _ = l.Close() }()
	buf := make([]byte, 16)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, flags, _, err := l.sock.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		fds := parseRights(oob[:oobn])
		if flags&unix.MSG_CTRUNC != 0 || n != 1 || buf[0] != egressPacket || len(fds) != 1 {
			closeAll(fds)
			continue
		}
		if l.open.Load() >= l.maxOpen {
			closeAll(fds) // past the bound: the proxy never sees it
			continue
		}
		c, ok := l.wrap(fds[0])
		if !ok {
			continue
		}
		l.open.Add(1)
		select {
		case l.conns <- c:
		case <-l.closed:
			c.Close()
			return
		}
	}
}

// wrap makes a connection of a received descriptor, which it owns.
func (l *egressListener) wrap(fd int) (net.Conn, bool) {
	f := os.NewFile(uintptr(fd), "egress-conn")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, false
	}
	tc, ok := c.(*net.TCPConn)
	la, _ := c.LocalAddr().(*net.TCPAddr)
	if !ok || la == nil || !la.IP.Equal(net.IPv4(127, 0, 0, 1)) || la.Port != l.port {
		c.Close()
		return nil, false
	}
	return &peerConn{TCPConn: tc, initPid: l.initPid, l: l}, true
}

// Accept implements net.Listener.
func (l *egressListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener; connections already accepted stay open.
func (l *egressListener) Close() error {
	l.once.Do(func() {
		close(l.closed)
		_ = l.sock.Close() // ends receive; nothing more comes from the init
	})
	return nil
}

// Addr is the proxy's address inside the sandbox.
func (l *egressListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port}
}

// peerConn is a sandbox's connection to its proxy, able to name the
// process that opened it.
type peerConn struct {
	*net.TCPConn
	initPid int
	l       *egressListener
	once    sync.Once
}

// Close closes the connection and frees its place among the listener's.
func (c *peerConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

var _ sandbox.PeerConn = (*peerConn)(nil)

// Peer finds the process at the other end: the client socket's inode in
// the sandbox's /proc/net/tcp (seen through the init), then the process of
// the sandbox holding a descriptor of it.
func (c *peerConn) Peer() (sandbox.Peer, bool) {
	ra, _ := c.RemoteAddr().(*net.TCPAddr)
	la, _ := c.LocalAddr().(*net.TCPAddr)
	if ra == nil || la == nil {
		return sandbox.Peer{}, false
	}
	inode, err := socketInode(c.initPid, ra, la)
	if err != nil {
		return sandbox.Peer{}, false
	}
	pid, err := socketOwner(c.initPid, inode)
	if err != nil {
		return sandbox.Peer{}, false
	}
	return describeProcess(pid)
}

// procAddr writes an IPv4 address and port the way /proc/net/tcp does on
// a little-endian machine ("0100007F:0C38").
func procAddr(a *net.TCPAddr) string {
	ip4 := a.IP.To4()
	if ip4 == nil {
		return ""
	}
	return fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(ip4), a.Port)
}

// socketInode finds, in the network namespace of pid, the inode of the
// TCP socket whose local address is local and remote address is remote.
func socketInode(pid int, local, remote *net.TCPAddr) (string, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/tcp")
	if err != nil {
		return "", err
	}
	defer f.Close()
	want1, want2 := procAddr(local), procAddr(remote)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 10 && fields[1] == want1 && fields[2] == want2 && fields[9] != "0" {
			return fields[9], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("socket not found")
}

// socketOwner finds the process in pid's network namespace holding the
// socket with inode.
func socketOwner(pid int, inode string) (int, error) {
	netns, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/ns/net")
	if err != nil {
		return 0, err
	}
	link := "socket:[" + inode + "]"
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		base := "/proc/" + e.Name()
		if ns, err := os.Readlink(base + "/ns/net"); err != nil || ns != netns {
			continue
		}
		fds, err := os.ReadDir(base + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if l, err := os.Readlink(base + "/fd/" + fd.Name()); err == nil && l == link {
				return p, nil
			}
		}
	}
	return 0, errors.New("no process holds the socket")
}

// describeProcess reads a host pid's name (comm), command line and pid
// inside its own pid namespace. The name and command line are what the
// process made them (prctl, argv): sandbox.NewPeer sanitises and cuts them.
func describeProcess(pid int) (sandbox.Peer, bool) {
	base := "/proc/" + strconv.Itoa(pid)
	status, err := os.ReadFile(base + "/status")
	if err != nil {
		return sandbox.Peer{}, false
	}
	var nspid int
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				nspid, _ = strconv.Atoi(f[len(f)-1])
			}
		}
	}
	var name, cmdline string
	if b, err := os.ReadFile(base + "/comm"); err == nil {
		name = strings.TrimSuffix(string(b), "\n")
	}
	if cl, err := os.ReadFile(base + "/cmdline"); err == nil {
		cmdline = string(bytes.ReplaceAll(bytes.TrimRight(cl, "\x00"), []byte{0}, []byte{' '}))
	}
	return sandbox.NewPeer(nspid, name, cmdline), true
}
