package process

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestEgressTransport checks the process runtime's side of the egress
// proxy: a connection to 127.0.0.1:<port> inside arrives on Egress() as
// the sandbox's own connection, which names the process that opened it,
// and nothing else leaves the sandbox.
func TestEgressTransport(t *testing.T) {
	sb, _ := newBox(t, func(s *sandbox.Spec) {
		s.Network = sandbox.Network{Mode: sandbox.NetworkProxy, ProxyPort: 3128}
		s.ReadOutsideWorkspace = true
	})
	es, ok := sb.(sandbox.EgressSandbox)
	if !ok || es.Egress() == nil {
		t.Fatal("a proxy-mode sandbox has no Egress listener")
	}
	if !strings.Contains(strings.Join(sb.Info().Mechanisms, " "), "egress-proxy:127.0.0.1:3128") {
		t.Errorf("mechanisms %v do not list the egress proxy", sb.Info().Mechanisms)
	}
	type got struct {
		line string
		peer sandbox.Peer
		ok   bool
	}
	res := make(chan got, 1)
	go func() {
		c, err := es.Egress().Accept()
		if err != nil {
			res <- got{line: "accept: " + err.Error()}
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadString('\n')
		g := got{line: strings.TrimSpace(line)}
		if pc, ok := c.(sandbox.PeerConn); ok {
			g.peer, g.ok = pc.Peer()
		}
		_, _ = io.WriteString(c, "pong\n")
		res <- g
	}()
	out := mustRun(t, sb, `exec python3 -c '
import socket
s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
s.sendall(b"ping from the sandbox\n")
print(s.makefile().readline().strip())
'`)
	if strings.TrimSpace(out) != "pong" {
		t.Errorf("the sandbox read %q, want pong", out)
	}
	select {
	case g := <-res:
		if g.line != "ping from the sandbox" {
			t.Errorf("the host read %q", g.line)
		}
		if !g.ok || g.peer.Name != "python3" || !strings.Contains(g.peer.CommandLine, "create_connection") || g.peer.Pid <= 1 {
			t.Errorf("peer %+v (found %v), want the python3 process with its pid inside", g.peer, g.ok)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no connection arrived on Egress()")
	}

	// Only loopback exists: other ports inside are closed, the host is
	// unreachable.
	var hits atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	e, out, _ := run(t, sb, sh(fmt.Sprintf(`python3 -c '
import socket, errno
for host, port in (("127.0.0.1", %d), ("10.0.0.1", 80), ("1.1.1.1", 443)):
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect((host, port))
        print("connected", host)
    except OSError as e:
        print(errno.errorcode.get(e.errno, e.errno))
'`, port)))
	if e.Code != 0 || strings.Contains(out, "connected") || hits.Load() != 0 {
		t.Errorf("direct connections from the sandbox: exit %d, %q, host saw %d", e.Code, out, hits.Load())
	}
}
