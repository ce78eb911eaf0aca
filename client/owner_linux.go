package client

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// checksOwner: this system can tell who owns a local daemon's socket.
const checksOwner = true

// daemonOwner returns the user that owns the server end of conn, a
// connection to a daemon on this machine: the peer credentials of a unix
// socket (those of the process that made the listening socket), or for
// loopback TCP the owner the kernel lists in /proc/net/tcp{,6} for the
// listening sockets that can have taken the connection. The listening
// socket is asked, not the connection's own server socket: the kernel
// lists that one as root's until the server accepts it, which the server
// chooses when to do.
func daemonOwner(conn net.Conn) (int, error) {
	switch c := conn.(type) {
	case *net.UnixConn:
		rc, err := c.SyscallConn()
		if err != nil {
			return 0, err
		}
		var cred *syscall.Ucred
		var cerr error
		if err := rc.Control(func(fd uintptr) {
			cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
		}); err != nil {
			return 0, err
		}
		if cerr != nil {
			return 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
		}
		return int(cred.Uid), nil
	case *net.TCPConn:
		ap := c.RemoteAddr().(*net.TCPAddr).AddrPort()
		return listenerOwner(netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()))
	}
	return 0, fmt.Errorf("cannot tell who owns a %T", conn)
}

// tcpListen is the state of a listening socket in /proc/net/tcp{,6}.
const tcpListen = "0A"

// listenerOwner returns the owner of the listening sockets that can take a
// connection to server: those on its port at its address or at the
// unspecified address (an IPv6 one takes IPv4 connections too, unless it
// is IPv6-only, which /proc does not say). The kernel lets sockets share a
// port only when they have one owner (SO_REUSEPORT), so two owners mean a
// doubt, and a refusal.
func listenerOwner(server netip.AddrPort) (int, error) {
	owner := -1
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if errors.Is(err, fs.ErrNotExist) && f == "/proc/net/tcp6" {
			continue // no IPv6
		}
		if err != nil {
			return 0, err
		}
		for line := range bytes.Lines(b) {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid ...
			col := bytes.Fields(line)
			if len(col) < 8 || string(col[3]) != tcpListen {
				continue
			}
			la, err := parseProcAddr(string(col[1]))
			if err != nil || la.Port() != server.Port() {
				continue
			}
			if !takes(la.Addr(), server.Addr()) {
				continue
			}
			uid, err := strconv.Atoi(string(col[7]))
			if err != nil {
				return 0, fmt.Errorf("%s: bad uid %q", f, col[7])
			}
			if owner >= 0 && uid != owner {
				return 0, fmt.Errorf("users %d and %d both listen on port %d", owner, uid, server.Port())
			}
			owner = uid
		}
	}
	if owner < 0 {
		return 0, fmt.Errorf("no listening socket for %s in /proc/net/tcp", server)
	}
	return owner, nil
}

// takes reports whether a socket listening at address l can take a
// connection to address dst (on its port).
func takes(l, dst netip.Addr) bool {
	switch {
	case l == dst:
		return true
	case l.IsUnspecified():
		return l.Is6() || dst.Is4()
	}
	return false
}

// parseProcAddr reads an address of /proc/net/tcp{,6}: the address as
// 32-bit words, each printed in hex as the kernel holds it in memory, a
// colon, and the port in hex. An IPv4-mapped address is returned as IPv4.
func parseProcAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok || len(a) != 8 && len(a) != 32 {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil {
		return netip.AddrPort{}, err
	}
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(raw[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	addr, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}
