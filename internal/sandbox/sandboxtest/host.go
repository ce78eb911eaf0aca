package sandboxtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// This file holds the host-side observers: what the host looked like
// before a case, and whether anything of the sandbox is left after it.

type counter struct{ n atomic.Int64 }

func (c *counter) add()       { c.n.Add(1) }
func (c *counter) get() int64 { return c.n.Load() }

// settle returns the count once it has stayed at least want for a
// moment, or after a few seconds: a connection the kernel accepted may
// not have reached the listener's accept loop yet.
func (c *counter) settle(want int64) int64 {
	deadline := time.Now().Add(5 * time.Second)
	for c.get() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // and no more than want arrive
	return c.get()
}

// hostHelper is a host process carrying a unique marker in its argv. A
// sandbox must neither see it in /proc nor be able to signal it.
type hostHelper struct {
	cmd    *exec.Cmd
	marker string
	done   chan struct{}
}

func startHostHelper(t *testing.T) *hostHelper {
	t.Helper()
	marker := "agentbox-host-helper-" + randHex(8)
	// "sh -c 'exec sleep' marker": $0 is the marker, visible in cmdline.
	// Not t.Context(): that ends before the cleanups, which may still
	// check the helper; the Cleanup below kills it.
	cmd := exec.CommandContext(context.Background(), "/bin/sh", "-c", "sleep 3600", marker)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start host helper: %v", err)
	}
	h := &hostHelper{cmd: cmd, marker: marker, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(h.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-h.done
	})
	return h
}

func (h *hostHelper) pid() int { return h.cmd.Process.Pid }

func (h *hostHelper) alive() bool {
	select {
	case <-h.done:
		return false
	default:
		return true
	}
}

// listenHostUnix opens a path unix socket (posing as an ssh-agent) and an
// abstract one in the host's namespaces; every accepted connection counts.
func listenHostUnix(t *testing.T, hits *counter) (path, abstract string) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "agent.sock")
	abstract = "agentbox-test-" + randHex(8)
	for _, addr := range []string{path, "@" + abstract} {
		ln, err := new(net.ListenConfig).Listen(t.Context(), "unix", addr)
		if err != nil {
			t.Fatalf("listen on host unix socket %s: %v", addr, err)
		}
		go acceptCount(ln, hits)
		t.Cleanup(func() { ln.Close() })
	}
	return path, abstract
}

func acceptCount(ln net.Listener, hits *counter) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		hits.add()
		c.Close()
	}
}

// listenTCP opens a TCP listener on the host at addr ("127.0.0.1:0").
func listenTCP(t *testing.T, addr string, hits *counter) (int, bool) {
	t.Helper()
	ln, err := new(net.ListenConfig).Listen(t.Context(), "tcp", addr)
	if err != nil {
		return 0, false
	}
	t.Cleanup(func() { ln.Close() })
	go acceptCount(ln, hits)
	return ln.Addr().(*net.TCPAddr).Port, true
}

// markerProcs lists host processes (other than this one) whose argv or
// environment contains marker, as "pid: cmdline".
func markerProcs(marker string) []string {
	self := os.Getpid()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return []string{"cannot read /proc: " + err.Error()}
	}
	m := []byte(marker)
	var found []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if bytes.Contains(cmdline, m) || bytes.Contains(environ, m) {
			found = append(found, fmt.Sprintf("%d: %s", pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return found
}

// waitNoMarkerProcs polls briefly (the kernel reaps killed tasks
// asynchronously) and returns what is still there.
func waitNoMarkerProcs(marker string, grace time.Duration) []string {
	deadline := time.Now().Add(grace)
	for {
		left := markerProcs(marker)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pidGone reports whether host pid no longer runs the sandbox's process:
// it does not exist, or it was reused by a process without the marker.
func pidGone(pid int, marker string) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// A zombie that nobody reaped is still a leak of the runtime.
	if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	return !bytes.Contains(cmdline, []byte(marker)) && !bytes.Contains(environ, []byte(marker))
}

// entry is one path of a tree snapshot.
type entry struct {
	Mode fs.FileMode
	Size int64
	Sum  [32]byte
	Link string
}

func (e entry) String() string {
	switch {
	case e.Mode&fs.ModeSymlink != 0:
		return "symlink→" + e.Link
	case e.Mode.IsDir():
		return fmt.Sprintf("dir %v", e.Mode.Perm())
	default:
		return fmt.Sprintf("file %v %dB %x", e.Mode, e.Size, e.Sum[:4])
	}
}

// snapshot records every path under root without following symlinks.
// A missing root is an empty snapshot.
func snapshot(root string) (map[string]entry, error) {
	out := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return fs.SkipAll
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{Mode: info.Mode(), Size: info.Size()}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			e.Link, err = os.Readlink(p)
		case info.Mode().IsRegular():
			var b []byte
			b, err = os.ReadFile(p)
			e.Sum = sha256.Sum256(b)
		}
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = e
		return nil
	})
	return out, err
}

// change is one difference between two snapshots.
type change struct {
	Path        string
	Before, Now *entry
}

func (c change) String() string {
	switch {
	case c.Before == nil:
		return fmt.Sprintf("%s: created (%s)", c.Path, c.Now)
	case c.Now == nil:
		return fmt.Sprintf("%s: removed (was %s)", c.Path, c.Before)
	default:
		return fmt.Sprintf("%s: changed (%s → %s)", c.Path, c.Before, c.Now)
	}
}

// diff lists what differs between a and b, sorted by path. Directory
// mtimes and sizes are ignored; modes, contents and link targets are not.
func diff(a, b map[string]entry) []change {
	var out []change
	for p, ea := range a {
		eb, ok := b[p]
		switch {
		case !ok:
			out = append(out, change{Path: p, Before: &ea})
		case ea.Mode != eb.Mode || ea.Link != eb.Link || (!ea.Mode.IsDir() && (ea.Size != eb.Size || ea.Sum != eb.Sum)):
			out = append(out, change{Path: p, Before: &ea, Now: &eb})
		}
	}
	for p, eb := range b {
		if _, ok := a[p]; !ok {
			out = append(out, change{Path: p, Now: &eb})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// hostFiles are files outside any test directory that escape attempts
// target. Their content is kept so a broken runtime cannot leave the test
// machine damaged: a changed file is restored and the case fails.
var hostFiles = []string{
	"/etc/passwd", "/etc/shadow", "/etc/hosts", "/etc/hostname",
	"/root/.bashrc", "/root/.profile", "/root/.gitconfig", "/root/.zshrc",
	"/root/.ssh/authorized_keys", "/usr/bin/evil", "/newfile",
	"/sys/fs/cgroup/memory/escape", "/sys/fs/cgroup/memory/release_agent", "/sys/fs/cgroup/pids/escape", "/sys/fs/cgroup/escape",
}

type hostFile struct {
	path   string
	exists bool
	data   []byte
	mode   fs.FileMode
}

var hostGuard struct {
	once  sync.Once
	files []hostFile
	name  string
}

// guardHost records the host files and hostname once per test binary.
func guardHost() {
	hostGuard.once.Do(func() {
		for _, p := range hostFiles {
			hf := hostFile{path: p}
			if info, err := os.Lstat(p); err == nil {
				hf.exists, hf.mode = true, info.Mode()
				if info.Mode().IsRegular() {
					hf.data, _ = os.ReadFile(p)
				}
			}
			hostGuard.files = append(hostGuard.files, hf)
		}
		hostGuard.name, _ = os.Hostname()
	})
}

// checkHostFiles reports (and repairs) any change to the guarded files
// and the hostname.
func checkHostFiles() []string {
	var bad []string
	for _, hf := range hostGuard.files {
		_, err := os.Lstat(hf.path)
		switch {
		case hf.exists && err != nil:
			bad = append(bad, fmt.Sprintf("host %s was removed", hf.path))
			if hf.mode.IsRegular() {
				_ = os.WriteFile(hf.path, hf.data, hf.mode.Perm())
			}
		case !hf.exists && err == nil:
			bad = append(bad, fmt.Sprintf("host %s was created", hf.path))
			_ = os.Remove(hf.path)
		case hf.exists && hf.mode.IsRegular():
			now, _ := os.ReadFile(hf.path)
			if !bytes.Equal(now, hf.data) {
				bad = append(bad, fmt.Sprintf("host %s was modified", hf.path))
				_ = os.WriteFile(hf.path, hf.data, hf.mode.Perm())
			}
		}
	}
	if name, _ := os.Hostname(); name != hostGuard.name {
		bad = append(bad, fmt.Sprintf("host hostname changed from %q to %q", hostGuard.name, name))
		_ = syscall.Sethostname([]byte(hostGuard.name))
	}
	return bad
}
