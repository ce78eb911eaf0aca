package deploy

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/client"
)

// docker runs the docker CLI against DOCKER_HOST only: the tests never
// touch the machine's own Docker. scripts/test sets DOCKER_HOST to the
// private dockerd of scripts/dockerd.
type docker struct {
	t    *testing.T
	host string
}

func needDocker(t *testing.T) docker {
	t.Helper()
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		t.Skip("no DOCKER_HOST: start the private dockerd with `export DOCKER_HOST=$(scripts/dockerd)` (scripts/test does)")
	}
	if _, err := exec.LookPath("docker"); err != nil {
		t.Fatalf("DOCKER_HOST=%s but no docker CLI: run scripts/setup (Debian docker.io)", host)
	}
	d := docker{t, host}
	// DOCKER_HOST is given: a daemon that does not answer is a failure.
	d.run("version", "--format", "{{.Server.Version}}")
	return d
}

// run runs docker ARGS and returns its stdout; it fails the test on error.
func (d docker) run(args ...string) string {
	d.t.Helper()
	out, err := d.try(args...)
	if err != nil {
		d.t.Fatal(err)
	}
	return out
}

func (d docker) try(args ...string) (string, error) {
	// A bound on every call: a wedged daemon fails the test, not the run.
	// Not t.Context(): it is cancelled before the cleanups (rmi, rm) run.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	// The classic builder: part of every dockerd (no buildx plugin, nothing
	// pulled); the Containerfile needs nothing more.
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+d.host, "DOCKER_BUILDKIT=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	return stdout.String(), nil
}

// logs is a container's output, stdout and stderr (the daemon logs to
// stderr).
func (d docker) logs(id string) string {
	out, err := exec.Command("docker", "--host", d.host, "logs", id).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("docker logs %s: %v\n%s", id, err, out)
	}
	return string(out)
}

func randomHex(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// containerfileUser is what the Containerfile's last USER line says.
func containerfileUser(t *testing.T) string {
	b, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	user := ""
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "USER" {
			user = f[1]
		}
	}
	if user == "" {
		t.Fatal("the Containerfile states no USER")
	}
	return user
}

// TestContainerImage builds the FROM scratch image from a release directory
// (scripts/release) through DOCKER_HOST, with nothing pulled, and runs it:
//   - the image holds the daemon, the CA roots and /tmp and nothing else
//     (its size is theirs), with the configuration the Containerfile states;
//   - `agentbox version` prints the build's version, Go version and tags;
//   - `serve` with the image's own command answers GET /v1/health with
//     the token given, as the Containerfile's USER;
//   - exec and a session with a policy are refused (422 policy) naming
//     what the container lacks: no sandbox, no unsandboxed fallback;
//   - `docker stop` (SIGTERM) ends it cleanly, exit 0, before docker's
//     timeout would have killed it (exit 137).
func TestContainerImage(t *testing.T) {
	d := needDocker(t)
	dist := release(t)
	bin := nativeDaemon(t)
	tag := "agentbox-deploy-test:" + randomHex(t, 6)

	// The build context: the release directory less the binaries of other
	// targets, which the classic builder would send for nothing (BuildKit
	// sends only what COPY names). A file the Containerfile wants and the
	// release lacks fails the build as it would from dist/.
	ctxDir := t.TempDir()
	cmd := exec.Command("cp", "-a", "--", filepath.Join(dist, "Containerfile"), filepath.Join(dist, "rootfs"), bin, ctxDir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	start := time.Now()
	d.run("build", "--quiet", "--build-arg", "TARGETARCH="+runtime.GOARCH, "-f", filepath.Join(ctxDir, "Containerfile"), "-t", tag, ctxDir)
	t.Cleanup(func() { _, _ = d.try("rmi", "--force", tag) })
	t.Logf("docker build: %v", time.Since(start).Round(time.Millisecond))

	t.Run("content", func(t *testing.T) {
		files := imageFiles(t, d, tag)
		ca := filepath.Join(dist, "rootfs/etc/ssl/certs/ca-certificates.crt")
		want := map[string]imageFile{
			"agentbox":                          {mode: 0o755, sha256: sha256File(t, bin)},
			"etc/ssl/certs/ca-certificates.crt": {mode: 0o644, sha256: sha256File(t, ca)},
			"tmp":                               {mode: 0o777 | os.ModeSticky | os.ModeDir},
			"etc":                               {mode: 0o755 | os.ModeDir},
			"etc/ssl":                           {mode: 0o755 | os.ModeDir},
			"etc/ssl/certs":                     {mode: 0o755 | os.ModeDir},
		}
		for name, f := range files {
			w, ok := want[name]
			if !ok {
				t.Errorf("the image holds %s (%v), which the Containerfile does not put there", name, f.mode)
				continue
			}
			if f.mode != w.mode || f.uid != 0 || f.gid != 0 || f.sha256 != w.sha256 {
				t.Errorf("%s: mode %v uid %d gid %d sha256 %q, want mode %v, root's, sha256 %q", name, f.mode, f.uid, f.gid, f.sha256, w.mode, w.sha256)
			}
		}
		for name := range want {
			if _, ok := files[name]; !ok {
				t.Errorf("the image lacks %s", name)
			}
		}
		// Its size is the daemon's and the CA roots', give or take the
		// directories: nothing else rides along.
		var size int64
		if err := json.Unmarshal([]byte(d.run("image", "inspect", "--format", "{{.Size}}", tag)), &size); err != nil {
			t.Fatal(err)
		}
		content := fileSize(t, bin) + fileSize(t, ca)
		t.Logf("image %s: %d B (%.2f MiB); binary %d B, CA roots %d B", tag, size, float64(size)/(1<<20), fileSize(t, bin), fileSize(t, ca))
		if size < content || size > content+64<<10 {
			t.Errorf("image size %d B, want its files' %d B (+ at most 64 KiB)", size, content)
		}

		var cfg struct {
			User         string
			Entrypoint   []string
			Cmd          []string
			Env          []string
			StopSignal   string
			ExposedPorts map[string]struct{}
			Volumes      map[string]struct{}
		}
		if err := json.Unmarshal([]byte(d.run("image", "inspect", "--format", "{{json .Config}}", tag)), &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.User != containerfileUser(t) || !slices.Equal(cfg.Entrypoint, []string{"/agentbox"}) || len(cfg.Cmd) == 0 || cfg.Cmd[0] != "serve" ||
			cfg.StopSignal != "SIGTERM" || !slices.Contains(cfg.Env, "HOME=/data") {
			t.Errorf("image configuration %+v", cfg)
		}
		if _, ok := cfg.Volumes["/data"]; !ok {
			t.Errorf("no volume /data: %v", cfg.Volumes)
		}
		if _, ok := cfg.ExposedPorts["7777/tcp"]; !ok {
			t.Errorf("port 7777 not exposed: %v", cfg.ExposedPorts)
		}
	})

	t.Run("version", func(t *testing.T) {
		// --network none: the default with --bridge=none, stated.
		out := d.run("run", "--rm", "--network", "none", tag, "version")
		tags, err := exec.Command("../scripts/build", "--print-tags").Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"agentbox " + testVersion, "go1.", "tags " + strings.TrimSpace(string(tags))} {
			if !strings.Contains(out, w) {
				t.Errorf("agentbox version in the image: %q lacks %q", out, w)
			}
		}
	})

	t.Run("serve", func(t *testing.T) {
		token := randomHex(t, 32)
		// The image's own command (serve --listen 0.0.0.0:7777), in a
		// network namespace of its own: the test dials it there.
		id := strings.TrimSpace(d.run("run", "--detach", "--network", "none", "--env", "AGENTBOX_TOKEN="+token, tag))
		t.Cleanup(func() { _, _ = d.try("rm", "--force", "--volumes", id) })
		var pid int
		if err := json.Unmarshal([]byte(d.run("inspect", "--format", "{{.State.Pid}}", id)), &pid); err != nil || pid <= 0 {
			t.Fatalf("container pid %d: %v", pid, err)
		}
		// Runs as the Containerfile says.
		uid, gid := procIDs(t, pid)
		if want := containerfileUser(t); uid+":"+gid != want {
			t.Errorf("the daemon runs as %s:%s, the Containerfile says USER %s", uid, gid, want)
		}

		hc := &http.Client{Transport: &http.Transport{DialContext: dialInNetns(pid)}}
		c, err := client.New("http://127.0.0.1:7777", client.WithToken(token), client.WithHTTPClient(hc))
		if err != nil {
			t.Fatal(err)
		}
		h := waitHealthy(t, c, d, id)
		if h.Status != "ok" || h.Version != testVersion {
			t.Errorf("GET /v1/health: %+v, want ok, version %s", h, testVersion)
		}
		// Without the token: refused.
		anon, _ := client.New("http://127.0.0.1:7777", client.WithHTTPClient(hc))
		if _, err := anon.ListSessions(t.Context(), client.ListOptions{}); !isProblem(err, 401, client.ProblemUnauthorized) {
			t.Errorf("GET /v1/sessions without the token: %v, want 401", err)
		}

		// Fail closed: the container cannot make sandboxes (no
		// CAP_SYS_ADMIN), and says so, instead of running unsandboxed.
		_, err = c.Exec(t.Context(), client.ExecRequest{Argv: []string{"true"}})
		if !isProblem(err, 422, client.ProblemPolicy) || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
			t.Errorf("POST /v1/exec in the container: %v, want 422 policy naming CAP_SYS_ADMIN", err)
		}
		_, err = c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", Policy: json.RawMessage(`"agent-default"`)})
		if !isProblem(err, 422, client.ProblemPolicy) || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
			t.Errorf("POST /v1/sessions with policy agent-default in the container: %v, want 422 policy naming CAP_SYS_ADMIN", err)
		}

		// docker stop: SIGTERM, SIGKILL after its default 10s. Exit 0 is a
		// clean shutdown before the kill (which would be 137).
		start := time.Now()
		d.run("stop", id)
		t.Logf("docker stop: %v", time.Since(start).Round(time.Millisecond))
		var state struct {
			ExitCode  int
			OOMKilled bool
		}
		if err := json.Unmarshal([]byte(d.run("inspect", "--format", "{{json .State}}", id)), &state); err != nil {
			t.Fatal(err)
		}
		logs := d.logs(id)
		if state.ExitCode != 0 || !strings.Contains(logs, "shut down cleanly") {
			t.Errorf("after docker stop: exit code %d (137: killed), want 0 and a clean shutdown; logs:\n%s", state.ExitCode, logs)
		}
	})
}

type imageFile struct {
	mode     os.FileMode
	uid, gid int
	sha256   string
}

// imageFiles lists every file of an image's layers (docker save), by path
// without the leading /, with its mode, owner and (regular files) sha256.
func imageFiles(t *testing.T, d docker, tag string) map[string]imageFile {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "image.tar")
	d.run("save", "--output", archive, tag)
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var manifest []struct{ Layers []string }
	layers := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "manifest.json" {
			if err := json.Unmarshal(b, &manifest); err != nil {
				t.Fatal(err)
			}
		} else {
			layers[h.Name] = b
		}
	}
	if len(manifest) != 1 || len(manifest[0].Layers) == 0 {
		t.Fatalf("docker save: manifest %+v", manifest)
	}
	files := map[string]imageFile{}
	for _, l := range manifest[0].Layers {
		tr := tar.NewReader(bytes.NewReader(layers[l]))
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l, err)
			}
			name := strings.TrimSuffix(path.Clean(h.Name), "/")
			if strings.HasPrefix(path.Base(name), ".wh.") {
				t.Errorf("layer %s: whiteout %s: a later layer removes what an earlier one added", l, name)
				continue
			}
			fi := imageFile{mode: h.FileInfo().Mode(), uid: h.Uid, gid: h.Gid}
			if h.Typeflag == tar.TypeReg {
				s, err := sha256Reader(tr)
				if err != nil {
					t.Fatal(err)
				}
				fi.sha256 = s
			}
			files[name] = fi
		}
	}
	return files
}

func sha256Reader(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func fileSize(t *testing.T, p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// procIDs are the real uid and gid of a process, from /proc/PID/status.
func procIDs(t *testing.T, pid int) (uid, gid string) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		if f := strings.Fields(v); len(f) > 0 && (k == "Uid" || k == "Gid") {
			if k == "Uid" {
				uid = f[0]
			} else {
				gid = f[0]
			}
		}
	}
	return uid, gid
}

// dialInNetns dials in the network namespace of process pid (a container's,
// which has no route from the host: dockerd runs with --bridge=none). The
// socket is made on an OS thread moved into that namespace; the thread is
// never unlocked, so it ends with its goroutine instead of going back to
// the scheduler in the container's namespace.
func dialInNetns(pid int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
			if err != nil {
				ch <- result{nil, err}
				return
			}
			defer ns.Close()
			if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{nil, fmt.Errorf("setns to the network namespace of pid %d: %w", pid, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// waitHealthy polls GET /v1/health until it answers, the container exits,
// or a bound passes.
func waitHealthy(t *testing.T, c *client.Client, d docker, id string) client.Health {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		h, err := c.Health(ctx)
		cancel()
		if err == nil {
			return h
		}
		if running := strings.TrimSpace(d.run("inspect", "--format", "{{.State.Running}}", id)); running != "true" || time.Now().After(deadline) {
			logs := d.logs(id)
			t.Fatalf("GET /v1/health in the container: %v (running: %s); logs:\n%s", err, running, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isProblem(err error, status int, typ string) bool {
	var e *client.APIError
	return errors.As(err, &e) && e.Status == status && e.Type == typ
}
