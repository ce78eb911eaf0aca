package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Ids of the user every sandboxed process runs as.
const (
	sandboxUID  = 1000
	sandboxGID  = 1000
	sandboxHome = "/home/sandbox"
)

// etcShared are the host /etc entries bound read-only into a minimal root.
var etcShared = []string{
	"ssl", "ca-certificates", "ca-certificates.conf", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"alternatives", "nsswitch.conf", "localtime", "protocols", "services", "mime.types",
}

// hiddenTop are host top-level directories never shown, even when the
// policy reads outside the workspace.
var hiddenTop = map[string]bool{
	"proc": true, "sys": true, "dev": true, "tmp": true, "home": true, "root": true,
	"run": true, "lost+found": true, "boot": true, "mnt": true, "media": true,
}

// bundle lays out one sandbox's OCI bundle under dir.
type bundle struct {
	dir    string
	rootfs string
	mounts []specs.Mount
	// binds maps the destination of each directory bind to its host
	// source: a later mount below it needs its mount point created there.
	binds map[string]string
}

func bind(src, dst string, rw bool) specs.Mount {
	opt := "ro"
	if rw {
		opt = "rw"
	}
	return specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"rbind", opt, "nosuid", "nodev"}}
}

// addMountPoint creates dst in the rootfs (gVisor cannot create it in a
// read-only root) as a directory or an empty file, like src.
func (b *bundle) addMountPoint(dst string, dir bool) error {
	p := filepath.Join(b.rootfs, dst)
	// Below an earlier bind (e.g. a workspace under /tmp), the mount
	// point must exist in that bind's host source: the deepest one's,
	// which is mounted last (a hidden directory's stand-in below /var).
	deepest := ""
	for d, src := range b.binds {
		if rel, err := filepath.Rel(d, dst); err == nil && rel != "." && filepath.IsLocal(rel) && len(d) > len(deepest) {
			deepest, p = d, filepath.Join(src, rel)
		}
	}
	if dir {
		return os.MkdirAll(p, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

func (b *bundle) add(m specs.Mount) error {
	dir := true
	if m.Type == "bind" {
		st, err := os.Stat(m.Source)
		if err != nil {
			return fmt.Errorf("gvisor: mount source: %w", err)
		}
		dir = st.IsDir()
	}
	if err := b.addMountPoint(m.Destination, dir); err != nil {
		return fmt.Errorf("gvisor: mount point %s: %w", m.Destination, err)
	}
	if m.Type == "bind" && dir {
		if b.binds == nil {
			b.binds = map[string]string{}
		}
		b.binds[m.Destination] = m.Source
	}
	b.mounts = append(b.mounts, m)
	return nil
}

// writeFile writes a generated file into the bundle and binds it.
func (b *bundle) writeFile(dst, content string) error {
	src := filepath.Join(b.dir, "files", strings.ReplaceAll(strings.TrimPrefix(dst, "/"), "/", "_"))
	if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(src, []byte(content), 0o644); err != nil {
		return err
	}
	return b.add(bind(src, dst, false))
}

// buildRoot fills the rootfs and the mounts of the system part of the
// root: /usr and an /etc subset, or (ReadOutsideWorkspace) every host
// top-level directory except hiddenTop, all read-only.
func (b *bundle) buildRoot(spec sandbox.Spec) error {
	for _, m := range []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
	} {
		if err := b.add(m); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		host := "/" + name
		if e.Type()&os.ModeSymlink != 0 {
			// Merged-/usr links (/bin -> usr/bin) are recreated as is.
			target, err := os.Readlink(host)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(b.rootfs, name)); err != nil {
				return err
			}
			continue
		}
		if !e.IsDir() || hiddenTop[name] {
			continue
		}
		system := name == "usr" || name == "bin" || name == "sbin" || strings.HasPrefix(name, "lib")
		if spec.ReadOutsideWorkspace && name != "etc" || system {
			if err := b.add(bind(host, host, false)); err != nil {
				return err
			}
		}
	}
	if spec.ReadOutsideWorkspace {
		if err := b.add(bind("/etc", "/etc", false)); err != nil {
			return err
		}
	} else {
		for _, name := range etcShared {
			host := "/etc/" + name
			if _, err := os.Stat(host); err == nil {
				if err := b.add(bind(host, host, false)); err != nil {
					return err
				}
			}
		}
		files := map[string]string{
			"/etc/passwd": fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nsandbox:x:%d:%d:sandbox:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", sandboxUID, sandboxGID, sandboxHome),
			"/etc/group":  fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", sandboxGID),
			"/etc/hosts":  "127.0.0.1 localhost " + spec.Hostname + "\n::1 localhost\n",
			// No resolver: lookups fail fast instead of leaking queries.
			"/etc/resolv.conf": "nameserver 127.0.0.1\n",
		}
		if spec.Network.Mode == sandbox.NetworkHost {
			if b, err := os.ReadFile("/etc/resolv.conf"); err == nil {
				files["/etc/resolv.conf"] = string(b)
			}
		}
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := b.writeFile(n, files[n]); err != nil {
				return err
			}
		}
	}
	// /tmp and the home are host tmpfs bound in by create (see
	// workspaceOverlay.tmp).
	return nil
}

// hide covers each of dirs that the root shows (a directory below one of
// its binds) with an empty read-only directory of the bundle, mode 0755,
// as the process runtime covers them with an empty tmpfs: the sandbox
// sees nothing of what they hold (the daemon's data directory: other
// sessions' workspaces and homes, the store, the audit log), and mount
// points below them (a workspace or an agent home in the data
// directory) are made in that stand-in, where the sandbox user can reach
// them, not in the host directory, whose mode (0700) would refuse it the
// way and which must not be written to. Call it after buildRoot, before
// any mount below dirs.
func (b *bundle) hide(dirs []string) error {
	clean := make([]string, 0, len(dirs))
	for _, d := range dirs {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("gvisor: hidden directory %q is not absolute", d)
		}
		clean = append(clean, filepath.Clean(d))
	}
	// Parents first; one below another hidden directory is hidden with it.
	sort.Strings(clean)
	var hidden []string
	for i, d := range clean {
		if slices.ContainsFunc(hidden, func(h string) bool { return h == d || strings.HasPrefix(d, h+"/") }) {
			continue
		}
		if st, err := os.Lstat(d); err != nil || !st.IsDir() {
			continue // absent, or a symbolic link into a hidden directory
		}
		shown := false
		for bd := range b.binds {
			if rel, err := filepath.Rel(bd, d); err == nil && rel != "." && filepath.IsLocal(rel) {
				shown = true
			}
		}
		if !shown {
			continue
		}
		src := filepath.Join(b.dir, "hide", fmt.Sprint(i))
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(src, 0o755); err != nil {
			return err
		}
		if err := b.add(bind(src, d, false)); err != nil {
			return err
		}
		hidden = append(hidden, d)
	}
	return nil
}

// config returns the container's config.json.
func (b *bundle) config(spec sandbox.Spec, cgroupsPath string, filter *specs.LinuxSeccomp) *specs.Spec {
	// The pause process (the container's pid 1) runs as root inside, with
	// no capabilities, so the sandbox user cannot signal it away.
	pause := process(spec, []string{"sleep", "infinity"}, nil, "/")
	pause.User = specs.User{UID: 0, GID: 0}
	s := &specs.Spec{
		Version:  "1.0.2",
		Root:     &specs.Root{Path: b.rootfs, Readonly: true},
		Hostname: spec.Hostname,
		Mounts:   b.mounts,
		Process:  pause,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			CgroupsPath: cgroupsPath,
			Seccomp:     filter,
		},
	}
	if spec.Network.Mode == sandbox.NetworkNone {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	return s
}

// process is one process's spec: the sandbox user, no capabilities,
// no_new_privs, and exactly the environment given.
func process(spec sandbox.Spec, args []string, env map[string]string, dir string) *specs.Process {
	merged := map[string]string{}
	for k, v := range spec.Env {
		merged[k] = v
	}
	for k, v := range env {
		merged[k] = v
	}
	list := make([]string, 0, len(merged))
	for k, v := range merged {
		list = append(list, k+"="+v)
	}
	sort.Strings(list)
	if dir == "" {
		dir = spec.WorkspaceDir
	}
	return &specs.Process{
		User:            specs.User{UID: sandboxUID, GID: sandboxGID},
		Args:            args,
		Env:             list,
		Cwd:             dir,
		Capabilities:    &specs.LinuxCapabilities{},
		NoNewPrivileges: true,
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
