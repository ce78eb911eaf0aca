package engine

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
)

// contentCapability names the capability flag a content part type needs.
var contentCapability = map[event.PartType]string{event.PartImage: "images", event.PartFile: "files"}

// accepts reports whether an agent with caps takes parts of type t.
func accepts(caps agent.Capabilities, t event.PartType) bool {
	switch t {
	case event.PartText:
		return true
	case event.PartImage:
		return caps.Images
	case event.PartFile:
		return caps.Files
	}
	return false
}

// checkContent is the one check of a message's parts against what its
// session's agent accepts (agent.Capabilities), made before any turn
// starts, or any stopped agent is resumed for it: a part the agent cannot
// take refuses the whole message (*ContentError naming the part), instead
// of the adapter dropping it or turning it into something else.
func (m *Manager) checkContent(ctx context.Context, agentName string, content []event.ContentPart) error {
	var caps *agent.Capabilities
	for i, p := range content {
		if p.Type == event.PartText {
			continue
		}
		if caps == nil {
			a, err := m.cfg.Agents.Get(agentName)
			if err != nil {
				return err
			}
			c := a.Info(ctx).Capabilities
			caps = &c
		}
		if !accepts(*caps, p.Type) {
			return &ContentError{Index: i, Type: p.Type, Agent: agentName}
		}
	}
	return nil
}

// hasAttachments reports whether content has a part other than text.
func hasAttachments(content []event.ContentPart) bool {
	for _, p := range content {
		if p.Type != event.PartText {
			return true
		}
	}
	return false
}

// MaxAttachment bounds the bytes of one image or file part a message names
// by path: the engine reads it into the message.
const MaxAttachment = 16 << 20

// resolveContent is the one place every image and file part of a message
// passes before any adapter sees it; it fixes what a part carries:
//
//   - data: the content itself, base64 (checked here);
//   - path: a file in the session's workspace cwd, relative to it (or
//     absolute inside it), which the engine reads into data here. The
//     read is confined to the workspace (os.Root: no "..", no absolute
//     path elsewhere, no symbolic link leading out), takes only a regular
//     file of at most MaxAttachment bytes, and never blocks on a FIFO or
//     device, so a client (or an agent that planted a link in the
//     workspace) cannot make the daemon put a host file in the prompt;
//   - uri: only http(s), passed on for the agent to fetch; a file: URI is
//     taken as its path (with data too: the path then only names the
//     content, and must still lie in the workspace), any other scheme is
//     refused.
//
// The parts it returns carry data (and path, relative and cleaned, as the
// part's name) or an http(s) uri: adapters never read the host.
func resolveContent(cwd string, content []event.ContentPart) ([]event.ContentPart, error) {
	out := slices.Clone(content)
	var root *os.Root
	defer func() {
		if root != nil {
			_ = root.Close()
		}
	}()
	for i, p := range out {
		if p.Type == event.PartText {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: content[%d]: %s", ErrInvalid, i, fmt.Sprintf(format, a...))
		}
		if p.URI != "" {
			u, err := url.Parse(p.URI)
			switch {
			case err != nil:
				return nil, bad("uri does not parse")
			case u.Scheme == "https" || u.Scheme == "http":
			case u.Scheme == "file" && (u.Host == "" || u.Host == "localhost"):
				// An ACP client's resource_link sends both: they must
				// name the same file (the path is checked below).
				if p.Path != "" && !sameWorkspaceFile(cwd, u.Path, p.Path) {
					return nil, bad("uri %q and path %q name different files of the workspace", p.URI, p.Path)
				}
				p.Path, p.URI = u.Path, ""
			default:
				return nil, bad("uri scheme %q is not http, https or file (a file: uri is a path in the session's workspace)", u.Scheme)
			}
		}
		switch {
		case p.Data != "":
			if _, err := base64.StdEncoding.DecodeString(p.Data); err != nil {
				return nil, bad("data is not standard base64: %v", err)
			}
			if p.Path != "" {
				rel, err := workspacePath(cwd, p.Path)
				if err != nil {
					return nil, bad("%v", err)
				}
				p.Path = rel
			}
		case p.Path != "":
			rel, err := workspacePath(cwd, p.Path)
			if err != nil {
				return nil, bad("%v", err)
			}
			if root == nil {
				if root, err = os.OpenRoot(cwd); err != nil {
					return nil, fmt.Errorf("content[%d]: the session's workspace: %w", i, err)
				}
			}
			b, err := readAttachment(root, rel)
			if err != nil {
				return nil, bad("path %q: %v", p.Path, err)
			}
			p.Path, p.Data = rel, base64.StdEncoding.EncodeToString(b)
			if p.MimeType == "" {
				p.MimeType = mime.TypeByExtension(filepath.Ext(rel))
			}
			if p.MimeType == "" {
				p.MimeType = http.DetectContentType(b)
			}
		}
		out[i] = p
	}
	return out, nil
}

// sameWorkspaceFile reports whether a and b name the same file of the
// workspace cwd.
func sameWorkspaceFile(cwd, a, b string) bool {
	ra, errA := workspacePath(cwd, a)
	rb, errB := workspacePath(cwd, b)
	return errA == nil && errB == nil && ra == rb
}

// workspacePath returns p as a clean path relative to the workspace cwd,
// or an error if it names something outside it (lexically: links are
// os.Root's to refuse).
func workspacePath(cwd, p string) (string, error) {
	rel := p
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(cwd, filepath.Clean(p))
		if err != nil {
			return "", fmt.Errorf("path %q is not in the session's workspace", p)
		}
		rel = r
	}
	rel = filepath.Clean(rel)
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("path %q is not in the session's workspace", p)
	}
	return rel, nil
}

// readAttachment reads the regular file rel under root, at most
// MaxAttachment bytes. It opens without blocking (a FIFO swapped in after
// the first check would hang the daemon) and checks the opened file too,
// so that a swap between the check and the read changes nothing.
func readAttachment(root *os.Root, rel string) ([]byte, error) {
	// Not even opened if it is not a regular file now (opening a device
	// can have effects of its own); checked again once open.
	fi, err := root.Stat(rel)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }() // read-only
	fi, err = f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > MaxAttachment {
		return nil, fmt.Errorf("larger than %d bytes", MaxAttachment)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxAttachment+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxAttachment {
		return nil, fmt.Errorf("larger than %d bytes", MaxAttachment)
	}
	return b, nil
}
