// Package localproc is the test-support provider whose sandbox is a local
// child process: `agentbox serve` on a free loopback port in a directory
// of its own. It is the local data plane of the provider conformance suite
// (internal/provider/providertest), and adds no isolation beyond what the
// inner daemon's own runtimes give, so the daemon never registers it by
// default.
package localproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
)

// Name is the provider's name.
const Name = "localproc"

// Files of a sandbox's directory.
const (
	ownerFile = "owner"
	addrFile  = "address"
	pidFile   = "pid"
	dataDir   = "data"
)

// Provider runs sandboxes as child processes under Dir. Its state is the
// directory, so a new Provider on the same Dir finds (Connect, List) and
// removes (Destroy) what another made.
type Provider struct {
	dir   string
	mu    sync.Mutex
	procs map[string]*exec.Cmd // started by this value, reaped by Destroy
	// StartTimeout bounds the wait for the inner daemon's health.
	StartTimeout time.Duration
}

// New returns a provider keeping its sandboxes under dir.
func New(dir string) *Provider {
	return &Provider{dir: dir, procs: map[string]*exec.Cmd{}, StartTimeout: 60 * time.Second}
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider: nothing beyond the required
// interface (and Lister).
func (p *Provider) Capabilities() provider.Capabilities { return provider.Capabilities{} }

// Health implements provider.Provider: the directory is usable.
func (p *Provider) Health(context.Context) error {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	return nil
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	for k := range spec.Options {
		return provider.Sandbox{}, fmt.Errorf("%w: option %q (localproc takes none)", provider.ErrUnsupported, k)
	}
	if spec.Token == "" || spec.Binary == "" || spec.Owner == "" {
		return provider.Sandbox{}, errors.New("localproc: spec needs Owner, Binary and Token")
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return provider.Sandbox{}, err
	}
	id := "lp-" + hex.EncodeToString(b[:])
	dir := filepath.Join(p.dir, id)
	if err := os.MkdirAll(filepath.Join(dir, dataDir), 0o700); err != nil {
		return provider.Sandbox{}, fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	sb, err := p.start(ctx, id, dir, spec)
	if err != nil {
		_ = p.Destroy(context.WithoutCancel(ctx), id)
		return provider.Sandbox{}, err
	}
	return sb, nil
}

func (p *Provider) start(ctx context.Context, id, dir string, spec provider.Spec) (provider.Sandbox, error) {
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(spec.Owner), 0o600); err != nil {
		return provider.Sandbox{}, err
	}
	addr, err := freePort(ctx)
	if err != nil {
		return provider.Sandbox{}, fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	// Not bound to ctx: the sandbox outlives the call that made it.
	cmd := exec.CommandContext(context.Background(), spec.Binary, "serve", "--listen", addr, "--data-dir", filepath.Join(dir, dataDir), "--allowed-hosts", "*") //nolint:gosec // the binary is the daemon's own
	// The token goes in the environment, never on the command line
	// (which every user of the machine can read).
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "AGENTBOX_TOKEN=" + spec.Token}
	log, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return provider.Sandbox{}, err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return provider.Sandbox{}, fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	p.mu.Lock()
	p.procs[id] = cmd
	p.mu.Unlock()
	url := "http://" + addr
	if err := os.WriteFile(filepath.Join(dir, pidFile), []byte(strconv.Itoa(cmd.Process.Pid)), 0o600); err != nil {
		return provider.Sandbox{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, addrFile), []byte(url), 0o600); err != nil {
		return provider.Sandbox{}, err
	}
	sb := provider.Sandbox{ID: id, Address: url, Token: spec.Token}
	if err := waitHealthy(ctx, sb, p.StartTimeout); err != nil {
		return provider.Sandbox{}, fmt.Errorf("%w: inner daemon of %s: %w", provider.ErrUnavailable, id, err)
	}
	return sb, nil
}

// Connect implements provider.Provider.
func (p *Provider) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	dir, err := p.sandboxDir(id)
	if err != nil {
		return provider.Sandbox{}, err
	}
	addr, err := os.ReadFile(filepath.Join(dir, addrFile))
	if errors.Is(err, fs.ErrNotExist) {
		return provider.Sandbox{}, fmt.Errorf("%w: %s", provider.ErrGone, id)
	} else if err != nil {
		return provider.Sandbox{}, err
	}
	if _, alive := p.pid(dir); !alive {
		return provider.Sandbox{}, fmt.Errorf("%w: %s: its inner daemon is not running", provider.ErrGone, id)
	}
	sb := provider.Sandbox{ID: id, Address: string(addr), Token: token}
	if err := waitHealthy(ctx, sb, 10*time.Second); err != nil {
		return provider.Sandbox{}, fmt.Errorf("%w: %s: %w", provider.ErrUnavailable, id, err)
	}
	return sb, nil
}

// Destroy implements provider.Provider: the process group is killed and
// the directory removed.
func (p *Provider) Destroy(_ context.Context, id string) error {
	dir, err := p.sandboxDir(id)
	if err != nil {
		return err
	}
	if pid, alive := p.pid(dir); alive {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	p.mu.Lock()
	cmd := p.procs[id]
	delete(p.procs, id)
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Wait()
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("localproc: destroy %s: %w", id, err)
	}
	return nil
}

// List implements provider.Lister.
func (p *Provider) List(_ context.Context, owner string) ([]string, error) {
	entries, err := os.ReadDir(p.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("%w: %w", provider.ErrUnavailable, err)
	}
	var ids []string
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "lp-") {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(p.dir, e.Name(), ownerFile)); err == nil && string(b) == owner {
			ids = append(ids, e.Name())
		} else if errors.Is(err, fs.ErrNotExist) {
			// Made before its owner was written: owner unknown, but
			// half-created by someone; listed so it is removed.
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// KillInner kills a sandbox's inner daemon (not its directory), as a
// crash inside the sandbox would: the conformance suite's "inner daemon
// killed" step.
func (p *Provider) KillInner(_ context.Context, id string) error {
	dir, err := p.sandboxDir(id)
	if err != nil {
		return err
	}
	pid, alive := p.pid(dir)
	if !alive {
		return fmt.Errorf("%w: %s", provider.ErrGone, id)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil {
		return err
	}
	p.mu.Lock()
	cmd := p.procs[id]
	delete(p.procs, id)
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Wait()
	}
	return nil
}

func (p *Provider) sandboxDir(id string) (string, error) {
	if !strings.HasPrefix(id, "lp-") || strings.ContainsAny(id, `/\.`) {
		return "", fmt.Errorf("%w: %q is no localproc sandbox id", provider.ErrGone, id)
	}
	return filepath.Join(p.dir, id), nil
}

// pid returns the inner daemon's pid and whether it is still that
// process: alive, and its command line names the sandbox's directory (a
// reused pid is never killed).
func (p *Provider) pid(dir string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, pidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil || pid <= 1 {
		return 0, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), dir) {
		return 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		// A zombie (state Z) is dead: its parent has not reaped it yet.
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return pid, false
		}
	}
	return pid, true
}

func freePort(ctx context.Context) (string, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// waitHealthy waits until the inner daemon answers GET /v1/health with the
// sandbox's token.
func waitHealthy(ctx context.Context, sb provider.Sandbox, limit time.Duration) error {
	c, err := client.New(sb.Address, client.WithToken(sb.Token))
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Health(cctx)
		ccancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not healthy: %w", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
