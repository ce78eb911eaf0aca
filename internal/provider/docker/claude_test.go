package docker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dockerclient "github.com/moby/moby/client"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/fakellm"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/docker"
	"github.com/agentbox/agentbox/internal/provider/relay"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
)

// secretsScript is Node inside the container: every file under the
// directories given and every process's environment and command line it
// can read but its own (its arguments hold the key), searched for the key
// (argv[1]); it prints where the key is,
// and how many process environments hold the placeholder instead.
const secretsScript = `
const fs = require('fs'), path = require('path');
const key = process.argv[1], dirs = process.argv.slice(2);
let files = 0, found = [], placeholders = 0;
const look = (p, b) => { if (b.includes(key)) found.push(p); };
const walk = d => {
  let ents; try { ents = fs.readdirSync(d, {withFileTypes: true}); } catch (e) { return; }
  for (const e of ents) {
    const p = path.join(d, e.name);
    if (e.isDirectory()) walk(p);
    else if (e.isFile()) { try { look(p, fs.readFileSync(p, 'latin1')); files++; } catch (e) {} }
  }
};
dirs.forEach(walk);
for (const pid of fs.readdirSync('/proc').filter(n => /^\d+$/.test(n) && n !== String(process.pid))) {
  for (const f of ['environ', 'cmdline']) {
    let b; try { b = fs.readFileSync('/proc/' + pid + '/' + f, 'latin1'); } catch (e) { continue; }
    look('/proc/' + pid + '/' + f, b);
    if (f === 'environ' && b.includes('ANTHROPIC_API_KEY=agentbox-placeholder-anthropic-api-key')) placeholders++;
  }
}
console.log('files ' + files + ' placeholders ' + placeholders + ' found [' + found.join(' ') + ']');
`

// TestClaudeInDocker: the real claude CLI, in a Docker sandbox of the
// agent image, placed there by a host daemon, completes a write-a-file
// turn against the fake LLM on the host's loopback. The model key is
// given to the host only (the session's env): the agent holds a
// placeholder, and the host's egress gate for the sandbox adds the key on
// the model route, so the fake LLM sees it while neither the container's
// configuration, nor its files, nor any of its processes' environments
// hold it. A request to anything else on the host is refused and audited
// by the host.
func TestClaudeInDocker(t *testing.T) {
	p, dir := newProvider(t)
	tag, _ := agentImage(t, p)
	key := "sk-ant-api03-" + random(t)
	llm, err := fakellm.Start(t.Context(), fakellm.Options{Default: fakellm.ScenarioWrite, RequireKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer llm.Close()
	other := startHostServer(t, "must not be reached")

	reg := provider.NewRegistry()
	reg.Register(p)
	dataDir := t.TempDir()
	d, err := daemon.New(t.Context(), daemon.Config{
		Listen: "127.0.0.1:0", DataDir: dataDir, Log: slog.New(slog.DiscardHandler),
		Providers: reg, ProviderOptions: map[string]map[string]string{docker.Name: {"image": tag}},
		ProviderBinary: sdktest.Binary(t), StartTimeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(serveCtx) }()
	defer func() {
		stopServe()
		if err := <-served; err != nil {
			t.Errorf("host daemon: %v", err)
		}
	}()
	c, err := client.New(d.URL(), client.WithToken(d.Token()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sess, err := c.CreateSession(ctx, client.CreateSession{
		Agent: "claude", Provider: docker.Name, PermissionMode: client.PermissionAcceptEdits,
		Env: map[string]string{"ANTHROPIC_API_KEY": key, "ANTHROPIC_BASE_URL": llm.URL()},
	})
	if err != nil {
		t.Fatalf("create a claude session on docker: %v", err)
	}
	defer func() { _ = c.DeleteSession(context.Background(), sess.ID, true) }()
	tr, err := c.Send(ctx, sess.ID, "Create the file please")
	if err != nil {
		t.Fatal(err)
	}
	var evs []event.Event
	tc, err := c.WaitTurn(ctx, sess.ID, tr.TurnID, 0, func(e event.Event) error { evs = append(evs, e); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v\n%s", tc, dump(evs))
	}
	var change *event.Item
	for _, e := range evs {
		if p, err := e.Decode(); err == nil {
			if ic, ok := p.(*event.ItemCompleted); ok && ic.Item.Kind == event.ItemFileChange {
				change = &ic.Item
			}
		}
	}
	if change == nil || len(change.Changes) != 1 || filepath.Base(change.Changes[0].Path) != "hello.txt" {
		t.Errorf("file change %+v, want hello.txt\n%s", change, dump(evs))
	}
	// The file is in the sandbox's workspace: under its host directory.
	var written []string
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == "hello.txt" {
			if b, _ := os.ReadFile(p); string(b) == "hi" {
				written = append(written, p)
			}
		}
		return nil
	})
	if len(written) != 1 {
		t.Errorf("hello.txt with %q in the sandbox: %v; want one", "hi", written)
	}

	// The fake LLM saw the key on every model call: the host added it.
	reqs := llm.Requests()
	if len(reqs) == 0 || llm.KeyMismatches() != 0 {
		t.Fatalf("the fake LLM saw %d requests, %d without the key", len(reqs), llm.KeyMismatches())
	}

	// Nothing in the container holds the key.
	rk, err := relay.LoadKey(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	_, sandboxID, _, _, ok := relay.Inner(rk, sessionNative(t, c, sess.ID))
	if !ok {
		t.Fatalf("the session's native id names no sandbox")
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
	if b, _ := json.Marshal(ins); bytes.Contains(b, []byte(key)) {
		t.Error("the container's configuration holds the key")
	}
	out, code := execIn(t, sandboxID, "/usr/bin/node", "-e", secretsScript, key, "/run/agentbox", "/tmp")
	if code != 0 || !strings.Contains(out, " found []") || strings.Contains(out, "placeholders 0 ") || strings.HasPrefix(out, "files 0 ") {
		t.Errorf("searching the container for the key (exit %d): %s; want files searched, the agent's placeholder, no key", code, out)
	}
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(key)) {
				t.Errorf("%s in the sandbox's directory holds the key", p)
			}
		}
		return nil
	})

	// Anything but the model route is the session's policy's to allow:
	// refused, audited by the host.
	out, _ = execIn(t, sandboxID, "/usr/bin/node", "-e", probeScript, fmt.Sprint(other.port))
	if !strings.Contains(out, fmt.Sprintf("proxy %d: 403 ", other.port)) || !strings.Contains(out, "interfaces: lo\n") || other.hits.Load() != 0 {
		t.Errorf("the probe printed:\n%s\nwant a 403 and loopback alone (hits %d)", out, other.hits.Load())
	}
	audit, err := os.ReadFile(filepath.Join(dataDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var deny, route bool
	for line := range bytes.Lines(audit) {
		var r map[string]any
		if json.Unmarshal(line, &r) != nil || r["id"] != sess.ID {
			continue
		}
		deny = deny || r["decision"] == "deny" && fmt.Sprint(r["port"]) == fmt.Sprint(other.port)
		route = route || r["decision"] == "allow" && r["via"] == "route"
	}
	if !deny || !route {
		t.Errorf("the host's audit log for %s:\n%s\nwant the model route allowed and port %d denied", sess.ID, audit, other.port)
	}
	if bytes.Contains(audit, []byte(key)) {
		t.Error("the audit log holds the key")
	}
}

func sessionNative(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	s, err := c.GetSession(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s.NativeSessionID
}

func dump(evs []event.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%d %s %s\n", e.Seq, e.Type, e.Data)
	}
	return b.String()
}
