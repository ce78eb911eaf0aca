package vendortest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Box is the real data plane of a fake sandbox: a directory that is the
// sandbox user's home, processes started there, and the sandbox's ports,
// each a free loopback port of this machine (a fake's network namespace:
// a process told to listen on 127.0.0.1:P inside the sandbox listens on
// the box's host port for P).
type Box struct {
	// Root is the host directory that is the sandbox's home (Home).
	Root string
	// Home is the home directory's path inside the sandbox.
	Home string

	mu     sync.Mutex
	ports  map[int]int
	procs  map[int]*exec.Cmd
	done   map[int]chan struct{}
	logs   lockedBuffer
	killed bool
}

// NewBox makes a box whose home is home inside the sandbox.
func NewBox(home string) (*Box, error) {
	root, err := os.MkdirTemp("", "vendortest-box-")
	if err != nil {
		return nil, err
	}
	// Traversable, as a vendor's home directory is: the inner daemon's
	// own sandboxes run its binary (in the home) as another user.
	if err := os.Chmod(root, 0o711); err != nil {
		return nil, err
	}
	return &Box{Root: root, Home: home, ports: map[int]int{}, procs: map[int]*exec.Cmd{}, done: map[int]chan struct{}{}}, nil
}

// Path maps a path inside the sandbox (absolute under Home, or relative
// to it) to the host; anything else is refused.
func (b *Box) Path(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if filepath.IsAbs(p) {
		rel, err := filepath.Rel(b.Home, filepath.Clean(p))
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return "", fmt.Errorf("path %q is outside %s (the fake keeps only the home directory)", p, b.Home)
		}
		p = rel
	}
	clean := filepath.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("path %q leaves the home directory", p)
	}
	return filepath.Join(b.Root, clean), nil
}

// WriteFile writes a file at the sandbox path p, making its parents.
func (b *Box) WriteFile(p string, data []byte) (string, error) {
	host, err := b.Path(p)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return "", err
	}
	return host, os.WriteFile(host, data, 0o644)
}

// Port returns the host loopback port for the sandbox's port p, chosen
// on first use.
func (b *Box) Port(p int) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if hp, ok := b.ports[p]; ok {
		return hp, nil
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	hp := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	b.ports[p] = hp
	return hp, nil
}

// Start starts argv in the box (cwd relative to the home when not
// absolute under it) with only env and HOME and PATH in its environment.
// Each "127.0.0.1:P" or "0.0.0.0:P" in argv becomes 127.0.0.1 and the
// box's host port for P (the box's network is this machine's loopback).
// The process is not tied to any request; Kill ends it.
func (b *Box) Start(argv []string, env map[string]string, cwd string) (pid int, err error) {
	if len(argv) == 0 || argv[0] == "" {
		return 0, errors.New("no command")
	}
	dir := b.Root
	if cwd != "" {
		if dir, err = b.Path(cwd); err != nil {
			return 0, err
		}
	}
	args := make([]string, len(argv))
	for i, a := range argv {
		if args[i], err = b.rewritePorts(a); err != nil {
			return 0, err
		}
	}
	// Detached from any request on purpose (Kill ends it); the fake's
	// sandbox runs what it is asked to, as the vendor's does.
	cmd := exec.CommandContext(context.Background(), args[0], args[1:]...) //nolint:gosec // see above
	cmd.Dir = dir
	cmd.Env = []string{"HOME=" + b.Root, "PATH=/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = &b.logs, &b.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.killed {
		return 0, errors.New("the sandbox is gone")
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	pid = cmd.Process.Pid
	done := make(chan struct{})
	b.procs[pid], b.done[pid] = cmd, done
	go func() {
		_ = cmd.Wait()
		b.mu.Lock()
		delete(b.procs, pid)
		b.mu.Unlock()
		close(done)
	}()
	return pid, nil
}

// Done is closed when process pid has ended (nil for an unknown pid).
func (b *Box) Done(pid int) <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.done[pid]
}

// rewritePorts replaces each 127.0.0.1:P and 0.0.0.0:P with 127.0.0.1
// and the box's host port for P.
func (b *Box) rewritePorts(s string) (string, error) {
	const lo, all = "127.0.0.1:", "0.0.0.0:"
	var out strings.Builder
	for {
		i, n := strings.Index(s, lo), len(lo)
		if j := strings.Index(s, all); j >= 0 && (i < 0 || j < i) {
			i, n = j, len(all)
		}
		if i < 0 {
			out.WriteString(s)
			return out.String(), nil
		}
		out.WriteString(s[:i] + lo)
		s = s[i+n:]
		j := 0
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == 0 {
			continue
		}
		p, err := strconv.Atoi(s[:j])
		if err != nil || p < 1 || p > 65535 {
			return "", fmt.Errorf("port %q", s[:j])
		}
		hp, err := b.Port(p)
		if err != nil {
			return "", err
		}
		out.WriteString(strconv.Itoa(hp))
		s = s[j:]
	}
}

// Live is the number of the box's processes still running.
func (b *Box) Live() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.procs)
}

// Logs is what the box's processes wrote.
func (b *Box) Logs() string { return b.logs.String() }

// Kill ends every process of the box (their process groups), waits for
// them and removes the directory.
func (b *Box) Kill() {
	b.mu.Lock()
	b.killed = true
	b.mu.Unlock()
	b.KillProcesses()
	_ = os.RemoveAll(b.Root)
}

// KillProcesses ends every process of the box (their process groups), as
// a crash inside the sandbox would, and waits for them; the box stays.
func (b *Box) KillProcesses() {
	b.mu.Lock()
	var waits []chan struct{}
	for pid, cmd := range b.procs {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		waits = append(waits, b.done[pid])
	}
	b.mu.Unlock()
	for _, w := range waits {
		<-w
	}
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 1<<20 {
		return len(p), nil // bounded: the start is what explains a failure
	}
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
