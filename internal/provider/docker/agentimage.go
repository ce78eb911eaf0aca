package docker

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// AgentImageRepo is the repository of the images BuildAgentImage builds.
const AgentImageRepo = "agentbox-agents"

// agentImageLayout names how BuildAgentImage lays an image out: bump it
// when that changes, so that images built the old way are not reused.
const agentImageLayout = "agentbox-agents/3"

// AgentCacheDir is where an agent image holds the agent installs: the
// inner daemon finds them as AGENTBOX_CACHE_DIR/agents/NAME@VERSION, the
// layout of the host's agent cache (internal/agent/install).
const AgentCacheDir = "/opt/agentbox"

// HostTools are the host's programs an agent image carries, with the
// shared libraries they load: Node for the agent CLIs, env for their
// `#!/usr/bin/env node` lines, sh and bash for the commands agents (and
// code execution's language bash) run, and the few file tools agents
// reach for first and the files API's changes run inside a sandbox
// (cat, ls, mkdir, mv, rm, rmdir, dirname, tar), a terminal's stty, and sleep.
var HostTools = []string{"node", "env", "sh", "bash", "cat", "ls", "mkdir", "mv", "rm", "rmdir", "dirname", "tar", "stty", "sleep"}

// libDirs are where DT_NEEDED libraries are looked for, in order.
var libDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}

// BuildAgentImage builds (or finds) an image with the sandbox image's
// content, the host's Node, env and sh with the libraries they load, and
// the agent installs at agentDirs (directories of the host's agent cache,
// NAME@VERSION, copied whole) under AgentCacheDir/agents. Nothing is
// pulled: every file comes from this machine. The tag is the digest of the
// binary, the tools and the installs' manifests.
func (p *Provider) BuildAgentImage(ctx context.Context, binary string, agentDirs []string) (string, error) {
	files, err := toolFiles(HostTools, agentDirs)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	base, err := imageDigest(binary)
	if err != nil {
		return "", err
	}
	_, _ = io.WriteString(h, agentImageLayout+"\n"+base+"\n"+strings.Join(AgentImageEnv, "\n")+"\n")
	for _, f := range files {
		if err := hashFile(h, f.host); err != nil {
			return "", err
		}
	}
	for _, d := range agentDirs {
		// The manifest names the install and its version; the install is
		// never changed in place (internal/agent/install).
		if err := hashFile(h, filepath.Join(d, "agentbox-install.json")); err != nil {
			return "", fmt.Errorf("docker provider: agent install %s: %w", d, err)
		}
		_, _ = io.WriteString(h, filepath.Base(d)+"\n")
	}
	tag := AgentImageRepo + ":" + hex.EncodeToString(h.Sum(nil))
	p.buildMu.Lock()
	defer p.buildMu.Unlock()
	if err := p.cli.imageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !errors.Is(err, errNotFound) {
		return "", p.mapErr("image "+tag, err)
	}
	err = p.build(ctx, tag, func(tw *tar.Writer) error {
		if err := contextTar(tw, binary, AgentImageEnv...); err != nil {
			return err
		}
		dirs := map[string]bool{"rootfs/": true, "rootfs/tmp/": true, "rootfs/run/": true, "rootfs/run/agentbox/": true, "rootfs/etc/": true, "rootfs/etc/ssl/": true, "rootfs/etc/ssl/certs/": true}
		for _, f := range files {
			if err := addParents(tw, dirs, "rootfs"+f.image); err != nil {
				return err
			}
			if err := addHostFile(tw, "rootfs"+f.image, f.host, 0o755); err != nil {
				return err
			}
		}
		for _, d := range agentDirs {
			if err := addTree(tw, dirs, d, "rootfs"+AgentCacheDir+"/agents/"+filepath.Base(d)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return tag, nil
}

// AgentImageEnv is the environment an agent image sets: where the agent
// installs are.
var AgentImageEnv = []string{"AGENTBOX_CACHE_DIR=" + AgentCacheDir}

// toolFile is a host file and its path in the image.
type toolFile struct{ host, image string }

// elfDeps collects the ELF interpreters and shared libraries programs
// load, found in libDirs, recursively, each once.
type elfDeps struct {
	out  []toolFile
	seen map[string]bool
}

func newELFDeps() *elfDeps { return &elfDeps{seen: map[string]bool{}} }

// add adds what the ELF program at host loads: its interpreter (at the
// path the program names) and its DT_NEEDED libraries. A static program
// adds nothing.
func (e *elfDeps) add(host string) error {
	f, err := elf.Open(host)
	if err != nil {
		return fmt.Errorf("docker provider: %s: %w", host, err)
	}
	defer func() { _ = f.Close() }()
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(prog.Open(), 4096))
		if err != nil {
			return fmt.Errorf("docker provider: %s: interpreter: %w", host, err)
		}
		interp := strings.TrimRight(string(b), "\x00")
		if !e.seen[interp] {
			e.seen[interp] = true
			real, err := filepath.EvalSymlinks(interp)
			if err != nil {
				return fmt.Errorf("docker provider: %s: interpreter: %w", host, err)
			}
			e.out = append(e.out, toolFile{host: real, image: interp})
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return fmt.Errorf("docker provider: %s: %w", host, err)
	}
	for _, l := range libs {
		if err := e.lib(l); err != nil {
			return fmt.Errorf("docker provider: %s: %w", host, err)
		}
	}
	return nil
}

func (e *elfDeps) lib(name string) error {
	if e.seen[name] {
		return nil
	}
	e.seen[name] = true
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		e.out = append(e.out, toolFile{host: real, image: p})
		return e.add(real)
	}
	return fmt.Errorf("library %s not found in %v", name, libDirs)
}

// toolFiles are the tools found on PATH (as /usr/bin/NAME in the image)
// and, for each, its ELF interpreter and the libraries it needs; then
// those of the native programs of the agent installs at agentDirs
// (Claude Code's is a native executable that loads glibc's librt, which
// Node does not).
func toolFiles(tools, agentDirs []string) ([]toolFile, error) {
	deps := newELFDeps()
	var out []toolFile
	for _, t := range tools {
		host, err := lookPath(t)
		if err != nil {
			return nil, fmt.Errorf("docker provider: agent image: %w (scripts/setup installs nodejs)", err)
		}
		out = append(out, toolFile{host: host, image: "/usr/bin/" + t})
		if t == "sh" {
			out = append(out, toolFile{host: host, image: "/bin/sh"})
		}
		if err := deps.add(host); err != nil {
			return nil, err
		}
	}
	for _, d := range agentDirs {
		progs, err := nativePrograms(d)
		if err != nil {
			return nil, err
		}
		for _, p := range progs {
			if err := deps.add(p); err != nil {
				return nil, err
			}
		}
	}
	return append(out, deps.out...), nil
}

// nativePrograms are the executable ELF files of the tree at root
// (links are not followed: addTree keeps only those inside the tree,
// whose targets the walk visits anyway).
func nativePrograms(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil || info.Mode().Perm()&0o111 == 0 || info.Size() < 64 {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		var magic [4]byte
		_, rerr := io.ReadFull(f, magic[:])
		_ = f.Close()
		if rerr == nil && string(magic[:]) == elf.ELFMAG {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("docker provider: agent install %s: %w", root, err)
	}
	return out, nil
}

// lookPath finds name in the usual binary directories, symlinks resolved.
func lookPath(name string) (string, error) {
	for _, d := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return filepath.EvalSymlinks(p)
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func hashFile(h io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, _ = fmt.Fprintf(h, "%s\n", p)
	_, err = io.Copy(h, f)
	return err
}

// addParents writes the directories above name not written yet.
func addParents(tw *tar.Writer, done map[string]bool, name string) error {
	var parents []string
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		parents = append(parents, d+"/")
	}
	slices.Reverse(parents)
	for _, d := range parents {
		if done[d] {
			continue
		}
		done[d] = true
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	return nil
}

// addTree copies the tree at root into the tar under name: directories,
// regular files (their modes, group and others' write bits cleared; a
// file linked several times in the tree once, the others as hard links to
// it: Claude Code's install holds its 400 MB program twice so) and
// symbolic links that stay inside the tree; anything else is refused.
func addTree(tw *tar.Writer, done map[string]bool, root, name string) error {
	if err := addParents(tw, done, name+"/x"); err != nil {
		return err
	}
	type inode struct{ dev, ino uint64 }
	linked := map[inode]string{}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		dst := name + "/" + filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := int64(info.Mode().Perm() &^ 0o022)
		switch {
		case d.IsDir():
			done[dst+"/"] = true
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dst + "/", Mode: mode | 0o755, ModTime: time.Unix(0, 0)})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			resolved := filepath.Join(filepath.Dir(p), target)
			if filepath.IsAbs(target) || (resolved != root && !strings.HasPrefix(resolved, root+string(filepath.Separator))) {
				return fmt.Errorf("docker provider: agent install %s: link %s leaves the install (%s)", root, rel, target)
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: dst, Linkname: target, Mode: 0o777, ModTime: time.Unix(0, 0)})
		case info.Mode().IsRegular():
			if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
				key := inode{uint64(st.Dev), st.Ino} //nolint:unconvert // Dev's type differs by architecture
				if first, ok := linked[key]; ok {
					// Docker sets the file's mode from a link's header too.
					return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: dst, Linkname: first, Mode: mode, ModTime: time.Unix(0, 0)})
				}
				linked[key] = dst
			}
			return addHostFile(tw, dst, p, mode)
		default:
			return fmt.Errorf("docker provider: agent install %s: %s is not a file, directory or link", root, rel)
		}
	})
}
