package execution

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"time"

	"github.com/agentbox/agentbox/internal/files"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
	"github.com/agentbox/agentbox/internal/sandbox/workspace"
)

// RemoteProcesses is an optional ability of a Remote: it starts a
// process in a fresh sandbox of a provider, through the processes API of
// the agentbox daemon inside it, under the policy this host resolved.
// The sandbox is the process's alone; RemoteProcess.Close destroys it.
type RemoteProcesses interface {
	StartProcess(ctx context.Context, req RemoteStartRequest) (RemoteProcess, error)
}

// RemoteStartRequest is a process a RemoteProcesses starts: the request
// as the caller made it (its Policy, Sandbox, Limits, Closing and Scope
// unused), with its policy resolved on this host.
type RemoteStartRequest struct {
	StartRequest
	// Policy is the effective policy, a JSON policy object.
	Policy json.RawMessage
	// Limit is the process's time limit (the request's timeout or the
	// policy's, whichever is shorter; 0: none).
	Limit time.Duration
	// Input, when set, is the process's standard input (Stdin or TTY):
	// what is read from it is written to the process until EOF, when a
	// process without a terminal gets its stdin closed. The
	// RemoteProcesses closes it when it has done with it.
	Input io.ReadCloser
	// Stdout and Stderr get the process's output as it comes (a
	// terminal's is all Stdout). Wait returns after the last of it.
	Stdout, Stderr io.Writer
}

// RemoteProcess is a process started by a RemoteProcesses. Its Wait
// returns after its output has been written; an inner daemon that stops
// answering ends it with an error (the process is then lost: Close
// destroys its sandbox).
type RemoteProcess interface {
	sandbox.Process
	// Sandbox describes where it runs (Provider set).
	Sandbox() SandboxInfo
	// Resize sets a TTY process's terminal size.
	Resize(ctx context.Context, rows, cols int) error
	// Archive is the process's workspace as a tar stream, while its
	// sandbox exists: what Close copies back. The caller closes it.
	Archive(ctx context.Context) (io.ReadCloser, error)
	// Close destroys the sandbox (bounded on its own, whatever ctx) and
	// returns what the inner daemon reported refused.
	Close(ctx context.Context) ([]sandbox.Violation, error)
}

// RemoteFilesServer is an optional ability of a RemoteProcess: it serves
// a files API request of the process's workspace (rest: the path after
// /v1/processes/{id}/files) from the daemon in its sandbox, while the
// sandbox exists.
type RemoteFilesServer interface {
	ServeFiles(w http.ResponseWriter, r *http.Request, rest string)
}

// RemoteFiles returns the files server of a running provider process
// found by id or tag; ok is false for any other process (a local one, or
// one that has ended: its workspace is then the copy on this host, see
// Workspace).
func (s *Service) RemoteFiles(idOrTag string) (RemoteFilesServer, bool) {
	pr, err := s.lookup(idOrTag)
	if err != nil || pr.box.provider == "" || !pr.running() {
		return nil, false
	}
	fs, ok := pr.p.(RemoteFilesServer)
	return fs, ok
}

// remoteProcesses returns the Remote's ability to start processes.
func (s *Service) remoteProcesses(name string) (RemoteProcesses, error) {
	rp, ok := s.opts.Remote.(RemoteProcesses)
	if s.opts.Remote == nil || !ok {
		return nil, fmt.Errorf("%w: %q (no provider runs processes on this daemon)", provider.ErrUnknown, name)
	}
	return rp, nil
}

// startRemote starts req on its provider: the policy is resolved here
// (what the operator's global policy refuses is refused before a sandbox
// is made), the process runs in a fresh sandbox there, and this service
// keeps its record, output buffer, stdin and tag exactly as for a local
// process. A host directory is made for its workspace, into which its
// sandbox's workspace is copied back when it ends (remoteSandbox.Close),
// by the commit's rules, and kept like a local process's.
func (s *Service) startRemote(ctx context.Context, req StartRequest, release func()) (ProcessInfo, error) {
	rps, err := s.remoteProcesses(req.Provider)
	if err != nil {
		return ProcessInfo{}, err
	}
	pol, err := s.resolve(req.Policy)
	if err != nil {
		return ProcessInfo{}, err
	}
	raw, err := json.Marshal(pol)
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("encode the effective policy: %w", err)
	}
	ws, err := os.MkdirTemp(s.opts.WorkDir, "task-")
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("create workspace: %w", err)
	}
	record, err := owner.Default().Record(owner.Record{Kind: owner.KindDir, Path: ws})
	if err != nil {
		_ = os.Remove(ws)
		return ProcessInfo{}, fmt.Errorf("create workspace: %w", err)
	}
	// The spec is compiled for its limits and commit rules only: nothing
	// of this host (workspace, environment) goes to the provider.
	spec, err := pol.Compile(ws, func(string) (string, bool) { return "", false })
	if err != nil {
		if os.RemoveAll(ws) == nil {
			record.Release()
		}
		return ProcessInfo{}, fmt.Errorf("%w: %w", ErrPolicyInvalid, err)
	}
	b := newBox(nil, spec, ws)
	b.record, b.kept, b.provider = record, true, req.Provider
	fail := func(err error) (ProcessInfo, error) {
		b.discard(s.opts.Log)
		return ProcessInfo{}, err
	}

	pr := &proc{id: newID("prc_"), tag: req.Tag, argv: slices.Clone(req.Argv), box: b, out: newRing(s.opts.OutputBuffer), done: make(chan struct{})}
	pr.outs = [2]*procWriter{{r: pr.out, stream: Stdout}, {r: pr.out, stream: Stderr}}
	limit := effectiveTimeout(req.Timeout, spec.Limits.Timeout)
	var input *os.File
	if req.Stdin || req.TTY {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(fmt.Errorf("stdin pipe: %w", err))
		}
		input, pr.stdin = r, w
	}
	rreq := RemoteStartRequest{StartRequest: req, Policy: raw, Limit: limit, Stdout: pr.outs[0], Stderr: pr.outs[1]}
	if input != nil {
		rreq.Input = input
	}
	pr.started = time.Now()
	p, err := rps.StartProcess(ctx, rreq)
	if err != nil {
		if input != nil {
			_ = input.Close()
			_ = pr.stdin.Close()
		}
		return fail(err)
	}
	b.sb = &remoteSandbox{p: p, workspace: ws, spec: spec}
	pr.p = p
	pr.k.set(p)
	pr.info = ProcessInfo{ID: pr.id, Tag: pr.tag, Argv: pr.argv, Running: true, StartedAt: pr.started, Sandbox: b.info(),
		Adjusted: append(slices.Clone(adjustments(pol)), timeoutAdjusted(req.Timeout, limit)...)}
	if req.TTY {
		rows, cols := termSize(req)
		pr.term, pr.resize = true, p.Resize
		pr.info.TTY, pr.info.Rows, pr.info.Cols = true, rows, cols
	}
	s.mu.Lock()
	s.procs[pr.id] = pr
	s.mu.Unlock()
	s.metrics.processes.Inc()
	s.metrics.running.Inc()
	go s.wait(pr, limit, release)
	return pr.snapshot(), nil
}

// remoteSandbox is a provider process's sandbox as a box holds it: its
// Close copies the process's workspace back into the host directory, then
// destroys the sandbox.
type remoteSandbox struct {
	p         RemoteProcess
	workspace string
	spec      sandbox.Spec
}

var _ sandbox.Sandbox = (*remoteSandbox)(nil)

func (r *remoteSandbox) ID() string { return r.p.Sandbox().ID }

func (r *remoteSandbox) Info() sandbox.Info {
	in := r.p.Sandbox()
	return sandbox.Info{Runtime: in.Runtime, Mechanisms: in.Mechanisms, Degraded: in.Degraded}
}

// Start is refused: the sandbox runs its one process.
func (r *remoteSandbox) Start(context.Context, sandbox.Cmd) (sandbox.Process, error) {
	return nil, fmt.Errorf("%w: a provider process's sandbox runs that process only", sandbox.ErrUnenforceable)
}

// Commit has nothing to do: the workspace is copied back at Close.
func (r *remoteSandbox) Commit(context.Context) ([]sandbox.Violation, error) { return nil, nil }

// Close copies the workspace back (see copyBack), then destroys the
// sandbox, whatever became of the copy.
func (r *remoteSandbox) Close(ctx context.Context) ([]sandbox.Violation, error) {
	var viol []sandbox.Violation
	var errs []error
	if r.workspace != "" {
		v, err := copyBack(ctx, r.p, r.workspace, r.spec)
		viol = append(viol, v...)
		if err != nil {
			errs = append(errs, fmt.Errorf("copy the workspace of sandbox %s back: %w", r.ID(), err))
		}
		r.workspace = ""
	}
	v, err := r.p.Close(ctx)
	viol = append(viol, v...)
	return viol, errors.Join(append(errs, err)...)
}

// copyBack unpacks the archive of p's workspace into dir, as a sandbox's
// commit does for a local process: an entry the commit's rules refuse (a
// protected path of the policy, anything in .git) is dropped and
// reported as a filesystem violation; the archive is checked and bounded
// as an upload's (files.Workspace.Unpack: entry kinds, names, 10 000
// entries, 64 MiB).
func copyBack(ctx context.Context, p RemoteProcess, dir string, spec sandbox.Spec) ([]sandbox.Violation, error) {
	opts := workspace.OptionsFor(spec)
	opts.Review = nil
	gate, err := workspace.NewGate(ctx, dir, opts)
	if err != nil {
		return nil, err
	}
	ws, err := files.Open(dir, files.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = ws.Close() }()
	rc, err := p.Archive(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	// The bound of what is read: the entries' bytes Unpack takes, and
	// their headers and padding.
	lim := ws.Limits()
	in := io.LimitReader(rc, lim.MaxArchiveBytes+int64(lim.MaxArchiveEntries)*4<<10)
	pr, pw := io.Pipe()
	var viol []sandbox.Violation
	go func() { pw.CloseWithError(filterArchive(in, pw, gate.Check, &viol)) }()
	_, err = ws.Unpack(ctx, ".", pr)
	_ = pr.CloseWithError(errors.New("unpack ended"))
	return viol, err
}

// maxDropped bounds the violations one copy-back reports.
const maxDropped = 100

// filterArchive copies the tar stream in to out without the entries
// check refuses, each reported in viol (up to maxDropped).
func filterArchive(in io.Reader, out io.Writer, check func(rel string, isDir bool) (string, bool), viol *[]sandbox.Violation) error {
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		rel := path.Clean(h.Name)
		if rule, ok := check(rel, h.Typeflag == tar.TypeDir); !ok {
			if len(*viol) < maxDropped {
				*viol = append(*viol, sandbox.Violation{Kind: sandbox.ViolationFilesystem, Target: rel, Rule: rule, Action: "dropped",
					Detail: fmt.Sprintf("%s was not copied back from the provider's sandbox: %s", rel, rule)})
			}
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}
