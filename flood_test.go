package agentbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
)

// floodCode opens connections to the sandbox's egress proxy from two
// processes, sends nothing on them and holds them all, then says how many
// it opened. It prints "flooding" once the first thousands are open.
const floodCode = `
import os, resource, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
PER, PROCS, HOLD = %d, 2, %d
kids = []
for p in range(PROCS):
    pid = os.fork()
    if pid == 0:
        held, failed, t0 = [], 0, time.time()
        for i in range(PER):
            try:
                s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
                held.append(s)
            except OSError:
                failed += 1
            if p == 0 and i == 3000:
                print("flooding", flush=True)
        print("process %%d: opened in %%.1fs" %% (p, time.time() - t0), flush=True)
        time.sleep(HOLD)
        # What the proxy answered each: a connection past a bound got a
        # 429 (and its end), one it holds got nothing.
        refused = 0
        for s in held:
            s.setblocking(False)
            try:
                if s.recv(12, socket.MSG_PEEK).startswith(b"HTTP/1.1 429"):
                    refused += 1
            except OSError:
                pass
        print("process %%d: %%d connections opened, %%d failed, %%d refused" %% (p, len(held), failed, refused), flush=True)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
print("flood done", flush=True)
`

// openFDs counts the descriptors this process (the embedded daemon)
// holds; at the descriptor limit it cannot even list them, which counts
// as the limit.
func openFDs(limit int) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return limit
	}
	return len(ents)
}

// TestEgressFlood floods one exec's egress proxy with tens of thousands
// of connections that send nothing and stay open, and meanwhile, from
// another client: /v1/health answers, another exec reaches its allowed
// host through its own proxy, and a sandboxed mock session runs a
// command. The daemon's descriptors stay within the sandbox's connection
// bound plus a margin, and the refused connections are reported.
//
// The test lowers this process's soft descriptor limit to 4096 (the
// sandbox raises its own back to the hard limit), as a daemon on a host
// with a small limit has: without bounds, the flood takes every
// descriptor the daemon has, its API stops accepting and sandboxes cannot
// be created.
func TestEgressFlood(t *testing.T) {
	requireSandbox(t)
	if testing.Short() {
		t.Skip("floods a sandbox's proxy with tens of thousands of connections")
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	const limit = 4096
	if rl.Max < 12000+256 {
		t.Skipf("the hard descriptor limit (%d) is too small to flood with", rl.Max)
	}
	if rl.Cur > limit {
		low := rl
		low.Cur = limit
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl) })
	}

	hs := startHostServer(t, "still served")
	global := filepath.Join(t.TempDir(), "global.yaml")
	if err := os.WriteFile(global, fmt.Appendf(nil, `version: 1
filesystem: {read_outside_workspace: true}
network:
  default: deny
  allow: ["*", "127.0.0.1:%d"]
`, hs.port), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := start(t, agentbox.Options{GlobalPolicy: global})
	flooder := srv.Client()
	other, err := client.New(srv.URL(), client.WithToken(srv.Token()))
	if err != nil {
		t.Fatal(err)
	}
	baseline := openFDs(limit)

	var peak atomic.Int64
	sampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			if n := int64(openFDs(limit)); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-sampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})

	const per, hold = 12000, 15
	flooding := make(chan struct{})
	var once sync.Once
	var floodOut strings.Builder
	var floodRes client.ExecResult
	var floodErr error
	floodDone := make(chan struct{})
	go func() {
		defer close(floodDone)
		defer once.Do(func() { close(flooding) })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		floodRes, floodErr = flooder.ExecStream(ctx, client.ExecRequest{
			Language: "python", Code: fmt.Sprintf(floodCode, per, hold),
			Policy: json.RawMessage(`{"version":1,"resources":{"timeout":"240s"},"network":{"default":"deny"}}`),
		}, func(ch client.OutputChunk) {
			floodOut.WriteString(ch.Data)
			if strings.Contains(ch.Data, "flooding") {
				once.Do(func() { close(flooding) })
			}
		})
	}()
	select {
	case <-flooding:
	case <-time.After(2 * time.Minute):
		t.Fatal("the flood did not start")
	}

	// Meanwhile, from another client.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := other.Health(hctx); err != nil {
			t.Errorf("health check %d during the flood: %v", i, err)
		}
		hcancel()
	}
	code := fmt.Sprintf(`
import os, urllib.request
os.environ.pop("no_proxy", None); os.environ.pop("NO_PROXY", None)
o = urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://127.0.0.1:3128"}))
print(o.open("http://127.0.0.1:%d/", timeout=20).read().decode())
`, hs.port)
	res, err := other.Exec(ctx, client.ExecRequest{Language: "python", Code: code,
		Policy: json.RawMessage(fmt.Sprintf(`{"version":1,"network":{"allow":["127.0.0.1:%d"]}}`, hs.port))})
	switch {
	case err != nil:
		t.Errorf("another client's exec during the flood: %v", err)
	case res.ExitCode != 0 || !strings.Contains(res.Stdout, "still served"):
		t.Errorf("another client's exec during the flood: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	s, err := other.CreateSession(ctx, client.CreateSession{Agent: "mock",
		Policy: json.RawMessage(`{"version":1,"filesystem":{"read_outside_workspace":true}}`)})
	if err != nil {
		t.Errorf("a sandboxed session during the flood: %v", err)
	} else {
		_, evs := turn(t, other, s.ID, mock.ScriptPrompt(mock.Step{Kind: mock.KindCommand, Command: "echo session-ok"}))
		if out := commandOutput(t, evs); !strings.Contains(out, "session-ok") {
			t.Errorf("the session's command during the flood printed %q", out)
		}
	}
	select {
	case <-floodDone:
		t.Fatalf("the flood ended before the checks did, so they prove nothing: %v\n%s", floodErr, floodOut.String())
	default:
	}

	<-floodDone
	close(sampling)
	sampler.Wait()
	t.Logf("flood output:\n%s\nexit %d, error %+v, stderr %q", floodOut.String(), floodRes.ExitCode, floodRes.Error, floodRes.Stderr)
	t.Logf("daemon descriptors: %d before, at most %d during the flood", baseline, peak.Load())
	if floodErr != nil {
		t.Fatalf("the flood exec: %v", floodErr)
	}
	// The flood's proxy holds at most its bound (256) of connections, one
	// descriptor each; the rest is the other client's work.
	if grown := peak.Load() - int64(baseline); grown > 256+512 {
		t.Errorf("the daemon's descriptors grew by %d during the flood, want at most %d", grown, 256+512)
	}
	// The flood's connections past the bounds were answered 429, and
	// reported (repeats may be coalesced into fewer violations).
	refused := 0
	for _, line := range strings.Split(floodOut.String(), "\n") {
		var p, opened, failed, n int
		if _, err := fmt.Sscanf(line, "process %d: %d connections opened, %d failed, %d refused", &p, &opened, &failed, &n); err == nil {
			refused += n
		}
	}
	if refused < per {
		t.Errorf("%d connections answered 429, want most of %d", refused, 2*per)
	}
	rules := map[string]int{}
	for _, v := range floodRes.Violations {
		if v.Kind == "network" && strings.HasPrefix(v.Rule, "limit:") {
			rules[v.Rule]++
		}
	}
	if rules[egress.RuleMaxConnections]+rules[egress.RuleConnectionRate] == 0 {
		t.Errorf("no refusal by a connection bound among the violations: %v", rules)
	}
}
