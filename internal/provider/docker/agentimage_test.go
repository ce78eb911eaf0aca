package docker_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	dockerclient "github.com/moby/moby/client"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/agent/install"
	"github.com/agentbox/agentbox/internal/provider/docker"
	"github.com/agentbox/agentbox/internal/sdkgen/sdktest"
)

// runInImage runs cmd in a container of image (no network, read-only
// root, no capabilities) until it exits and returns its output.
func runInImage(t *testing.T, image string, cmd ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dc, err := dockerclient.New(dockerclient.WithHost(dockerHost(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	res, err := dc.ContainerCreate(ctx, dockerclient.ContainerCreateOptions{
		Config: &container.Config{Image: image, Entrypoint: cmd[:1], Cmd: cmd[1:], Env: append([]string{"HOME=/tmp", "PATH=/usr/bin:/bin"}, docker.AgentImageEnv...)},
		HostConfig: &container.HostConfig{NetworkMode: "none", ReadonlyRootfs: true, CapDrop: []string{"ALL"},
			Tmpfs: map[string]string{"/tmp": "mode=1777"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = dc.ContainerRemove(context.Background(), res.ID, dockerclient.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}()
	if _, err := dc.ContainerStart(ctx, res.ID, dockerclient.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	wait := dc.ContainerWait(ctx, res.ID, dockerclient.ContainerWaitOptions{})
	var code int64
	select {
	case r := <-wait.Result:
		code = r.StatusCode
	case err := <-wait.Error:
		t.Fatal(err)
	}
	logs, err := dc.ContainerLogs(ctx, res.ID, dockerclient.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	var out bytes.Buffer
	if _, err := stdcopy.StdCopy(&out, &out, logs); err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("%v exited %d: %s", cmd, code, out.String())
	}
	return out.String()
}

// TestAgentImage: the agent image, built from this machine's files alone
// (nothing pulled), runs Node, an agent install's `#!/usr/bin/env node`
// entry point through its node_modules/.bin link, and sh.
func TestAgentImage(t *testing.T) {
	p, _ := newProvider(t)
	// An agent install as internal/agent/install lays one out.
	dir := filepath.Join(t.TempDir(), "fake@1.0.0")
	for name, content := range map[string]string{
		"agentbox-install.json":          `{"name":"fake","version":"1.0.0","binary":"node_modules/.bin/fake"}`,
		"node_modules/fake/index.js":     "#!/usr/bin/env node\nconsole.log('fake agent on node ' + process.version);\n",
		"node_modules/fake/package.json": `{"name":"fake","version":"1.0.0"}`,
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "node_modules/.bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../fake/index.js", filepath.Join(dir, "node_modules/.bin/fake")); err != nil {
		t.Fatal(err)
	}
	dirs := []string{dir}
	// And a real one from the agent cache when it is there (scripts/test
	// installs them): the smallest that runs on Node.
	real, ok, err := install.Lookup("gemini")
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		dirs = append(dirs, real.Dir)
	} else {
		t.Log("gemini is not in the agent cache (agentbox agents install gemini): only the fake install is checked")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	tag, err := p.BuildAgentImage(ctx, sdktest.Binary(t), dirs)
	keep(tag)
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.BuildAgentImage(ctx, sdktest.Binary(t), dirs)
	if err != nil || again != tag {
		t.Fatalf("second build = %q, %v; want the same image %q", again, err, tag)
	}
	if out := runInImage(t, tag, docker.AgentCacheDir+"/agents/fake@1.0.0/node_modules/.bin/fake"); !strings.Contains(out, "fake agent on node v") {
		t.Fatalf("fake agent printed %q", out)
	}
	if out := runInImage(t, tag, "/bin/sh", "-c", "echo from sh"); strings.TrimSpace(out) != "from sh" {
		t.Fatalf("sh printed %q", out)
	}
	if ok {
		bin, err := filepath.Rel(filepath.Dir(real.Dir), real.Binary)
		if err != nil {
			t.Fatal(err)
		}
		if out := runInImage(t, tag, docker.AgentCacheDir+"/agents/"+bin, "--version"); !strings.Contains(out, real.Version) {
			t.Fatalf("%s --version printed %q, want %s", real.Name, out, real.Version)
		}
		// A sandbox of the image: its inner daemon finds the install.
		s := spec(t, "test-"+random(t))
		s.Options = map[string]string{"image": tag}
		sb := create(t, p, s)
		c, err := client.New(sb.Address, client.WithToken(sb.Token))
		if err != nil {
			t.Fatal(err)
		}
		agents, err := c.Agents(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, a := range agents.Agents {
			if a.Name == real.Name {
				found = a.Installed && a.Version == real.Version
				if !found {
					t.Errorf("inner daemon's %s: %+v", a.Name, a)
				}
			}
		}
		if !found {
			t.Fatalf("the inner daemon does not list %s installed at %s: %+v", real.Name, real.Version, agents.Agents)
		}
	}
}
