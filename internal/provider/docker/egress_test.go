package docker_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	dockerclient "github.com/moby/moby/client"

	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/docker"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
)

// agentImage is the agent image with the claude install of the agent
// cache (scripts/test installs it), built once per test binary and removed
// at its end. Without the install the test skips, saying so.
func agentImage(t *testing.T, p *docker.Provider) (tag string, claude install.Installed) {
	t.Helper()
	real, ok, err := install.Lookup("claude")
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Skip("claude is not in the agent cache: run `agentbox agents install claude` (scripts/test does)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tag, err = p.BuildAgentImage(ctx, sdktest.Binary(t), []string{real.Dir})
	if err != nil {
		t.Fatal(err)
	}
	return keep(tag), real
}

// execIn runs cmd in the running container id as its user and returns
// its output and exit code.
func execIn(t *testing.T, id string, cmd ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	dc, err := dockerclient.New(dockerclient.WithHost(dockerHost(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	ex, err := dc.ExecCreate(ctx, id, dockerclient.ExecCreateOptions{Cmd: cmd, AttachStdout: true, AttachStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	at, err := dc.ExecAttach(ctx, ex.ID, dockerclient.ExecAttachOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer at.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, at.Reader); err != nil {
		t.Fatal(err)
	}
	res, err := dc.ExecInspect(ctx, ex.ID, dockerclient.ExecInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out.String(), res.ExitCode
}

// hostServer answers on the host's loopback and counts what reaches it.
type hostServer struct {
	port int
	hits atomic.Int64
}

func startHostServer(t *testing.T, body string) *hostServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &hostServer{port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs.hits.Add(1)
		fmt.Fprint(w, body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return hs
}

// probeScript is Node inside the container: a request through the egress
// proxy's address (127.0.0.1:3128) to each port given, one straight to
// the first (the container's own loopback, where nothing listens), and
// the container's network interfaces.
const probeScript = `
const http = require('http'), fs = require('fs');
const viaProxy = port => new Promise(r => {
  const req = http.request({host: '127.0.0.1', port: 3128, path: 'http://127.0.0.1:' + port + '/', headers: {host: '127.0.0.1:' + port}},
    res => { let b = ''; res.on('data', d => b += d); res.on('end', () => r(res.statusCode + ' ' + b.split('\n')[0])); });
  req.on('error', e => r('error ' + e.code)); req.end();
});
const direct = port => new Promise(r => {
  const req = http.request({host: '127.0.0.1', port}, res => r('status ' + res.statusCode));
  req.on('error', e => r('error ' + e.code)); req.end();
});
(async () => {
  const ports = process.argv.slice(1);
  for (const p of ports) console.log('proxy ' + p + ': ' + await viaProxy(p));
  console.log('direct ' + ports[0] + ': ' + await direct(ports[0]));
  const ifs = fs.readFileSync('/proc/net/dev', 'utf8').split('\n').slice(2).map(l => l.split(':')[0].trim()).filter(Boolean);
  console.log('interfaces: ' + ifs.join(','));
})();
`

// TestEgressCarried: a sandbox keeps network none (loopback only), and
// its only way out is the socket the provider carries its egress on: a
// request to the egress proxy's address inside reaches an allowed server
// on the host's loopback through the host's gate, one to a port the
// policy does not allow is refused (403) and audited on the host, and
// never reaches its server; the host's loopback is not reachable
// directly. Once the carrier stops, nothing gets out.
func TestEgressCarried(t *testing.T) {
	p, dir := newProvider(t)
	tag, _ := agentImage(t, p)
	allowed := startHostServer(t, "hello from the host")
	denied := startHostServer(t, "must not be reached")

	var mu sync.Mutex
	var records []egress.Record
	srv, err := egress.New(egress.Options{Audit: func(r egress.Record) {
		mu.Lock()
		defer mu.Unlock()
		records = append(records, r)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	gate, err := srv.Gate(egress.Config{Scope: "session", ID: "ses_carried", Network: sandbox.Network{
		Mode: sandbox.NetworkProxy, ProxyPort: provider.EgressPort, Default: egress.DefaultDeny,
		Allow: []string{fmt.Sprintf("127.0.0.1:%d", allowed.port)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close()

	s := spec(t, "test-"+random(t))
	s.Options = map[string]string{"image": tag}
	sb := create(t, p, s)
	stop, err := p.CarryEgress(t.Context(), sb.ID, gate.Serve)
	if err != nil {
		t.Fatal(err)
	}
	out, code := execIn(t, sb.ID, "/usr/bin/node", "-e", probeScript, fmt.Sprint(allowed.port), fmt.Sprint(denied.port))
	if code != 0 {
		t.Fatalf("the probe exited %d:\n%s", code, out)
	}
	for _, want := range []string{
		fmt.Sprintf("proxy %d: 200 hello from the host\n", allowed.port),
		fmt.Sprintf("proxy %d: 403 ", denied.port),
		fmt.Sprintf("direct %d: error ECONNREFUSED\n", allowed.port),
		"interfaces: lo\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the probe printed:\n%s\nwant a line %q", out, want)
		}
	}
	if allowed.hits.Load() != 1 || denied.hits.Load() != 0 {
		t.Errorf("hits: allowed %d, denied %d; want 1 and 0", allowed.hits.Load(), denied.hits.Load())
	}
	mu.Lock()
	var allow, deny bool
	for _, r := range records {
		switch {
		case r.Decision == "allow" && r.Port == allowed.port && r.ID == "ses_carried":
			allow = true
		case r.Decision == "deny" && r.Port == denied.port && r.ID == "ses_carried" && r.Reason != "":
			deny = true
		}
	}
	mu.Unlock()
	if !allow || !deny {
		t.Errorf("audit records %+v; want an allow of port %d and a deny with a reason of port %d", records, allowed.port, denied.port)
	}
	// The socket is the container user's alone.
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		socks, _ := os.ReadDir(dir)
		for _, d := range socks {
			st, err := os.Stat(dir + "/" + d.Name() + "/egress.sock")
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("egress socket of %s: %v, %v; want mode 0600", d.Name(), st, err)
			}
		}
	}

	// Not carried any more: the proxy's address leads nowhere.
	stop()
	out, _ = execIn(t, sb.ID, "/usr/bin/node", "-e", probeScript, fmt.Sprint(allowed.port))
	if !strings.Contains(out, fmt.Sprintf("proxy %d: error ", allowed.port)) || allowed.hits.Load() != 1 {
		t.Errorf("after stop the probe printed:\n%s\nwant the proxy's address to fail (hits %d)", out, allowed.hits.Load())
	}
}
