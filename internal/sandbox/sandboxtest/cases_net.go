package sandboxtest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Network: §5 rows 21, 26, 27, 28 and 30, for a sandbox without egress
// (network mode none; cases_egress.go has the proxy's rows). Host
// listeners opened by the test count every connection; none may arrive.

// pyConnect is a helper for TCP connect probes with a bounded wait.
const pyConnect = `
def connect(name, host, port, fam=socket.AF_INET, proto=0):
    s = socket.socket(fam, socket.SOCK_STREAM, proto)
    s.settimeout(5)
    try:
        op(name, s.connect, (host, port))
    finally:
        s.close()
`

func networkCases() []tcase {
	return []tcase{
		{
			name: "21_direct_tcp_to_host",
			want: map[string]string{
				"loopback": "ECONNREFUSED|ENETUNREACH", "loopback6": "ECONNREFUSED|ENETUNREACH|EADDRNOTAVAIL|EAFNOSUPPORT",
				"host_ip": "ENETUNREACH", "metadata": "ENETUNREACH", "rfc1918": "ENETUNREACH", "public": "ENETUNREACH",
			},
			run: func(h *harness) {
				hits := &counter{}
				port, ok := listenTCP(h.t, "127.0.0.1:0", hits)
				if !ok {
					h.t.Fatal("cannot listen on 127.0.0.1")
				}
				port6, ok := listenTCP(h.t, "[::1]:0", hits)
				if !ok {
					port6 = port // no IPv6 on the host: the probe still runs
				}
				hostIP := hostAddress()
				hostPort := port
				if hostIP != "" {
					if p, ok := listenTCP(h.t, net.JoinHostPort(hostIP, "0"), hits); ok {
						hostPort = p
					}
				} else {
					hostIP = "192.0.2.1" // TEST-NET-1: there is no non-loopback address
				}
				h.create()
				r := h.python(pyConnect + fmt.Sprintf(`
connect("loopback", "127.0.0.1", %d)
connect("loopback6", "::1", %d, socket.AF_INET6)
connect("host_ip", %q, %d)
connect("metadata", "169.254.169.254", 80)
connect("rfc1918", "10.0.0.1", 80)
connect("public", "1.1.1.1", 443)
`, port, port6, hostIP, hostPort))
				h.expectExit(r, 0)
				h.expect(r)
				if n := hits.get(); n != 0 {
					h.t.Errorf("host listeners accepted %d connections from the sandbox", n)
				}
			},
		},
		{
			name: "26_dns_fails",
			want: map[string]string{
				"resolve_example": "gaierror", "resolve_metadata": "gaierror", "getent": "failed",
				"udp53_host_resolver": "ENETUNREACH|ECONNREFUSED|timeout", "udp53_public": "ENETUNREACH",
				"udp53_loopback": "ECONNREFUSED|ENETUNREACH|timeout",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(fmt.Sprintf(`
import subprocess
op("resolve_example", socket.getaddrinfo, "example.com", 443)
op("resolve_metadata", socket.getaddrinfo, "metadata.google.internal", 80)
p = subprocess.run(["getent", "hosts", "example.com"], capture_output=True)
R("getent", "failed" if p.returncode != 0 else "resolved")
def dnsq(server):
    # A well-formed query for example.com/A; any answer is a leak.
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(2)
    try:
        s.connect((server, 53))
        s.send(q)
        s.recv(512)
    finally:
        s.close()
    return "answered"
def dns(name, server):
    try:
        R(name, dnsq(server))
    except socket.timeout:
        R(name, "timeout")
    except OSError as e:
        R(name, E(e.errno))
dns("udp53_host_resolver", %q)
dns("udp53_public", "8.8.8.8")
dns("udp53_loopback", "127.0.0.1")
`, hostResolver()))
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "27_raw_sockets_and_mptcp",
			want: map[string]string{
				"raw_icmp": "EPERM", "raw_icmp6": "EPERM", "packet": "EPERM",
				"mptcp": "EPERM", "mptcp6": "EPERM", "ip_link_down": "EPERM", "ip_route_add": "EPERM",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(`
import subprocess
op("raw_icmp", socket.socket, socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
op("raw_icmp6", socket.socket, socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
op("packet", socket.socket, AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
op("mptcp", socket.socket, socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
op("mptcp6", socket.socket, socket.AF_INET6, socket.SOCK_STREAM, IPPROTO_MPTCP)
def ip(name, args):
    try:
        p = subprocess.run(["ip"] + args, capture_output=True, timeout=30)
    except OSError as e:
        R(name, E(e.errno))
        return
    err = p.stderr.decode(errors="replace")
    if p.returncode == 0:
        R(name, "ok")
    elif "Operation not permitted" in err:
        R(name, "EPERM")
    elif "Permission denied" in err:
        R(name, "EACCES")
    else:
        R(name, "failed:" + err.strip().replace(" ", "_")[:60])
ip("ip_link_down", ["link", "set", "lo", "down"])
ip("ip_route_add", ["route", "add", "10.99.0.0/16", "dev", "lo"])
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "28_host_unix_sockets_absent",
			want: map[string]string{
				"docker": "ENOENT", "containerd": "ENOENT", "dbus": "ENOENT", "x11": "ENOENT",
				"ssh_agent": "ENOENT", "abstract_host": "ECONNREFUSED|EPERM", "abstract_x11": "ECONNREFUSED|EPERM",
				"ssh_auth_sock_env": "unset",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(fmt.Sprintf(`
def unix(name, addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        op(name, s.connect, addr)
    finally:
        s.close()
unix("docker", "/var/run/docker.sock")
unix("containerd", "/run/containerd/containerd.sock")
unix("dbus", "/run/dbus/system_bus_socket")
unix("x11", "/tmp/.X11-unix/X0")
unix("ssh_agent", %q)
unix("abstract_host", "\0" + %q)
unix("abstract_x11", "\0/tmp/.X11-unix/X0")
R("ssh_auth_sock_env", "unset" if "SSH_AUTH_SOCK" not in os.environ else "set")
`, h.sh.agentSock, h.sh.abstract))
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			// Landlock alone (the host's network, no netns) is bypassed by
			// MPTCP sockets on this kernel: the seccomp rule must block them
			// whatever the network mode.
			name: "30_mptcp_blocked_on_host_network",
			want: map[string]string{"mptcp": "EPERM", "mptcp6": "EPERM", "mptcp_connect": "EPERM", "tcp_host_listener": "ok"},
			run: func(h *harness) {
				hits := &counter{}
				port, ok := listenTCP(h.t, "127.0.0.1:0", hits)
				if !ok {
					h.t.Fatal("cannot listen on 127.0.0.1")
				}
				h.create(func(s *sandbox.Spec) { s.Network.Mode = sandbox.NetworkHost })
				r := h.python(pyConnect + fmt.Sprintf(`
op("mptcp", socket.socket, socket.AF_INET, socket.SOCK_STREAM, IPPROTO_MPTCP)
op("mptcp6", socket.socket, socket.AF_INET6, socket.SOCK_STREAM, IPPROTO_MPTCP)
try:
    connect("mptcp_connect", "127.0.0.1", %d, socket.AF_INET, IPPROTO_MPTCP)
except OSError as e:
    R("mptcp_connect", E(e.errno))
# The control: this sandbox does share the host's network, so the MPTCP
# result above is the seccomp rule's doing, not the network namespace's.
connect("tcp_host_listener", "127.0.0.1", %d)
`, port, port))
				h.expectExit(r, 0)
				h.expect(r)
				if want := h.want("tcp_host_listener"); want == "ok" {
					if n := hits.settle(1); n != 1 {
						h.t.Errorf("the host listener saw %d connections, want exactly the plain TCP control", n)
					}
				}
			},
		},
	}
}

// hostAddress returns a non-loopback IPv4 address of the host, or "".
func hostAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
	}
	return ""
}

// hostResolver returns the host's first IPv4 nameserver (8.8.8.8 if none).
func hostResolver() string {
	f, err := os.Open("/etc/resolv.conf")
	if err != nil {
		return "8.8.8.8"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" && net.ParseIP(fields[1]).To4() != nil {
			return fields[1]
		}
	}
	return "8.8.8.8"
}
