package docker_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	dockerclient "github.com/moby/moby/client"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/docker"
	"github.com/agentbox/agentbox/internal/provider/providertest"
	"github.com/agentbox/agentbox/internal/reexec"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
)

// TestMain runs the helper argv names when the test binary is re-executed
// as one (the relay steps' host daemon starts its deathwatch so), else the
// tests.
func TestMain(m *testing.M) {
	reexec.Init()
	code := m.Run()
	sdktest.RemoveBinary()
	removeImages()
	os.Exit(code)
}

// built are the images this test binary's tests built: the binary is
// built anew for each run, so each run's images go at its end (one still
// used by a container another run made stays).
var built = struct {
	sync.Mutex
	tags map[string]bool
}{tags: map[string]bool{}}

func keep(tag string) string {
	built.Lock()
	defer built.Unlock()
	built.tags[tag] = true
	return tag
}

func removeImages() {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		return
	}
	dc, err := dockerclient.New(dockerclient.WithHost(host))
	if err != nil {
		return
	}
	defer dc.Close()
	built.Lock()
	defer built.Unlock()
	for tag := range built.tags {
		_, _ = dc.ImageRemove(context.Background(), tag, dockerclient.ImageRemoveOptions{PruneChildren: true})
	}
}

// dockerHost is the private dockerd's address (scripts/test exports it);
// without it the tests that need a daemon skip, saying so.
func dockerHost(t *testing.T) string {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		t.Skip("no DOCKER_HOST: start the private dockerd with `export DOCKER_HOST=$(scripts/dockerd)` (scripts/test does)")
	}
	return host
}

// newProvider is a provider on the private dockerd whose sandboxes' host
// directories are under a short temporary directory (socket paths are
// bounded), removed at the end of the test.
func newProvider(t *testing.T) (*docker.Provider, string) {
	t.Helper()
	host := dockerHost(t)
	dir, err := os.MkdirTemp("", "abd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	p, err := docker.New(docker.Config{Host: host, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	// DOCKER_HOST is given: a daemon that does not answer is a failure.
	if err := p.Health(t.Context()); err != nil {
		t.Fatalf("DOCKER_HOST=%s: %v", host, err)
	}
	ensure(t, p, sdktest.Binary(t))
	return p, dir
}

// ensure builds the image of binary (Create would), to be removed at the
// end of the run.
func ensure(t *testing.T, p *docker.Provider, binary string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	tag, err := p.EnsureImage(ctx, binary)
	if err != nil {
		t.Fatal(err)
	}
	return keep(tag)
}

// toolImageOnce builds the sandbox image with the host's tools (Node, sh,
// bash) and no agent once per test binary.
var toolImageOnce struct {
	sync.Mutex
	tag string
}

// toolImage is the sandbox image with the host's tools and no agent,
// removed at the end of the run.
func toolImage(t *testing.T, p *docker.Provider) string {
	t.Helper()
	toolImageOnce.Lock()
	defer toolImageOnce.Unlock()
	if toolImageOnce.tag != "" {
		return toolImageOnce.tag
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tag, err := p.BuildAgentImage(ctx, sdktest.Binary(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	toolImageOnce.tag = keep(tag)
	return tag
}

func random(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func spec(t *testing.T, owner string) provider.Spec {
	return provider.Spec{
		Owner:  owner,
		Binary: sdktest.Binary(t),
		Token:  random(t),
		Labels: map[string]string{"test": t.Name()},
	}
}

// create is Create with a generous bound (the image build and the inner
// daemon's start on a loaded machine), destroyed at the end of the test.
func create(t *testing.T, p *docker.Provider, s provider.Spec) provider.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, s)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Destroy(context.Background(), sb.ID); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return sb
}

// TestSandboxLifecycle: Create → the inner daemon answers with the token
// (and refuses another) → a session with the mock agent writes a file
// through the inner daemon's API → Connect finds it → Destroy leaves no
// container, volume or host directory, and a second Destroy is no error.
func TestSandboxLifecycle(t *testing.T) {
	p, dir := newProvider(t)
	ctx := t.Context()
	owner := "test-" + random(t)
	s := spec(t, owner)
	sb := create(t, p, s)
	if !strings.HasPrefix(sb.Address, "unix://"+dir+"/") || sb.Token != s.Token {
		t.Fatalf("sandbox = %+v, want a socket under %s and the spec's token", sb, dir)
	}

	c, err := client.New(sb.Address, client.WithToken(sb.Token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("inner health: %v", err)
	}
	bad, _ := client.New(sb.Address, client.WithToken("not-"+sb.Token))
	if _, err := bad.ListSessions(ctx, client.ListOptions{}); err == nil {
		t.Fatal("the inner daemon answered a wrong token")
	}
	checkIsolatedOfficially(t, sb.ID)
	// The token file is gone once the inner daemon has read it.
	if m, _ := filepath.Glob(filepath.Join(dir, "*", "data", client.TokenFileName)); len(m) != 0 {
		t.Errorf("token file left in the sandbox's directory: %v", m)
	}

	steps, _ := json.Marshal([]mock.Step{
		{Kind: mock.KindText, Text: "writing"},
		{Kind: mock.KindWrite, Path: "hello.txt", Content: "from the container\n"},
	})
	sess, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock", PermissionMode: client.PermissionAcceptEdits})
	if err != nil {
		t.Fatalf("inner session: %v", err)
	}
	turn, err := c.Send(ctx, sess.ID, "/mock "+string(steps))
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	done, err := c.WaitTurn(ctx, sess.ID, turn.TurnID, 0, func(ev event.Event) error {
		pl, err := ev.Decode()
		if err != nil {
			return err
		}
		if it, ok := pl.(*event.ItemCompleted); ok && it.Item.Kind == event.ItemFileChange {
			changed = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("turn: %v", err)
	}
	if done.StopReason != event.StopEndTurn || !changed {
		t.Fatalf("turn ended %q (%s), file change seen %v", done.StopReason, done.Message, changed)
	}

	// After a host restart: Connect finds it with the same token.
	again, err := p.Connect(ctx, sb.ID, sb.Token)
	if err != nil || again != sb {
		t.Fatalf("Connect = %+v, %v; want %+v", again, err, sb)
	}

	ids, err := p.List(ctx, owner)
	if err != nil || len(ids) != 1 || ids[0] != sb.ID {
		t.Fatalf("List(%s) = %v, %v; want [%s]", owner, ids, err, sb.ID)
	}
	if err := p.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Destroy(ctx, sb.ID); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	if ids, err := p.List(ctx, owner); err != nil || len(ids) != 0 {
		t.Fatalf("List after Destroy = %v, %v", ids, err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("host directories left: %v", left)
	}
	if _, err := p.Connect(ctx, sb.ID, sb.Token); !errors.Is(err, provider.ErrGone) {
		t.Fatalf("Connect after Destroy = %v, want ErrGone", err)
	}
}

// TestConformance runs the providers' conformance suite on the private
// dockerd; the inner daemon is the container's first process, so killing
// it is killing the container's.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) providertest.Harness {
		p, _ := newProvider(t)
		return providertest.Harness{
			Provider: p,
			Binary:   sdktest.Binary(t),
			// The exec step runs sh and bash: the image with the host's
			// tools (and no agent).
			Options: map[string]string{"image": toolImage(t, p)},
			KillInner: func(ctx context.Context, id string) error {
				dc, err := dockerclient.New(dockerclient.WithHost(dockerHost(t)))
				if err != nil {
					return err
				}
				defer dc.Close()
				_, err = dc.ContainerKill(ctx, id, dockerclient.ContainerKillOptions{Signal: "KILL"})
				return err
			},
		}
	})
}

// TestListFindsLeftover: a sandbox a daemon left (a new provider value,
// as after a crash) is found by its owner, and only by it.
func TestListFindsLeftover(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	owner := "test-" + random(t)
	sb := create(t, p, spec(t, owner))

	p2, err := docker.New(docker.Config{Host: dockerHost(t), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := p2.List(ctx, owner)
	if err != nil || len(ids) != 1 || ids[0] != sb.ID {
		t.Fatalf("List(%s) = %v, %v; want [%s]", owner, ids, err, sb.ID)
	}
	if ids, err := p2.List(ctx, "other-"+owner); err != nil || len(ids) != 0 {
		t.Fatalf("List(other owner) = %v, %v; want none", ids, err)
	}
}

// TestRunsc: the option runtime=runsc runs the sandbox under gVisor when
// the daemon has it registered (scripts/dockerd does when runsc is
// installed), and is refused with ErrUnsupported naming it otherwise.
func TestRunsc(t *testing.T) {
	p, _ := newProvider(t)
	s := spec(t, "test-"+random(t))
	s.Options = map[string]string{"runtime": "runsc"}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	sb, err := p.Create(ctx, s)
	if errors.Is(err, provider.ErrUnsupported) && strings.Contains(err.Error(), "not registered") {
		t.Skipf("runsc not registered with this dockerd: %v", err)
	}
	if err != nil {
		t.Fatalf("Create under runsc: %v", err)
	}
	defer func() {
		if err := p.Destroy(context.Background(), sb.ID); err != nil {
			t.Error(err)
		}
	}()
	c, _ := client.New(sb.Address, client.WithToken(sb.Token))
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	// The daemon's own record: the container runs under runsc.
	dc, err := dockerclient.New(dockerclient.WithHost(dockerHost(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	res, err := dc.ContainerInspect(ctx, sb.ID, dockerclient.ContainerInspectOptions{})
	if err != nil || res.Container.HostConfig == nil || res.Container.HostConfig.Runtime != "runsc" {
		t.Fatalf("inspect = %+v, %v; want runtime runsc", res.Container.HostConfig, err)
	}
}

// checkIsolatedOfficially inspects the container with Docker's official
// client, independently of the provider's own Engine API client: what the
// daemon applied is the isolation asked for.
func checkIsolatedOfficially(t *testing.T, id string) {
	t.Helper()
	dc, err := dockerclient.New(dockerclient.WithHost(dockerHost(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	res, err := dc.ContainerInspect(t.Context(), id, dockerclient.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := res.Container
	hc, cfg := c.HostConfig, c.Config
	if hc == nil || cfg == nil || c.State == nil {
		t.Fatalf("inspect = %+v: no host config, config or state", c)
	}
	var nets []string
	if c.NetworkSettings != nil {
		for name, ep := range c.NetworkSettings.Networks {
			nets = append(nets, name)
			if ep != nil && (ep.IPAddress.IsValid() || ep.Gateway.IsValid()) {
				t.Errorf("network %s has address %v gateway %v", name, ep.IPAddress, ep.Gateway)
			}
		}
	}
	for _, f := range []struct {
		what string
		ok   bool
	}{
		{"network mode none", hc.NetworkMode == "none"},
		{"only the network none", len(nets) == 0 || (len(nets) == 1 && nets[0] == "none")},
		{"network disabled", cfg.NetworkDisabled},
		{"read-only root", hc.ReadonlyRootfs},
		{"not privileged", !hc.Privileged},
		{"all capabilities dropped", len(hc.CapDrop) == 1 && hc.CapDrop[0] == "ALL" && len(hc.CapAdd) == 0},
		{"no-new-privileges", len(hc.SecurityOpt) == 1 && hc.SecurityOpt[0] == "no-new-privileges"},
		{"one bind mount, at /run/agentbox", len(hc.Mounts) == 1 && hc.Mounts[0].Target == "/run/agentbox" && string(hc.Mounts[0].Type) == "bind"},
		{"memory limit without swap", hc.Memory > 0 && hc.MemorySwap == hc.Memory},
		{"pids limit", hc.PidsLimit != nil && *hc.PidsLimit > 0},
		{"CPU limit", hc.NanoCPUs > 0},
		{"not root", cfg.User != "" && !strings.HasPrefix(cfg.User, "0:") && cfg.User != "0"},
		{"running", c.State.Running},
	} {
		if !f.ok {
			t.Errorf("container %.12s: not %s (host config %+v, user %q)", id, f.what, hc, cfg.User)
		}
	}
}

// TestImageReuse: the image is tagged by the binary's digest: the same
// binary reuses it, another binary gets another.
func TestImageReuse(t *testing.T) {
	p, _ := newProvider(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	bin := sdktest.Binary(t)
	a, err := p.EnsureImage(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.EnsureImage(ctx, bin)
	if err != nil || a != b {
		t.Fatalf("second EnsureImage = %q, %v; want %q", b, err, a)
	}
	// Another binary (the same program and a trailing byte: still an ELF
	// file that runs) gets its own tag.
	other := filepath.Join(t.TempDir(), "agentbox")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := p.EnsureImage(ctx, other)
	keep(c)
	if err != nil || c == a || !strings.HasPrefix(c, docker.ImageRepo+":") {
		t.Fatalf("EnsureImage(other binary) = %q, %v; want a new tag beside %q", c, err, a)
	}
}

// TestBadOptions: what the provider refuses before making anything.
func TestBadOptions(t *testing.T) {
	dir := t.TempDir()
	p, err := docker.New(docker.Config{Host: "unix:///nonexistent/docker.sock", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		options map[string]string
		labels  map[string]string
		want    string
	}{
		{"unknown key", map[string]string{"region": "x"}, nil, `"region" unknown`},
		{"unknown runtime", map[string]string{"runtime": "kata"}, nil, `runtime "kata"`},
		{"pids too few", map[string]string{"pids": "3"}, nil, `pids "3"`},
		{"pids not a number", map[string]string{"pids": "many"}, nil, `pids "many"`},
		{"empty image", map[string]string{"image": ""}, nil, `image ""`},
		{"image naming another endpoint", map[string]string{"image": "../../info"}, nil, `image "../../info"`},
		{"image with a query", map[string]string{"image": "x?all=1"}, nil, `image "x?all=1"`},
		{"reserved label", nil, map[string]string{docker.LabelOwner: "x"}, "agentbox. prefix"},
		{"reserved sandbox label", nil, map[string]string{docker.LabelSandbox: "0123456789abcdef01234567"}, "agentbox. prefix"},
		{"other agentbox label", nil, map[string]string{"agentbox.image": "x"}, "agentbox. prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Create(t.Context(), provider.Spec{Owner: "o", Token: "t", Binary: "/nonexistent", Options: tc.options, Labels: tc.labels})
			if !errors.Is(err, errkind.Invalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create = %v; want an invalid-request error naming %s", err, tc.want)
			}
		})
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}

// TestDaemonDown: a Docker daemon that does not answer is ErrUnavailable
// naming its address, for Health, Create, List, Connect and Destroy.
func TestDaemonDown(t *testing.T) {
	host := "unix://" + filepath.Join(t.TempDir(), "docker.sock")
	p, err := docker.New(docker.Config{Host: host, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), host) || !strings.Contains(err.Error(), "does not answer") {
			t.Errorf("%s = %v; want ErrUnavailable naming %s", what, err, host)
		}
	}
	check("Health", p.Health(ctx))
	_, err = p.Create(ctx, provider.Spec{Owner: "o", Token: "t", Options: map[string]string{"image": "agentbox-sandbox:x"}})
	check("Create", err)
	_, err = p.List(ctx, "o")
	check("List", err)
	_, err = p.Connect(ctx, "abc", "t")
	check("Connect", err)
	check("Destroy", p.Destroy(ctx, "abc"))
}

// TestMissingImage: the option image names an image the daemon does not
// have: ErrUnavailable saying nothing is pulled, nothing left behind.
func TestMissingImage(t *testing.T) {
	p, dir := newProvider(t)
	owner := "test-" + random(t)
	s := spec(t, owner)
	s.Options = map[string]string{"image": "agentbox-sandbox:missing-" + random(t)}
	_, err := p.Create(t.Context(), s)
	if !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), "nothing is pulled") {
		t.Fatalf("Create = %v; want ErrUnavailable for a missing image", err)
	}
	if ids, _ := p.List(t.Context(), owner); len(ids) != 0 {
		t.Fatalf("containers left: %v", ids)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("host directories left: %v", left)
	}
}

// TestCreateFailsClosed: an inner daemon that cannot start (the binary is
// no agentbox) fails Create with its log and leaves nothing.
func TestCreateFailsClosed(t *testing.T) {
	p, dir := newProvider(t)
	owner := "test-" + random(t)
	s := spec(t, owner)
	// A static binary that is not agentbox: the image builds, the
	// container starts, and exits at once.
	s.Binary = filepath.Join(t.TempDir(), "agentbox")
	if err := os.WriteFile(s.Binary, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ensure(t, p, s.Binary)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	_, err := p.Create(ctx, s)
	if !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("Create = %v; want ErrUnavailable", err)
	}
	if ids, _ := p.List(t.Context(), owner); len(ids) != 0 {
		t.Fatalf("containers left: %v", ids)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("host directories left: %v", left)
	}
}

// TestForeignContainer: a container the provider did not make (no
// sandbox label) is neither connected to nor removed.
func TestForeignContainer(t *testing.T) {
	p, _ := newProvider(t)
	ctx := t.Context()
	image := ensure(t, p, sdktest.Binary(t))
	dc, err := dockerclient.New(dockerclient.WithHost(dockerHost(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	res, err := dc.ContainerCreate(ctx, dockerclient.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Cmd: []string{"version"}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = dc.ContainerRemove(context.Background(), res.ID, dockerclient.ContainerRemoveOptions{Force: true})
	}()
	if err := p.Destroy(ctx, res.ID); !errors.Is(err, errkind.Invalid) || errors.Is(err, provider.ErrGone) {
		t.Fatalf("Destroy(foreign) = %v; want an invalid-request error", err)
	}
	if _, err := dc.ContainerInspect(ctx, res.ID, dockerclient.ContainerInspectOptions{}); err != nil {
		t.Fatalf("the foreign container was removed: %v", err)
	}
	if _, err := p.Connect(ctx, res.ID, "t"); !errors.Is(err, provider.ErrGone) {
		t.Fatalf("Connect(foreign) = %v; want ErrGone", err)
	}
}
