package docker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/docker"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
)

// limitsScript is Node in an exec's container: the container's memory
// and task limits from its cgroup, the size and inodes of /tmp and of the
// working directory, a write past the disk limit, and a request through
// the egress proxy's address to each port given.
const limitsScript = `
const fs = require('fs'), http = require('http');
const rd = (...ps) => { for (const p of ps) { try { return fs.readFileSync(p, 'utf8').trim(); } catch (e) {} } return 'none'; };
console.log('memory ' + rd('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'));
console.log('pids ' + rd('/sys/fs/cgroup/pids.max', '/sys/fs/cgroup/pids/pids.max'));
for (const [n, d] of [['tmp', '/tmp'], ['cwd', process.cwd()]]) { const s = fs.statfsSync(d); console.log('fs ' + n + ' ' + s.bsize * s.blocks + ' ' + s.files); }
try { fs.writeFileSync('/tmp/big', Buffer.alloc(40 << 20)); console.log('big written'); } catch (e) { console.log('big ' + e.code); }
const get = port => new Promise(r => {
  const req = http.request({host: '127.0.0.1', port: 3128, path: 'http://127.0.0.1:' + port + '/', headers: {host: '127.0.0.1:' + port}},
    res => { let b = ''; res.on('data', d => b += d); res.on('end', () => r(res.statusCode + ' ' + b.split('\n')[0])); });
  req.on('error', e => r('error ' + e.code)); req.end();
});
(async () => { for (const p of process.argv.slice(1)) console.log('proxy ' + p + ': ' + await get(p)); })();
`

// policyHost is a host daemon in the test process with the Docker
// provider (the tool image) under a global policy that lets a request
// allow the host's loopback.
func policyHost(t *testing.T, p *docker.Provider) (*client.Client, string) {
	t.Helper()
	dataDir := t.TempDir()
	global := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(global, []byte(`version: 1
resources: {memory: 8Gi, cpus: 4, pids: 4096, timeout: 24h, disk: 20Gi, files: 1000000, output: 64Mi}
filesystem: {read_outside_workspace: true}
network: {mode: proxy, default: ask, allow: ["*", "127.0.0.0/8"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := provider.NewRegistry()
	reg.Register(p)
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", DataDir: dataDir, Log: slog.New(slog.DiscardHandler), GlobalPolicy: global,
		Providers: reg, ProviderOptions: map[string]map[string]string{docker.Name: {"image": toolImage(t, p)}},
		ProviderBinary: sdktest.Binary(t), StartTimeout: 3 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = d.Shutdown(sctx)
	})
	c, err := client.New(d.URL(), client.WithToken(d.Token()))
	if err != nil {
		t.Fatal(err)
	}
	return c, dataDir
}

// TestExecPolicyInContainer: an exec's policy is the fresh container's:
// its memory and task limits (plus the inner daemon's allowance), /tmp and
// the workspace bounded by its disk and files limits, a write past them
// refused; its network allow rule lets a request through the host's gate
// to that server only, and network none carries nothing.
func TestExecPolicyInContainer(t *testing.T) {
	p, _ := newProvider(t)
	c, _ := policyHost(t, p)
	allowed := startHostServer(t, "hello from the host")
	denied := startHostServer(t, "must not be reached")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	pol := fmt.Sprintf(`{"version":1,"resources":{"memory":"200Mi","pids":100,"cpus":0.5,"disk":"32Mi","files":500,"timeout":"60s"},"network":{"allow":["127.0.0.1:%d"]}}`, allowed.port)
	res, err := c.Exec(ctx, client.ExecRequest{Provider: docker.Name, Policy: json.RawMessage(pol),
		Argv: []string{"node", "-e", limitsScript, fmt.Sprint(allowed.port), fmt.Sprint(denied.port)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("memory %d\n", 200<<20+docker.InnerMemoryAllowance),
		fmt.Sprintf("pids %d\n", 100+docker.InnerPidsAllowance),
		fmt.Sprintf("fs tmp %d 500\n", 32<<20),
		fmt.Sprintf("fs cwd %d 500\n", 32<<20),
		"big ENOSPC\n",
		fmt.Sprintf("proxy %d: 200 hello from the host\n", allowed.port),
		fmt.Sprintf("proxy %d: 403 ", denied.port),
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("the exec printed:\n%s%s\nwant a line %q", res.Stdout, res.Stderr, want)
		}
	}
	if res.Sandbox.Runtime != "container" || allowed.hits.Load() != 1 || denied.hits.Load() != 0 {
		t.Errorf("sandbox %+v, hits: allowed %d, denied %d; want the container runtime, 1 and 0", res.Sandbox, allowed.hits.Load(), denied.hits.Load())
	}

	res, err = c.Exec(ctx, client.ExecRequest{Provider: docker.Name, Policy: json.RawMessage(`{"version":1,"network":{"mode":"none"}}`),
		Argv: []string{"node", "-e", limitsScript, fmt.Sprint(allowed.port)}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Stdout, fmt.Sprintf("proxy %d: error ", allowed.port)) || allowed.hits.Load() != 1 {
		t.Errorf("under network none the exec printed:\n%s\nwant the proxy's address to lead nowhere (hits %d)", res.Stdout, allowed.hits.Load())
	}
}

// TestSessionPolicyInContainer: a session's policy with network allow
// rules and resource limits is accepted on Docker: its container has the
// limits, its directory is the bounded tmpfs, and a command of its agent
// reaches the allowed server through the host's gate, and not another.
func TestSessionPolicyInContainer(t *testing.T) {
	p, dir := newProvider(t)
	c, dataDir := policyHost(t, p)
	allowed := startHostServer(t, "hello from the host")
	denied := startHostServer(t, "must not be reached")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	pol := fmt.Sprintf(`{"version":1,"resources":{"memory":"300Mi","pids":200,"disk":"64Mi","files":3000},"network":{"allow":["127.0.0.1:%d"]}}`, allowed.port)
	sess, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", Provider: docker.Name, PermissionMode: "bypass", Policy: json.RawMessage(pol)})
	if err != nil {
		t.Fatal(err)
	}
	key, err := relay.LoadKey(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	_, sandboxID, _, _, ok := relay.Inner(key, sess.NativeSessionID)
	if !ok {
		t.Fatalf("native id %q names no sandbox", sess.NativeSessionID)
	}
	dc, err := dockerclient.New(dockerclient.WithHost(dockerHost(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	ins, err := dc.ContainerInspect(ctx, sandboxID, dockerclient.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.Container.HostConfig
	if hc.Memory != 300<<20+docker.InnerMemoryAllowance || hc.PidsLimit == nil || *hc.PidsLimit != 200+docker.InnerPidsAllowance || !strings.Contains(hc.Tmpfs["/tmp"], "nr_inodes=3000") {
		t.Errorf("the container's limits: memory %d, pids %v, tmpfs %v", hc.Memory, hc.PidsLimit, hc.Tmpfs)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(dir, ins.Container.Config.Labels[docker.LabelSandbox]), &st); err != nil || st.Files != 3000 || int64(st.Blocks)*st.Bsize != 64<<20 {
		t.Errorf("the sandbox's directory: %d inodes, %d bytes, %v; want the tmpfs of 3000 and 64 MiB", st.Files, int64(st.Blocks)*st.Bsize, err)
	}

	fetch := func(port int) string {
		return fmt.Sprintf(`node -e "require('http').request({host:'127.0.0.1',port:3128,path:'http://127.0.0.1:%d/',headers:{host:'127.0.0.1:%d'}},r=>console.log('status',r.statusCode)).on('error',e=>console.log('error',e.code)).end()"`, port, port)
	}
	tr, err := c.Send(ctx, sess.ID, mock.ScriptPrompt(
		mock.Step{Kind: mock.KindCommand, Command: fetch(allowed.port)},
		mock.Step{Kind: mock.KindCommand, Command: fetch(denied.port)}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(ctx, sess.ID, tr.TurnID, 0, nil); err != nil {
		t.Fatal(err)
	}
	if allowed.hits.Load() != 1 || denied.hits.Load() != 0 {
		t.Errorf("hits: allowed %d, denied %d; want 1 and 0", allowed.hits.Load(), denied.hits.Load())
	}
	if err := c.DeleteSession(ctx, sess.ID, true); err != nil {
		t.Fatal(err)
	}
}
