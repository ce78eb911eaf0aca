// Package daemontest is the sandboxed Host of the adapter conformance
// suite (internal/agenttest): a whole daemon (internal/daemon) with
// its built-in global policy, sessions created with the agent-default
// policy, so that each agent runs in a sandbox and reaches the model only
// through the egress proxy's route, the real key held by the daemon alone.
//
// Importing it registers the host with agenttest.RegisterSandboxHost; an
// adapter package does so from an external test file (package x_test),
// since the daemon imports every adapter:
//
//	import _ "github.com/agentbox/agentbox/internal/daemon/daemontest"
package daemontest

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agenttest"
	"github.com/agentbox/agentbox/internal/audit"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/gvisor"
	"github.com/agentbox/agentbox/internal/sandbox/mountinfo"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
	"github.com/agentbox/agentbox/internal/sandbox/process"
)

func init() {
	agenttest.RegisterSandboxHost(func() agenttest.Host { return &Host{} })
	agenttest.RegisterSandboxHostOn(gvisor.Name, func() agenttest.Host { return &Host{Isolation: gvisor.Name} })
}

// Policy is the preset every session of the host is created with.
const Policy = "agent-default"

// Host is an agenttest.Host over a whole daemon whose sessions run
// sandboxed. Its zero value is ready; it serves one daemon.
type Host struct {
	// Isolation, when set, is the runtime the sessions run on instead of
	// agent-default's (process): their policy is agent-default with
	// this isolation.
	Isolation string
	dataDir   string
}

// Name implements agenttest.Host.
func (h *Host) Name() string {
	if h.Isolation != "" {
		return "sandboxed-" + h.Isolation
	}
	return "sandboxed"
}

// Probe implements agenttest.Host: the process runtime (agent-default's
// isolation), or the host's Isolation, must be able to build sandboxes
// here.
func (h *Host) Probe(ctx context.Context) string {
	var rt sandbox.Runtime = process.New(process.Options{})
	if h.Isolation == gvisor.Name {
		rt = gvisor.New(gvisor.Options{StateDir: filepath.Join(os.TempDir(), "agentbox-daemontest-probe")})
	} else if h.Isolation != "" {
		return "daemontest: no host for isolation " + h.Isolation
	}
	if pr := rt.Probe(ctx); !pr.Available {
		return pr.Reason
	}
	return ""
}

// Serve implements agenttest.Host: a daemon on a loopback port with the
// agents of reg, its data directory (and so its workspace root) under
// /var/tmp, where Codex can make its own sandbox helper (not under /tmp).
func (h *Host) Serve(t testing.TB, reg *agent.Registry) *client.Client {
	t.Helper()
	return Start(t, h.dir(t), reg)
}

// Start runs a daemon on a loopback port with the agents of reg, its
// built-in global policy and sandboxes, data in dataDir, until t ends, and
// returns its client.
func Start(t testing.TB, dataDir string, reg *agent.Registry) *client.Client {
	t.Helper()
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", DataDir: dataDir, InsecureNoAuth: true, Agents: reg,
		Log: slog.New(slog.DiscardHandler),
		// Agents under gVisor (ptrace) start in 20-30 s on an idle test
		// machine and past the default minute on a loaded one: the
		// harness's own per-create bound (agenttest.DefaultTimeout)
		// decides.
		StartTimeout: agenttest.DefaultTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The daemon lives until t ends, not t's context.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
	})
	c, err := client.New(d.URL())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Turn sends text to session sid and follows the turn to its end,
// allowing every permission request when allow is set (and failing on one
// otherwise); it returns the turn's end and its events.
func Turn(t testing.TB, c *client.Client, sid, text string, allow bool) (event.TurnCompleted, []event.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	after, err := c.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.Send(ctx, sid, text)
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	tc, err := c.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error {
		evs = append(evs, e)
		if e.Type != event.TypePermissionRequested {
			return nil
		}
		if !allow {
			t.Errorf("unexpected permission request: %s", e.Data)
		}
		var p event.PermissionRequested
		if err := json.Unmarshal(e.Data, &p); err != nil {
			return err
		}
		decision := "allow"
		if !allow {
			decision = "deny"
		}
		_, err := c.AnswerPermission(context.Background(), sid, p.ID, client.PermissionAnswer{Decision: decision})
		return err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, agenttest.Dump(evs))
	}
	return tc, evs
}

// SessionProcs returns the pids of the host's processes whose variable
// envVar names a directory below home, by the session whose home it is
// (home/sandboxed/ID/…; "" for any other directory below home).
func SessionProcs(home, envVar string) map[string][]string {
	out := map[string][]string{}
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range envs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(b), "\x00") {
			v, ok := strings.CutPrefix(kv, envVar+"=")
			if !ok {
				continue
			}
			rel, err := filepath.Rel(home, v)
			if err != nil || !filepath.IsLocal(rel) {
				continue
			}
			id := ""
			if r, ok := strings.CutPrefix(rel, "sandboxed/"); ok {
				id, _, _ = strings.Cut(r, "/")
			}
			out[id] = append(out[id], filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}

// dir returns the daemon's data directory, made on first use and removed
// when t ends (after the daemon's shutdown, whose cleanup is registered
// later).
func (h *Host) dir(t testing.TB) string {
	t.Helper()
	if h.dataDir != "" {
		return h.dataDir
	}
	dir, err := os.MkdirTemp("/var/tmp", "agentbox-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err != nil {
		t.Fatal(err)
	}
	h.dataDir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// StateDir implements agenttest.Host: the daemon's data directory, as
// daemon.Agents gives it to the adapters (their homes go below agents/).
func (h *Host) StateDir(t testing.TB) string { return h.dir(t) }

// Workspace implements agenttest.Host: a fresh directory in the daemon's
// workspace root.
func (h *Host) Workspace(t testing.TB) string {
	t.Helper()
	root := filepath.Join(h.dir(t), "workspaces")
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, "w")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// Policy implements agenttest.Host: the preset by name, or with the
// host's Isolation, the preset's policy object with that isolation.
func (h *Host) Policy() json.RawMessage {
	if h.Isolation == "" {
		return json.RawMessage(strconv.Quote(Policy))
	}
	p, err := policy.Preset(Policy)
	if err != nil {
		panic(err) // the preset is built in
	}
	p.IsolationLevel = h.Isolation
	b, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return b
}

// KillAgent implements agenttest.Host: it SIGKILLs the processes the
// session's sandbox init started, the agent (some agents run as two, e.g.
// a launcher and the node process it starts). It fails the test when
// there is none.
//
// Under gVisor, whose processes the host does not see as such, it kills
// every process of the sandbox user in the session's container (runsc
// exec of kill -9 -1): the agent's, not the container's own.
func (h *Host) KillAgent(t *testing.T, cwd string) {
	t.Helper()
	if h.Isolation == gvisor.Name {
		h.killGVisorAgent(t, cwd)
		return
	}
	pids := SandboxedAgentPIDs(cwd)
	if len(pids) == 0 {
		t.Fatalf("no agent process in the sandbox of the session in %s (a child of its init)", cwd)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	t.Logf("killed sandboxed agent processes %v (SIGKILL)", pids)
}

// SandboxedAgentPIDs returns the children of the sandbox init of the
// session working in cwd: the agent processes the daemon started in it.
// That init is a descendant of this test process (the daemon runs in it)
// whose own mount namespace has the session's workspace overlay mounted
// at cwd. That cwd merely exists in its root is no proof: a daemon hides
// only its own data directory from its sandboxes, so another daemon's
// workspaces (of a test running in parallel in this process) are visible
// in them; but only the session's sandbox mounts its workspace there. It
// reads /proc.
func SandboxedAgentPIDs(cwd string) []int {
	self := os.Getpid()
	parent := map[int]int{}
	var inits []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		parent[pid] = agenttest.ParentPID(pid)
		if isSandboxInit(pid) {
			inits = append(inits, pid)
		}
	}
	descends := func(pid int) bool {
		for i := 0; pid > 1 && i < 64; i++ {
			if pid = parent[pid]; pid == self {
				return true
			}
		}
		return false
	}
	var pids []int
	for _, init := range inits {
		if !descends(init) {
			continue
		}
		if !mountsWorkspace(init, cwd) {
			continue
		}
		for pid, pp := range parent {
			if pp == init {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// mountsWorkspace says whether the mount namespace of pid has a
// workspace overlay mounted at cwd: the process runtime mounts the
// session's workspace there in its sandbox's namespace only.
func mountsWorkspace(pid int, cwd string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "mountinfo"))
	if err != nil {
		return false
	}
	return slices.ContainsFunc(mountinfo.Parse(b), func(m mountinfo.Mount) bool {
		return m.Point == cwd && m.FSType == "overlay"
	})
}

// isSandboxInit says whether pid is a process runtime's sandbox init.
func isSandboxInit(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	arg0, _, _ := strings.Cut(string(b), "\x00")
	return arg0 == "agentbox-sandbox-init"
}

// Check implements agenttest.Host: session.started names the sandbox's
// runtime and mechanisms; the session's model requests went through the
// egress proxy's route (audited allow records, none refused) with a
// credential the proxy added outside the sandbox (audited secret uses).
//
// A session whose agent died mid-request (the crash subtest kills it
// mid-stream) is held to the same: the proxy audits the request in flight
// with outcome aborted (internal/sandbox/egress TestAbortedRequestsAudited).
func (h *Host) Check(t testing.TB, sid string, log []event.Event) {
	t.Helper()
	st := agenttest.Started(log)
	switch {
	case st == nil:
		t.Errorf("session %s has no session.started", sid)
	case st.Sandbox == nil || st.Sandbox.Runtime == "" || len(st.Sandbox.Mechanisms) == 0:
		t.Errorf("session %s: session.started says sandbox %+v, want a runtime and its mechanisms", sid, st.Sandbox)
	case len(st.Sandbox.Degraded) > 0:
		t.Errorf("session %s runs degraded: %v", sid, st.Sandbox.Degraded)
	}
	recs := h.audit(t, sid)
	routed, secrets := 0, 0
	for _, r := range recs {
		switch {
		case r.Type == audit.TypeEgress && r.Via == "route" && r.Decision == "allow":
			routed++
		case r.Type == audit.TypeEgress && r.Via == "route":
			t.Errorf("session %s: the proxy refused a model request: %+v", sid, r)
		case r.Type == audit.TypeSecret && r.Via == "route":
			secrets++
		}
	}
	if routed == 0 || secrets == 0 {
		t.Errorf("session %s: %d requests through the proxy's model route, %d credentials added by the proxy; want both (audit records: %+v)", sid, routed, secrets, recs)
	}
}

// audit returns the daemon's audit records of session sid.
func (h *Host) audit(t testing.TB, sid string) []audit.Record {
	t.Helper()
	f, err := os.Open(filepath.Join(h.dataDir, "audit.jsonl"))
	if err != nil {
		t.Errorf("the audit log: %v", err)
		return nil
	}
	defer func() { _ = f.Close() }()
	var out []audit.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Errorf("audit line %q: %v", sc.Bytes(), err)
			continue
		}
		if r.Scope == "session" && r.ID == sid {
			out = append(out, r)
		}
	}
	if err := sc.Err(); err != nil {
		t.Errorf("the audit log: %v", err)
	}
	return out
}

// killGVisorAgent SIGKILLs the sandbox user's processes in the gVisor
// container of the session working in cwd: the container of the daemon's
// whose bundle mounts cwd.
func (h *Host) killGVisorAgent(t *testing.T, cwd string) {
	t.Helper()
	configs, _ := filepath.Glob(filepath.Join(h.dataDir, "gvisor", "*", "config.json"))
	for _, cfg := range configs {
		b, err := os.ReadFile(cfg)
		if err != nil {
			continue
		}
		var spec struct {
			Mounts []struct {
				Destination string `json:"destination"`
			} `json:"mounts"`
		}
		if json.Unmarshal(b, &spec) != nil || !slices.ContainsFunc(spec.Mounts, func(m struct {
			Destination string `json:"destination"`
		}) bool {
			return m.Destination == cwd
		}) {
			continue
		}
		dir := filepath.Dir(cfg)
		out, err := exec.CommandContext(t.Context(), "runsc", "--root", filepath.Join(dir, "state"), "exec", "--user", "1000:1000",
			filepath.Base(dir), "/bin/sh", "-c", "kill -9 -1").CombinedOutput()
		// The shell dies with the others: runsc exec reports its SIGKILL.
		t.Logf("killed the sandbox user's processes in gVisor container %s (SIGKILL): %v %s", filepath.Base(dir), err, out)
		return
	}
	t.Fatalf("no gVisor container of the daemon mounts the session's directory %s", cwd)
}
