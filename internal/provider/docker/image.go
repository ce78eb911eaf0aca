package docker

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/provider"
)

// ImageRepo is the repository of the images EnsureImage builds; the tag
// is the digest of what went into the image (imageDigest).
const ImageRepo = "agentbox-sandbox"

// caRoots is the host's CA bundle, copied into the image when present
// (the inner daemon's egress proxy verifies model APIs' certificates).
const caRoots = "/etc/ssl/certs/ca-certificates.crt"

// imageLayout names the layout of the image's context: bump it when
// contextTar changes what it writes, so that images built the old way are
// not reused.
const imageLayout = "agentbox-sandbox/1"

// dockerfile builds the image from the context's rootfs/ alone: nothing
// is pulled (FROM scratch) and no command runs.
const dockerfile = `FROM scratch
COPY rootfs/ /
ENTRYPOINT ["/agentbox"]
`

// EnsureImage returns the tag of the sandbox image for the static agentbox
// binary at binary, building it through the Engine API when the daemon
// does not have it yet. The tag is the sha256 of the binary (and of the CA
// roots and the layout copied beside it): a rebuilt binary gets a new
// image, an unchanged one reuses the image already built.
func (p *Provider) EnsureImage(ctx context.Context, binary string) (string, error) {
	if binary == "" {
		return "", errkind.New(errkind.Invalid, "docker provider: Spec.Binary is required unless the option image names an image")
	}
	digest, err := imageDigest(binary)
	if err != nil {
		return "", err
	}
	tag := ImageRepo + ":" + digest
	p.buildMu.Lock()
	defer p.buildMu.Unlock()
	if err := p.cli.imageInspect(ctx, tag); err == nil {
		return tag, nil
	} else if !errors.Is(err, errNotFound) {
		return "", p.mapErr("image "+tag, err)
	}
	if err := p.build(ctx, tag, func(tw *tar.Writer) error { return contextTar(tw, binary) }); err != nil {
		return "", err
	}
	return tag, nil
}

// imageDigest is the hex sha256 of the layout, the binary and the CA roots.
func imageDigest(binary string) (string, error) {
	h := sha256.New()
	_, _ = io.WriteString(h, imageLayout+"\n"+dockerfile) // a hash never fails
	for _, path := range []string{binary, caRoots} {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) && path == caRoots {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("docker provider: image: %w", err)
		}
		_, _ = fmt.Fprintf(h, "%s\n", path)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("docker provider: image: %w", err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// contextTar writes the build context: the Dockerfile (with env, KEY=VALUE
// lines of the image's environment) and rootfs/ with the binary as
// /agentbox, the CA roots, /tmp and the mount point /run/agentbox.
func contextTar(tw *tar.Writer, binary string, env ...string) error {
	df := dockerfile
	for _, e := range env {
		df += "ENV " + e + "\n"
	}
	if err := addFile(tw, "Dockerfile", []byte(df), 0o644); err != nil {
		return err
	}
	for _, d := range []struct {
		name string
		mode int64
	}{{"rootfs/", 0o755}, {"rootfs/tmp/", 0o1777}, {"rootfs/run/", 0o755}, {"rootfs/run/agentbox/", 0o755}, {"rootfs/etc/", 0o755}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.name, Mode: d.mode, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	if err := addHostFile(tw, "rootfs/agentbox", binary, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(caRoots); err == nil {
		for _, d := range []string{"rootfs/etc/ssl/", "rootfs/etc/ssl/certs/"} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return err
			}
		}
		if err := addHostFile(tw, "rootfs"+caRoots, caRoots, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func addFile(tw *tar.Writer, name string, b []byte, mode int64) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

// addHostFile copies the regular file at path into the tar as name.
func addHostFile(tw *tar.Writer, name, path string, mode int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: st.Size(), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, st.Size()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// build builds the image tag from the context write writes, with the
// classic builder (no BuildKit session), no network and no pull; the
// daemon's build errors come back in the body's stream.
func (p *Provider) build(ctx context.Context, tag string, write func(*tar.Writer) error) error {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := write(tw)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	defer func() { _ = pr.Close() }()
	body, err := p.cli.imageBuild(ctx, pr, buildOptions{
		tag:         tag,
		networkMode: "none",
		labels:      map[string]string{"agentbox.image": ImageRepo},
	})
	if err != nil {
		return p.mapErr("build image "+tag, err)
	}
	defer body.Close()
	if err := buildOutcome(tag, body); err != nil {
		return err
	}
	// A stream that ended without an error is no proof: the image must be
	// there.
	if err := p.cli.imageInspect(ctx, tag); err != nil {
		return fmt.Errorf("%w: build image %s: the build ended without an error but the image is not there: %w", provider.ErrUnavailable, tag, err)
	}
	return nil
}
