// Package docker is the Docker provider: a sandbox is a container made
// through the Docker Engine API, running agentbox's own static binary as
// `agentbox serve` on a unix socket in a host directory bind-mounted into
// the container, with no network, a read-only root, no capabilities and
// resource limits.
package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/provider"
)

// Name is the provider's name.
const Name = "docker"

// Labels the provider puts on its containers. LabelOwner is Spec.Owner
// (List finds by it); LabelSandbox is the sandbox's host directory name.
const (
	LabelOwner   = "agentbox.owner"
	LabelSandbox = "agentbox.sandbox"
)

// callerLabels are the labels of the agentbox. prefix a Spec may carry:
// the relay's session id (the provider's own are refused, so that List and
// Destroy cannot be misled).
var callerLabels = []string{"agentbox.session"}

// Paths inside the container. The host directory of a sandbox is mounted
// at mountDir; the inner daemon listens on mountDir/api.sock and keeps its
// data (its store, its token file, the agents' home) under mountDir/data.
const (
	mountDir = "/run/agentbox"
	sockName = "api.sock"
	dataName = "data"
	// egressName is the socket the host serves the sandbox's egress on
	// (CarryEgress); the inner daemon carries every connection to its
	// egress proxy's address there.
	egressName = "egress.sock"
)

// Defaults for a Spec that leaves a resource at zero.
const (
	DefaultCPUs        = 2
	DefaultMemoryBytes = 2 << 30
	DefaultPids        = 1024
	// tmpSize bounds the container's /tmp (a tmpfs, counted in its memory).
	tmpSize = "256m"
)

// sandboxUID is the user the inner daemon runs as when the host daemon
// is root: not root inside the container, even without capabilities.
const sandboxUID = 65532

// Options are the keys Spec.Options may have; any other is refused.
var Options = []string{"image", "runtime", "pids"}

// Runtimes are the container runtimes the option runtime may name; the
// Docker daemon must have them registered (scripts/dockerd registers
// runsc when it is installed).
var Runtimes = []string{"runc", "runsc"}

// errOption is a Spec.Options value (or key) the provider refuses.
var errOption = errkind.New(errkind.Invalid, "docker provider option")

// Config configures the provider.
type Config struct {
	// Host is the Docker daemon's address (unix:///path/docker.sock,
	// tcp://...); empty means DOCKER_HOST, else Docker's default socket.
	Host string
	// Dir is where the sandboxes' host directories are made (one per
	// sandbox: the inner daemon's socket and data); empty means
	// $TMPDIR/agentbox-docker. Its paths must stay short: a unix socket's
	// path is at most 107 bytes.
	Dir string
	// HealthTimeout bounds each health probe of an inner daemon; zero
	// means 2s. Create's ctx bounds the whole wait.
	HealthTimeout time.Duration
}

// Provider is the Docker provider. Safe for concurrent use.
type Provider struct {
	cli  *engine
	host string
	dir  string
	cfg  Config

	buildMu sync.Mutex // one image build at a time

	carryMu sync.Mutex
	// carried are the listeners of the sandboxes whose egress is carried
	// (CarryEgress), by container id.
	carried map[string]net.Listener
}

var (
	_ provider.Provider      = (*Provider)(nil)
	_ provider.Lister        = (*Provider)(nil)
	_ provider.EgressCarrier = (*Provider)(nil)
	_ provider.PolicyMapper  = (*Provider)(nil)
)

// New returns the provider for the Docker daemon cfg names. It does not
// contact the daemon (Health does).
func New(cfg Config) (*Provider, error) {
	cli, err := newEngine(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("%w: docker client: %w", provider.ErrUnavailable, err)
	}
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(os.TempDir(), "agentbox-docker")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("docker provider dir: %w", err)
	}
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = 2 * time.Second
	}
	return &Provider{cli: cli, host: cli.host, dir: filepath.Clean(dir), cfg: cfg, carried: map[string]net.Listener{}}, nil
}

// Close releases the client's connections.
func (p *Provider) Close() error {
	p.cli.close()
	return nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{PauseResume: true, Snapshot: true, CarriedEgress: true, Runtimes: slices.Clone(Runtimes)}
}

// Health pings the Docker daemon and checks that its API is one the
// client speaks.
func (p *Provider) Health(ctx context.Context) error {
	if _, err := p.cli.ping(ctx); err != nil {
		return p.mapErr("ping", err)
	}
	if _, err := p.cli.serverVersion(ctx); err != nil {
		return p.mapErr("version", err)
	}
	return nil
}

// options are Spec.Options, validated.
type options struct {
	image   string
	runtime string
	pids    int64
}

func parseOptions(in map[string]string) (options, error) {
	o := options{pids: DefaultPids}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		v := in[k]
		switch k {
		case "image":
			if pathArg(v) != nil {
				return o, fmt.Errorf("%w image %q: want an image reference", errOption, v)
			}
			o.image = v
		case "runtime":
			if !slices.Contains(Runtimes, v) {
				return o, fmt.Errorf("%w runtime %q: want one of %v", errOption, v, Runtimes)
			}
			o.runtime = v
		case "pids":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 16 || n > 1<<20 {
				return o, fmt.Errorf("%w pids %q: want a number of processes from 16 to %d", errOption, v, 1<<20)
			}
			o.pids = n
		default:
			return o, fmt.Errorf("%w %q unknown (known: %v)", errOption, k, Options)
		}
	}
	return o, nil
}

// Create implements provider.Provider: the image (built from Spec.Binary
// unless the option image names one), the sandbox's host directory with
// the token file, the container, its isolation checked from the host, and
// the wait for the inner daemon's health. On any failure what was made is
// removed.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (_ provider.Sandbox, err error) {
	opts, err := parseOptions(spec.Options)
	if err != nil {
		return provider.Sandbox{}, err
	}
	if spec.Owner == "" || spec.Token == "" {
		return provider.Sandbox{}, errkind.New(errkind.Invalid, "docker provider: Spec.Owner and Spec.Token are required")
	}
	for k := range spec.Labels {
		if strings.HasPrefix(k, "agentbox.") && !slices.Contains(callerLabels, k) {
			return provider.Sandbox{}, fmt.Errorf("%w: label %q: the agentbox. prefix is the provider's own (a caller may give only %v)", errOption, k, callerLabels)
		}
	}
	// The policy's checkpoint (Map): what the container, the host and
	// the inner daemon enforce of it, or the refusal naming the field.
	var pl *plan
	if len(spec.Policy) > 0 && string(spec.Policy) != "null" {
		if pl, err = Map(spec.Policy); err != nil {
			return provider.Sandbox{}, err
		}
		if pl.runtime != "" {
			if opts.runtime != "" && opts.runtime != pl.runtime {
				return provider.Sandbox{}, unsupported("isolation gvisor", "this provider is configured with runtime "+opts.runtime)
			}
			opts.runtime = pl.runtime
		}
		if pl.cpus > 0 {
			// A quota above the CPUs the daemon has limits nothing
			// more, and the daemon refuses it.
			info, err := p.cli.info(ctx)
			if err != nil {
				return provider.Sandbox{}, p.mapErr("info", err)
			}
			if n := float64(info.NCPU); n > 0 && pl.cpus > n {
				pl.cpus = n
			}
		}
		if os.Geteuid() != 0 {
			return provider.Sandbox{}, unsupported("resources.disk and resources.files", "they bound the sandbox's directory, a tmpfs the host daemon mounts, which needs it to be root")
		}
	}
	if opts.runtime != "" {
		if err := p.checkRuntime(ctx, opts.runtime); err != nil {
			return provider.Sandbox{}, err
		}
	}
	image := opts.image
	if image == "" {
		if image, err = p.EnsureImage(ctx, spec.Binary); err != nil {
			return provider.Sandbox{}, err
		}
	} else if err := p.cli.imageInspect(ctx, image); err != nil {
		return provider.Sandbox{}, p.mapErr("image "+image, err)
	}

	name, err := newName()
	if err != nil {
		return provider.Sandbox{}, err
	}
	hostDir := filepath.Join(p.dir, name)
	sock := filepath.Join(hostDir, sockName)
	if len(sock) > 107 {
		return provider.Sandbox{}, fmt.Errorf("%w: socket path %s is longer than a unix socket allows (107 bytes): choose a shorter provider dir", errOption, sock)
	}
	uid, gid := sandboxUser()
	if err := makeHostDir(p.dir, hostDir, spec.Token, uid, gid, pl); err != nil {
		return provider.Sandbox{}, err
	}
	var id string
	defer func() {
		if err != nil {
			// Not bound by ctx: it may be what ended.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if id != "" {
				_ = p.cli.containerRemove(cctx, id)
			}
			_ = removeHostDir(hostDir)
		}
	}()

	labels := maps.Clone(spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelOwner] = spec.Owner
	labels[LabelSandbox] = name
	req := p.containerConfig(image, labels, uid, gid)
	req.HostConfig = hostConfig(opts, spec, pl, hostDir)
	if id, err = p.cli.containerCreate(ctx, "agentbox-"+name, req); err != nil {
		return provider.Sandbox{}, p.mapErr("create container", err)
	}
	if err := p.cli.containerStart(ctx, id); err != nil {
		return provider.Sandbox{}, p.mapErr("start container", err)
	}
	if err := p.checkIsolation(ctx, id); err != nil {
		return provider.Sandbox{}, err
	}
	sb := provider.Sandbox{ID: id, Address: "unix://" + sock, Token: spec.Token}
	if err := p.waitHealthy(ctx, sb); err != nil {
		return provider.Sandbox{}, err
	}
	// The inner daemon read its token at start; the file goes, so that
	// what runs beside it in the container cannot read it there.
	if err := os.Remove(filepath.Join(hostDir, dataName, client.TokenFileName)); err != nil {
		return provider.Sandbox{}, fmt.Errorf("docker provider: removing the token file: %w", err)
	}
	return sb, nil
}

// containerConfig is the container's process: the inner daemon on the
// mounted directory's socket, its data beside it.
func (p *Provider) containerConfig(image string, labels map[string]string, uid, gid int) createRequest {
	data := mountDir + "/" + dataName
	return createRequest{
		Image: image,
		// The image's entrypoint may be anything (option image): the
		// command is given whole.
		Entrypoint: []string{"/agentbox"},
		// --boundary: the container is the sandbox of what the inner
		// daemon runs (it cannot build its own here), under the policy
		// the host mapped onto it (Map).
		Cmd: []string{"serve", "--listen", "unix:" + mountDir + "/" + sockName, "--data-dir", data,
			"--egress-socket", mountDir + "/" + egressName, "--boundary", "container"},
		Env: []string{
			"HOME=" + data + "/home",
			"TMPDIR=/tmp",
			"PATH=/usr/local/bin:/usr/bin:/bin",
		},
		User:            fmt.Sprintf("%d:%d", uid, gid),
		WorkingDir:      data,
		Labels:          labels,
		NetworkDisabled: true,
	}
}

// hostConfig is the isolation: no network, a read-only root with a small
// tmpfs /tmp, no capabilities, no privilege gain, resource limits, and the
// sandbox's host directory as the only mount. A policy's plan (pl, nil
// for none) sets the limits and bounds /tmp.
func hostConfig(o options, spec provider.Spec, pl *plan, hostDir string) hostConfigBody {
	cpus := spec.CPUs
	mem := spec.MemoryBytes
	pids := o.pids
	tmp := "size=" + tmpSize
	if pl != nil {
		cpus, mem, tmp = pl.cpus, pl.memory, pl.tmpfsOptions()
		if pl.pids > 0 {
			pids = pl.pids
		}
	}
	if cpus <= 0 {
		cpus = DefaultCPUs
	}
	if mem <= 0 {
		mem = DefaultMemoryBytes
	}
	return hostConfigBody{
		NetworkMode:    "none",
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		Tmpfs:          map[string]string{"/tmp": "rw,nosuid,nodev,mode=1777," + tmp},
		Runtime:        o.runtime,
		RestartPolicy:  &restartPolicy{Name: "no"},
		// The inner daemon's log, bounded on the host's disk; read back
		// for the error when it exits before answering.
		LogConfig:  &logConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "1"}},
		NanoCPUs:   int64(cpus * 1e9),
		Memory:     mem,
		MemorySwap: mem, // no swap beyond the memory limit
		PidsLimit:  &pids,
		Mounts: []mountBody{{
			Type:   "bind",
			Source: hostDir,
			Target: mountDir,
		}},
	}
}

// checkRuntime fails with ErrUnsupported when the daemon has no runtime
// of that name registered.
func (p *Provider) checkRuntime(ctx context.Context, runtime string) error {
	runtimes, err := p.cli.runtimes(ctx)
	if err != nil {
		return p.mapErr("info", err)
	}
	if _, ok := runtimes[runtime]; !ok {
		return fmt.Errorf("%w: runtime %q is not registered with the Docker daemon at %s (it has %v): start dockerd with --add-runtime %s=PATH (scripts/dockerd does when runsc is installed)",
			provider.ErrUnsupported, runtime, p.host, slices.Sorted(maps.Keys(runtimes)), runtime)
	}
	return nil
}

// checkIsolation reads the container back from the daemon and fails
// unless its only network is "none" and it runs with what was asked: a
// runtime that ignored part of the request must not pass for isolated.
func (p *Provider) checkIsolation(ctx context.Context, id string) error {
	c, err := p.cli.containerInspect(ctx, id)
	if err != nil {
		return p.mapErr("inspect container", err)
	}
	if err := verifyIsolated(c); err != nil {
		return err
	}
	return sameNetns(c)
}

// sameNetns fails when the container's process is in this process's
// network namespace. It can only look when the daemon runs on this
// machine in this pid namespace (/proc/PID names the container's process);
// otherwise the inspection above is what there is.
func sameNetns(c inspected) error {
	if c.State == nil || c.State.Pid <= 0 {
		return nil
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return nil
	}
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", c.State.Pid))
	if err != nil {
		return nil
	}
	if theirs == self {
		return fmt.Errorf("%w: container %.12s shares the host's network namespace (%s); removed", provider.ErrUnsupported, c.ID, self)
	}
	return nil
}

// verifyIsolated is checkIsolation's judgement on an inspected container.
func verifyIsolated(c inspected) error {
	fail := func(what string) error {
		return fmt.Errorf("%w: container %.12s is not isolated as asked: %s; removed", provider.ErrUnsupported, c.ID, what)
	}
	hc := c.HostConfig
	switch {
	case hc == nil:
		return fail("no host config")
	case hc.NetworkMode != "none":
		return fail(fmt.Sprintf("network mode %q", hc.NetworkMode))
	case !hc.ReadonlyRootfs:
		return fail("root filesystem writable")
	case hc.Privileged:
		return fail("privileged")
	case len(hc.CapAdd) > 0:
		return fail(fmt.Sprintf("capabilities added %v", hc.CapAdd))
	case !slices.Contains(hc.CapDrop, "ALL"):
		return fail(fmt.Sprintf("capabilities dropped %v, not ALL", hc.CapDrop))
	case !slices.Contains(hc.SecurityOpt, "no-new-privileges"):
		return fail("no-new-privileges unset")
	}
	if c.NetworkSettings != nil {
		for name, ep := range c.NetworkSettings.Networks {
			if name != "none" {
				return fail(fmt.Sprintf("attached to network %q", name))
			}
			if ep != nil && (ep.IPAddress != "" || ep.GlobalIPv6Address != "" || ep.Gateway != "") {
				return fail(fmt.Sprintf("network none has address %q %q gateway %q", ep.IPAddress, ep.GlobalIPv6Address, ep.Gateway))
			}
		}
	}
	return nil
}

// waitHealthy polls the inner daemon's GET /v1/health until it answers,
// the container stops (its log's tail in the error) or ctx ends.
func (p *Provider) waitHealthy(ctx context.Context, sb provider.Sandbox) error {
	c, err := client.New(sb.Address, client.WithToken(sb.Token))
	if err != nil {
		return err
	}
	var last error
	for i := 0; ; i++ {
		hctx, cancel := context.WithTimeout(ctx, p.cfg.HealthTimeout)
		_, last = c.Health(hctx)
		cancel()
		if last == nil {
			return nil
		}
		if i%10 == 9 {
			if err := p.running(ctx, sb.ID); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the inner daemon of container %.12s did not answer before %w (last: %w)", provider.ErrUnavailable, sb.ID, context.Cause(ctx), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// running fails when the container is no longer running, with the tail
// of its log.
func (p *Provider) running(ctx context.Context, id string) error {
	c, err := p.cli.containerInspect(ctx, id)
	if err != nil {
		return p.mapErr("inspect container", err)
	}
	if st := c.State; st != nil && !st.Running {
		return fmt.Errorf("%w: container %.12s %s (exit code %d) before its inner daemon answered: %s",
			provider.ErrUnavailable, id, st.Status, st.ExitCode, p.logTail(ctx, id))
	}
	return nil
}

// Connect implements provider.Provider: the container must exist, be one
// of this provider's and run; its inner daemon must answer with token.
func (p *Provider) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	c, err := p.cli.containerInspect(ctx, id)
	if err != nil {
		return provider.Sandbox{}, p.mapErr("inspect container", err)
	}
	hostDir, err := p.hostDir(c)
	if err != nil {
		return provider.Sandbox{}, err
	}
	if c.State == nil || !c.State.Running {
		status := "unknown"
		if c.State != nil {
			status = c.State.Status
		}
		return provider.Sandbox{}, fmt.Errorf("%w: container %.12s is %s", provider.ErrGone, c.ID, status)
	}
	if err := verifyIsolated(c); err != nil {
		return provider.Sandbox{}, err
	}
	sb := provider.Sandbox{ID: c.ID, Address: "unix://" + filepath.Join(hostDir, sockName), Token: token}
	cl, err := client.New(sb.Address, client.WithToken(token))
	if err != nil {
		return provider.Sandbox{}, err
	}
	if _, err := cl.Health(ctx); err != nil {
		return provider.Sandbox{}, fmt.Errorf("%w: the inner daemon of container %.12s: %w", provider.ErrUnavailable, c.ID, err)
	}
	return sb, nil
}

// hostDir is the host directory of a container this provider made, from
// its label, checked to be under the provider's directory.
func (p *Provider) hostDir(c inspected) (string, error) {
	var name string
	if c.Config != nil {
		name = c.Config.Labels[LabelSandbox]
	}
	if !validName(name) {
		return "", fmt.Errorf("%w: container %.12s is not an agentbox docker sandbox (label %s=%q)", provider.ErrGone, c.ID, LabelSandbox, name)
	}
	return filepath.Join(p.dir, name), nil
}

// Destroy implements provider.Provider: the container with its anonymous
// volumes, then its host directory. A container already gone is no error.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	c, err := p.cli.containerInspect(ctx, id)
	if err != nil {
		err = p.mapErr("inspect container", err)
		if errors.Is(err, provider.ErrGone) {
			return nil
		}
		return err
	}
	hostDir, err := p.hostDir(c)
	if err != nil {
		// Not ours: never removed by Destroy.
		return fmt.Errorf("%w: container %.12s is not an agentbox docker sandbox (no label %s); not removed", errOption, c.ID, LabelSandbox)
	}
	if err := p.cli.containerRemove(ctx, c.ID); err != nil {
		if err = p.mapErr("remove container", err); !errors.Is(err, provider.ErrGone) {
			return err
		}
	}
	p.uncarry(c.ID, nil)
	if err := removeHostDir(hostDir); err != nil {
		return fmt.Errorf("docker provider: removing %s: %w", hostDir, err)
	}
	return nil
}

// List implements provider.Lister: the ids of the containers (running or
// not) labelled with owner.
func (p *Provider) List(ctx context.Context, owner string) ([]string, error) {
	ids, err := p.cli.containerList(ctx, LabelOwner+"="+owner)
	if err != nil {
		return nil, p.mapErr("list containers", err)
	}
	slices.Sort(ids)
	return ids, nil
}

// newName is a sandbox's name: its host directory and container name.
func newName() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("docker provider: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// validName says whether s is a name newName makes.
func validName(s string) bool {
	if len(s) != 24 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// sandboxUser is the uid and gid the container runs as: sandboxUID when
// this process is root (it can give the host directory to that user),
// else this process's own (the host directory is its).
func sandboxUser() (uid, gid int) {
	if os.Geteuid() == 0 {
		return sandboxUID, sandboxUID
	}
	return os.Geteuid(), os.Getegid()
}

// makeHostDir makes the sandbox's host directory under root, owned by the
// container's user, with data/ holding the inner daemon's token file
// (mode 0600): the daemon reads it at start, so the token shows in no
// argument or environment variable that `docker inspect` prints. With a
// policy's plan (pl), the directory is a tmpfs bounded by its disk and
// files limits, mounted here by the host (root): everything the sandbox
// writes outside /tmp lands there, and a snapshot (a copy of data/)
// still sees it from the host.
func makeHostDir(root, dir, token string, uid, gid int, pl *plan) (err error) {
	if err := os.MkdirAll(root, 0o711); err != nil {
		return fmt.Errorf("docker provider dir: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("docker provider: sandbox dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = removeHostDir(dir)
		}
	}()
	if pl != nil {
		if err := mountTmpfs(dir, fmt.Sprintf("mode=0700,uid=%d,gid=%d,%s", uid, gid, pl.tmpfsOptions())); err != nil {
			return err
		}
	}
	data := filepath.Join(dir, dataName)
	for _, d := range []string{data, filepath.Join(data, "home")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return fmt.Errorf("docker provider: sandbox dir: %w", err)
		}
	}
	tok := filepath.Join(data, client.TokenFileName)
	if err := os.WriteFile(tok, []byte(token+"\n"), 0o600); err != nil {
		return fmt.Errorf("docker provider: token file: %w", err)
	}
	if uid != os.Geteuid() || gid != os.Getegid() {
		for _, p := range []string{dir, data, filepath.Join(data, "home"), tok} {
			if err := os.Lchown(p, uid, gid); err != nil {
				return fmt.Errorf("docker provider: sandbox dir: %w", err)
			}
		}
	}
	return nil
}

// CarryEgress implements provider.EgressCarrier: the host serves the
// sandbox's egress on a unix socket in its host directory, which the
// container sees at /run/agentbox/egress.sock; the inner daemon carries
// every connection to 127.0.0.1:3128 inside there (serve --egress-socket).
// The container keeps network none: this socket is its only way out, and
// what answers on it (serve) decides every connection. The socket is the
// container user's alone (mode 0600).
func (p *Provider) CarryEgress(ctx context.Context, id string, serve func(net.Listener) error) (func(), error) {
	c, err := p.cli.containerInspect(ctx, id)
	if err != nil {
		return nil, p.mapErr("inspect container", err)
	}
	hostDir, err := p.hostDir(c)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(hostDir)
	if err != nil {
		return nil, fmt.Errorf("%w: container %.12s: its host directory: %w", provider.ErrGone, c.ID, err)
	}
	path := filepath.Join(hostDir, egressName)
	// A host restart leaves the previous daemon's socket file behind
	// (nothing answers on it); a listener of this process is replaced.
	p.uncarry(c.ID, nil)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("docker provider: egress socket: %w", err)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("docker provider: egress socket: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && (int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid()) {
		err = os.Lchown(path, int(st.Uid), int(st.Gid))
	}
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("docker provider: egress socket: %w", err)
	}
	p.carryMu.Lock()
	p.carried[c.ID] = ln
	p.carryMu.Unlock()
	go func() { _ = serve(ln) }()
	return func() { p.uncarry(c.ID, ln) }, nil
}

// uncarry closes the egress listener of container id: ln's, or any when
// ln is nil.
func (p *Provider) uncarry(id string, ln net.Listener) {
	p.carryMu.Lock()
	cur, ok := p.carried[id]
	if ok && (ln == nil || cur == ln) {
		delete(p.carried, id)
	}
	p.carryMu.Unlock()
	if ok && (ln == nil || cur == ln) {
		_ = cur.Close()
	} else if ln != nil {
		_ = ln.Close()
	}
}
