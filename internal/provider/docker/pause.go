package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
)

// The provider's Pauser and Snapshotter.
//
// Pause freezes the container's processes (the Engine API's pause: the
// freezer cgroup, which they cannot notice); its memory stays.
//
// A snapshot is a copy of the sandbox's data directory, not a container
// commit: the container's root is read-only and its image is the agentbox
// binary's, so everything a sandbox holds (the inner daemon's store, its
// sessions' workspaces, the agents' home) is in the host directory
// bind-mounted at /run/agentbox, which a commit leaves out. The copy is
// taken with the container paused (or stopped: a sandbox whose inner
// daemon died is snapshotted as it was left), so it is what a crash at
// that instant would have left, which the inner daemon recovers from.
// CreateFrom makes a fresh sandbox (Create), stops it, puts the copy in
// place of its data directory with the new token, and starts it again.

var (
	_ provider.Pauser      = (*Provider)(nil)
	_ provider.Snapshotter = (*Provider)(nil)
)

// snapshotsDir is the directory of the snapshots under the provider's.
const snapshotsDir = "snapshots"

// Bounds of one snapshot: the sandbox wrote what is copied.
const (
	MaxSnapshotBytes = 8 << 30
	MaxSnapshotFiles = 1 << 20
)

// stopWait is how long a stop waits for the inner daemon to exit on
// SIGTERM before Docker kills it.
const stopWait = 10 * time.Second

// containerPause is POST /containers/{id}/pause.
func (e *engine) containerPause(ctx context.Context, id string) error {
	if err := pathArg(id); err != nil {
		return err
	}
	return e.call(ctx, http.MethodPost, "/containers/"+id+"/pause", nil, nil, nil)
}

// containerUnpause is POST /containers/{id}/unpause.
func (e *engine) containerUnpause(ctx context.Context, id string) error {
	if err := pathArg(id); err != nil {
		return err
	}
	return e.call(ctx, http.MethodPost, "/containers/"+id+"/unpause", nil, nil, nil)
}

// containerStop is POST /containers/{id}/stop, waiting wait for the
// process to exit before it is killed.
func (e *engine) containerStop(ctx context.Context, id string, wait time.Duration) error {
	if err := pathArg(id); err != nil {
		return err
	}
	q := url.Values{"t": {strconv.Itoa(int(wait / time.Second))}}
	return e.call(ctx, http.MethodPost, "/containers/"+id+"/stop", q, nil, nil)
}

// sandbox inspects a container and returns it with its host directory,
// ErrGone unless it is one of this provider's.
func (p *Provider) sandbox(ctx context.Context, id string) (inspected, string, error) {
	c, err := p.cli.containerInspect(ctx, id)
	if err != nil {
		return inspected{}, "", p.mapErr("inspect container", err)
	}
	dir, err := p.hostDir(c)
	return c, dir, err
}

func status(c inspected) string {
	if c.State == nil {
		return "unknown"
	}
	return c.State.Status
}

// Pause implements provider.Pauser: the container's processes are frozen
// (a paused sandbox's inner daemon does not answer until Resume). Pausing
// a paused sandbox is no error; a stopped one is ErrGone.
func (p *Provider) Pause(ctx context.Context, id string) error {
	c, _, err := p.sandbox(ctx, id)
	if err != nil {
		return err
	}
	switch status(c) {
	case "paused":
		return nil
	case "running":
	default:
		return fmt.Errorf("%w: container %.12s is %s", provider.ErrGone, c.ID, status(c))
	}
	if err := p.cli.containerPause(ctx, c.ID); err != nil {
		return p.mapErr("pause container", err)
	}
	return nil
}

// Resume implements provider.Pauser: the container's processes are thawed
// and the inner daemon must answer with token (Connect).
func (p *Provider) Resume(ctx context.Context, id, token string) (provider.Sandbox, error) {
	c, _, err := p.sandbox(ctx, id)
	if err != nil {
		return provider.Sandbox{}, err
	}
	if status(c) == "paused" {
		if err := p.cli.containerUnpause(ctx, c.ID); err != nil {
			return provider.Sandbox{}, p.mapErr("unpause container", err)
		}
	}
	return p.Connect(ctx, c.ID, token)
}

// Snapshot implements provider.Snapshotter: a copy of the sandbox's data
// directory, taken with the container paused (a running one is resumed
// after) or as a stopped one left it. The snapshot stays until
// DeleteSnapshot.
func (p *Provider) Snapshot(ctx context.Context, id string) (_ string, err error) {
	c, hostDir, err := p.sandbox(ctx, id)
	if err != nil {
		return "", err
	}
	if status(c) == "running" {
		if err := p.cli.containerPause(ctx, c.ID); err != nil {
			return "", p.mapErr("pause container", err)
		}
		defer func() {
			// Detached: the sandbox must not stay frozen whatever
			// became of the caller.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if uerr := p.cli.containerUnpause(uctx, c.ID); uerr != nil {
				err = errors.Join(err, p.mapErr("unpause container", uerr))
			}
		}()
	}
	name, err := newName()
	if err != nil {
		return "", err
	}
	root := filepath.Join(p.dir, snapshotsDir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("docker provider: snapshots dir: %w", err)
	}
	dir := filepath.Join(root, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("docker provider: snapshot dir: %w", err)
	}
	if err := copyTree(ctx, filepath.Join(hostDir, dataName), filepath.Join(dir, dataName)); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("snapshot of container %.12s: %w", c.ID, err)
	}
	return name, nil
}

// snapshotData is a snapshot's copy of a data directory; ErrGone when
// there is no such snapshot.
func (p *Provider) snapshotData(snapshotID string) (string, error) {
	if !validName(snapshotID) {
		return "", fmt.Errorf("%w: %q is no docker snapshot id", provider.ErrGone, snapshotID)
	}
	data := filepath.Join(p.dir, snapshotsDir, snapshotID, dataName)
	if _, err := os.Lstat(data); errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: no snapshot %s", provider.ErrGone, snapshotID)
	} else if err != nil {
		return "", err
	}
	return data, nil
}

// CreateFrom implements provider.Snapshotter: a new sandbox (Create, with
// spec's token) whose data directory is the snapshot's: made, stopped,
// the copy put in place with the token file, started again and waited
// for. On any failure the new sandbox is destroyed.
func (p *Provider) CreateFrom(ctx context.Context, snapshotID string, spec provider.Spec) (_ provider.Sandbox, err error) {
	snap, err := p.snapshotData(snapshotID)
	if err != nil {
		return provider.Sandbox{}, err
	}
	sb, err := p.Create(ctx, spec)
	if err != nil {
		return provider.Sandbox{}, err
	}
	defer func() {
		if err != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = p.Destroy(dctx, sb.ID)
		}
	}()
	_, hostDir, err := p.sandbox(ctx, sb.ID)
	if err != nil {
		return provider.Sandbox{}, err
	}
	if err := p.cli.containerStop(ctx, sb.ID, stopWait); err != nil {
		return provider.Sandbox{}, p.mapErr("stop container", err)
	}
	data := filepath.Join(hostDir, dataName)
	if err := os.RemoveAll(data); err != nil {
		return provider.Sandbox{}, fmt.Errorf("docker provider: %w", err)
	}
	if err := copyTree(ctx, snap, data); err != nil {
		return provider.Sandbox{}, fmt.Errorf("restoring snapshot %s: %w", snapshotID, err)
	}
	uid, gid := sandboxUser()
	tok := filepath.Join(data, client.TokenFileName)
	if err := os.WriteFile(tok, []byte(spec.Token+"\n"), 0o600); err != nil {
		return provider.Sandbox{}, fmt.Errorf("docker provider: token file: %w", err)
	}
	if err := os.Lchown(tok, uid, gid); err != nil && os.Geteuid() == 0 {
		return provider.Sandbox{}, fmt.Errorf("docker provider: token file: %w", err)
	}
	if err := p.cli.containerStart(ctx, sb.ID); err != nil {
		return provider.Sandbox{}, p.mapErr("start container", err)
	}
	if err := p.checkIsolation(ctx, sb.ID); err != nil {
		return provider.Sandbox{}, err
	}
	if err := p.waitHealthy(ctx, sb); err != nil {
		return provider.Sandbox{}, err
	}
	if err := os.Remove(tok); err != nil {
		return provider.Sandbox{}, fmt.Errorf("docker provider: removing the token file: %w", err)
	}
	return sb, nil
}

// DeleteSnapshot implements provider.Snapshotter: the snapshot's copy is
// removed; one that is gone is no error.
func (p *Provider) DeleteSnapshot(_ context.Context, snapshotID string) error {
	if !validName(snapshotID) {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(p.dir, snapshotsDir, snapshotID)); err != nil {
		return fmt.Errorf("docker provider: removing snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// errSnapshotTooLarge: the data directory is beyond the snapshot bounds.
var errSnapshotTooLarge = fmt.Errorf("%w: the sandbox's data is larger than a snapshot may be (%d bytes, %d files)", provider.ErrQuota, MaxSnapshotBytes, MaxSnapshotFiles)

// copyTree copies the directory src to dst (which must not exist):
// directories, regular files and symbolic links (as links, never
// followed), with their modes and, as root, their owners; anything else
// (sockets, fifos, devices) and the token file at the top are left out.
// The sandbox wrote src, so nothing in it is followed and the copy is
// bounded (MaxSnapshotBytes, MaxSnapshotFiles).
func copyTree(ctx context.Context, src, dst string) error {
	var files int
	var size int64
	root := true
	// Directories get their modes once their entries are in (one the
	// sandbox made unwritable would refuse them).
	type dirMode struct {
		path string
		mode fs.FileMode
	}
	var dirs []dirMode
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if rel == client.TokenFileName {
			return nil
		}
		if files++; files > MaxSnapshotFiles {
			return errSnapshotTooLarge
		}
		target := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if root {
				root = false
				if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
					return err
				}
			}
			if err := os.Mkdir(target, fi.Mode().Perm()|0o700); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if size += fi.Size(); size > MaxSnapshotBytes {
				return errSnapshotTooLarge
			}
			if err := copyFile(path, target, fi.Mode().Perm(), MaxSnapshotBytes-size+fi.Size()); err != nil {
				return err
			}
		default:
			return nil
		}
		if os.Geteuid() == 0 {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				if err := os.Lchown(target, int(st.Uid), int(st.Gid)); err != nil {
					return err
				}
			}
		}
		if d.IsDir() {
			dirs = append(dirs, dirMode{target, fi.Mode().Perm()})
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, d := range slices.Backward(dirs) {
		if err := os.Chmod(d.path, d.mode); err != nil {
			return err
		}
	}
	return nil
}

// copyFile copies the regular file src to the new file dst, at most limit
// bytes; neither is followed if it is a link.
func copyFile(src, dst string, mode fs.FileMode, limit int64) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	n, err := io.Copy(out, io.LimitReader(in, limit+1))
	if err == nil && n > limit {
		err = errSnapshotTooLarge
	}
	return errors.Join(err, out.Close())
}
