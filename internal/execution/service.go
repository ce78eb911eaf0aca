// Package execution runs code and long-lived processes in sandboxes on
// behalf of API callers: one-shot execution (Exec, ExecStream), a manager
// of started processes whose output can be replayed and followed (like E2B's
// envd), and a warm pool of pre-created sandboxes per policy hash.
//
// Every task gets a fresh sandbox that is closed when the task ends and is
// never reused. Policies are resolved by a Resolver (see PolicyResolver) and
// sandboxes come from the runtimes of a sandbox.Registry.
package execution

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/sandbox/owner"
)

// Errors of the service. The HTTP layer maps each once; runtime errors
// (sandbox.ErrUnenforceable, sandbox.ErrUnavailable,
// sandbox.ErrUnknownRuntime) pass through wrapped.
var (
	// ErrPolicyInvalid: the request's policy does not parse or validate;
	// the message names the file, line and field.
	ErrPolicyInvalid = errkind.New(errkind.Policy, "invalid policy")
	// ErrPolicyDenied: the operator's global policy refuses what the
	// request's policy asks for.
	ErrPolicyDenied = errkind.New(errkind.Policy, "policy denied")
	// ErrInvalid: the request itself is malformed (unknown language, a file
	// path escaping the workspace, an unknown signal, ...).
	ErrInvalid = errkind.New(errkind.Invalid, "invalid request")
	// ErrNotFound: no process has that id or tag.
	ErrNotFound = errkind.New(errkind.NotFound, "no such process")
	// ErrTooMany: the concurrency limit is reached; retry later.
	ErrTooMany = errkind.New(errkind.TooMany, "too many sandboxed tasks running")
	// ErrConflict: the process is not in a state that allows the call
	// (stdin closed or never opened, a tag already in use, ...).
	ErrConflict = errkind.New(errkind.Conflict, "conflict")
	// ErrClosed: the service is shutting down.
	ErrClosed = errkind.New(errkind.ShuttingDown, "execution service closed")
)

// Defaults for the zero values of Options.
const (
	DefaultMaxConcurrent  = 16
	DefaultPoolSize       = 2 // what the daemon should use; 0 disables the pool
	DefaultPoolIdle       = 5 * time.Minute
	DefaultOutputBuffer   = 1 << 20 // per process
	DefaultRetain         = 10 * time.Minute
	DefaultMaxKept        = 32
	DefaultMaxOutputBytes = 16 << 20 // per stream of one exec, whatever the policy says
	DefaultPreset         = "exec-default"
)

// Policy is what the service needs of a resolved policy;
// *policy.Policy implements it.
type Policy interface {
	// Isolation names the runtime: process, gvisor, microvm.
	Isolation() string
	// Hash identifies the policy for the warm pool.
	Hash() string
	// Compile resolves the policy for a workspace into a sandbox spec.
	Compile(workspace string, hostEnv func(string) (string, bool)) (sandbox.Spec, error)
}

// PolicyRef is how a request names its policy: at most one of Preset,
// Inline and Source. All empty means the service's default preset.
type PolicyRef struct {
	// Preset is a preset name ("strict", "exec-default", ...).
	Preset string
	// Inline is a policy as a JSON object.
	Inline json.RawMessage
	// Source is a policy document (YAML or JSON) as written in a file
	// called Name, so that errors name the caller's file and line.
	Name, Source string
}

// IsZero reports whether the reference names no policy.
func (r PolicyRef) IsZero() bool { return r.Preset == "" && len(r.Inline) == 0 && r.Source == "" }

// Resolver turns a request's policy reference into the effective policy
// (already intersected with the operator's global policy). It wraps
// ErrPolicyInvalid or ErrPolicyDenied when it refuses.
type Resolver func(ref PolicyRef) (Policy, error)

// Network serves the egress proxy of a task's sandbox, for sandboxes
// whose spec's network mode is "proxy". Execution has nobody to ask, so a
// destination no rule settles is denied.
type Network interface {
	// Attach starts the proxy of sb (created from spec) for the task
	// scope/id; onViolation gets each refused connection. The returned
	// function stops the proxy; it is called after the sandbox is closed.
	Attach(sb sandbox.Sandbox, spec sandbox.Spec, scope, id string, onViolation func(sandbox.Violation)) (detach func(), err error)
}

// Options configure a Service.
type Options struct {
	// Runtimes holds the isolation runtimes; required.
	Runtimes *sandbox.Registry
	// Resolve resolves request policies; required (see PolicyResolver).
	Resolve Resolver
	// DefaultPreset is used when a request names no policy
	// (default "exec-default").
	DefaultPreset string
	// WorkDir is where task workspaces are created (default os.TempDir()).
	WorkDir string
	// HostEnv is consulted for the env names a policy passes through
	// (default os.LookupEnv).
	HostEnv func(string) (string, bool)
	// MaxConcurrent bounds the tasks (execs and processes) running at
	// once; beyond it calls fail with ErrTooMany (default 16).
	MaxConcurrent int
	// PoolSize is the number of sandboxes kept ready per policy hash;
	// 0 disables the warm pool (the daemon should use DefaultPoolSize).
	PoolSize int
	// PoolIdle closes the ready sandboxes of a policy hash not asked for
	// in this long (default 5 minutes).
	PoolIdle time.Duration
	// OutputBuffer bounds the output kept per process for replay
	// (default 1 MiB); older output is dropped with a marker.
	OutputBuffer int
	// MaxOutputBytes caps each output stream of one exec when the policy
	// sets no smaller limit (default 16 MiB).
	MaxOutputBytes int64
	// Retain is how long a finished process stays listed (default 10
	// minutes) unless deleted; its workspace is kept as long (see
	// Workspace), within MaxKept.
	Retain time.Duration
	// MaxKept bounds the ended processes whose workspaces are kept
	// (default 32): past it, the workspace of the one that ended first
	// is removed (the process stays listed).
	MaxKept int
	// Registerer, when set, gets the service's metrics.
	Registerer metrics.Registerer
	// Violations, when set, is the daemon-wide violations counter (label
	// kind) to count in; it is then not registered here.
	Violations *metrics.CounterVec
	// OnViolation, when set, is called for every violation a sandbox
	// reports (for the audit log). It must not block.
	OnViolation func(task string, v sandbox.Violation)
	// Network serves the egress proxy of proxy-mode sandboxes. Without
	// it, a policy whose network mode is proxy is refused (fail closed).
	Network Network
	// Remote runs the execs that name a provider (Request.Provider);
	// without it they are refused as naming an unknown provider.
	Remote Remote
	Log    *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.DefaultPreset == "" {
		o.DefaultPreset = DefaultPreset
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	if o.HostEnv == nil {
		o.HostEnv = os.LookupEnv
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.PoolIdle <= 0 {
		o.PoolIdle = DefaultPoolIdle
	}
	if o.OutputBuffer <= 0 {
		o.OutputBuffer = DefaultOutputBuffer
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if o.Retain <= 0 {
		o.Retain = DefaultRetain
	}
	if o.MaxKept <= 0 {
		o.MaxKept = DefaultMaxKept
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Service runs execs and processes. Its methods are safe for concurrent use.
type Service struct {
	opts    Options
	pool    *pool
	metrics *serviceMetrics
	slots   chan struct{}

	mu     sync.Mutex
	closed bool
	procs  map[string]*proc
	// reserved holds the tags of processes being started.
	reserved map[string]bool
	// zygoteFailures holds when a zygote last failed to start, by pool key.
	zygoteFailures map[string]time.Time
	// execs are the running execs, killed by Close.
	execs map[*killer]struct{}
	tasks sync.WaitGroup // running execs and process waiters

	stopJanitor context.CancelFunc
	janitorDone chan struct{}
}

// New returns a service. Close it to kill what still runs and release the
// warm pool.
func New(opts Options) (*Service, error) {
	if opts.Runtimes == nil || opts.Resolve == nil {
		return nil, errors.New("execution: Options.Runtimes and Options.Resolve are required")
	}
	opts = opts.withDefaults()
	if err := os.MkdirAll(opts.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("execution: work dir: %w", err)
	}
	m, err := newMetrics(opts.Registerer, opts.Violations)
	if err != nil {
		return nil, err
	}
	s := &Service{
		opts:    opts,
		metrics: m,
		slots:   make(chan struct{}, opts.MaxConcurrent),
		procs:   map[string]*proc{},
		execs:   map[*killer]struct{}{},
	}
	s.pool = newPool(opts.PoolSize, opts.PoolIdle, opts.Log, m)
	ctx, cancel := context.WithCancel(context.Background())
	s.stopJanitor, s.janitorDone = cancel, make(chan struct{})
	go s.janitor(ctx)
	return s, nil
}

// Close kills every running process, waits for the running tasks and
// closes the warm pool's sandboxes. New calls fail with ErrClosed.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	procs := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		procs = append(procs, p)
	}
	for k := range s.execs {
		k.kill()
	}
	s.mu.Unlock()

	s.stopJanitor()
	<-s.janitorDone
	for _, p := range procs {
		p.kill()
	}
	done := make(chan struct{})
	go func() { s.tasks.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("execution: close: %w", ctx.Err())
	}
	s.mu.Lock()
	var kept []*proc
	for _, p := range procs {
		if p.kept {
			p.kept = false
			kept = append(kept, p)
		}
	}
	s.mu.Unlock()
	for _, p := range kept {
		p.box.discard(s.opts.Log)
	}
	return s.pool.close(ctx)
}

// acquire takes a concurrency slot; release gives it back.
func (s *Service) acquire() (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	select {
	case s.slots <- struct{}{}:
	default:
		s.metrics.rejected.Inc()
		return nil, fmt.Errorf("%w (limit %d)", ErrTooMany, cap(s.slots))
	}
	s.tasks.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			<-s.slots
			s.tasks.Done()
		})
	}, nil
}

// janitor closes idle pool entries and forgets old finished processes.
func (s *Service) janitor(ctx context.Context) {
	defer close(s.janitorDone)
	every := min(s.opts.PoolIdle/2, s.opts.Retain/2, 30*time.Second)
	t := time.NewTicker(max(every, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.pool.evictIdle(now)
			s.forgetFinished(now)
			s.forgetZygoteFailures(now)
		}
	}
}

// box is a sandbox acquired for one task, with the workspace it works in.
type box struct {
	sb        sandbox.Sandbox
	spec      sandbox.Spec
	workspace string       // host dir, removed at release (keep: at discard); "" when not ours
	record    *owner.Entry // workspace's owner record
	// kept: the sandbox commits into workspace, which release keeps
	// for the files API until discard.
	kept bool
	warm bool
	own  bool // closed at release
	// provider is the provider the sandbox is on ("" for this host).
	provider string
	// zyg is the interpreter waiting in a pooled sandbox for its task, or nil.
	zyg *zygote
	// refill (an exec's, or nil) refills the pools its sandbox was asked
	// of; its teardown calls it, after the answer.
	refill func()

	// detach stops the sandbox's egress proxy (attached per task).
	detach func()
	// reports coalesces what the sandbox refused into viol (see keep).
	reports *sandbox.Coalescer[sandbox.Violation]
	violMu  sync.Mutex
	viol    []sandbox.Violation
	beyond  map[string]*sandbox.Violation // by kind, past maxViolations
}

// maxViolations bounds the violations one task's result lists; those
// beyond are counted into one entry per kind at the end.
const maxViolations = 1000

// newBox returns a box for sb, with its violations coalesced.
func newBox(sb sandbox.Sandbox, spec sandbox.Spec, workspace string) *box {
	b := &box{sb: sb, spec: spec, workspace: workspace, own: true}
	b.reports = sandbox.NewViolationCoalescer(b.keep)
	return b
}

// keep adds what the coalescer passes on to the task's violations.
func (b *box) keep(vs ...sandbox.Violation) {
	b.violMu.Lock()
	defer b.violMu.Unlock()
	for _, v := range vs {
		if len(b.viol) < maxViolations {
			b.viol = append(b.viol, v)
			continue
		}
		if b.beyond == nil {
			b.beyond = map[string]*sandbox.Violation{}
		}
		first, last := v.First, v.Last
		if first.IsZero() {
			first = time.Now().UTC()
			last = first
		}
		t := b.beyond[v.Kind]
		if t == nil {
			t = &sandbox.Violation{Kind: v.Kind, Action: v.Action, Rule: v.Rule, First: first}
			b.beyond[v.Kind] = t
		}
		t.Count += v.N()
		t.Last = last
		t.Detail = fmt.Sprintf("%d more %s violations beyond the %d this result lists", t.Count, v.Kind, maxViolations)
	}
}

// violations ends the coalescing and returns everything kept.
func (b *box) violations() []sandbox.Violation {
	b.reports.Close()
	return b.take()
}

// seen returns the violations the task caused so far, for its result,
// without closing the sandbox: what the sandbox holds (sandbox.Sandbox's
// Commit returns the violations seen since the last Commit, so Close
// later returns only those after this call) and what the coalescer counted
// (flushed, not closed: later reports still count). Anything reported
// after this call is returned by release, for the audit log and the
// metrics only.
func (b *box) seen(log *slog.Logger) []sandbox.Violation {
	if b.own {
		// Bounded on its own like release: the result is wanted even when
		// the caller's context has ended (it is reported, then dropped).
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		v, err := b.sb.Commit(ctx)
		cancel()
		if err != nil {
			// Close will return what Commit could not; it goes to the
			// audit log then.
			log.Warn("collecting the violations of a finished exec", "sandbox", b.sb.ID(), "err", err)
		}
		for _, x := range v {
			b.reports.Add(x)
		}
	}
	b.reports.Flush()
	return b.take()
}

// take returns the violations kept so far and forgets them.
func (b *box) take() []sandbox.Violation {
	b.violMu.Lock()
	defer b.violMu.Unlock()
	out := b.viol
	for _, k := range []string{sandbox.ViolationFilesystem, sandbox.ViolationSyscall, sandbox.ViolationResource, sandbox.ViolationNetwork} {
		if t := b.beyond[k]; t != nil {
			out = append(out, *t)
		}
	}
	b.viol, b.beyond = nil, nil
	return out
}

// attachNetwork starts the egress proxy of a proxy-mode box for one task.
func (s *Service) attachNetwork(b *box, scope, id string) error {
	if b.spec.Network.Mode != sandbox.NetworkProxy || b.detach != nil {
		return nil
	}
	if s.opts.Network == nil {
		return fmt.Errorf("%w: network mode proxy: this service has no egress proxy", sandbox.ErrUnenforceable)
	}
	detach, err := s.opts.Network.Attach(b.sb, b.spec, scope, id, b.reports.Add)
	if err != nil {
		return err
	}
	b.detach = detach
	return nil
}

// info describes the box for results.
func (b *box) info() SandboxInfo {
	in := b.sb.Info()
	return SandboxInfo{ID: b.sb.ID(), Runtime: in.Runtime, Mechanisms: in.Mechanisms, Degraded: in.Degraded, Warm: b.warm, Provider: b.provider}
}

// release closes the sandbox (when ours) and removes its workspace. The
// close is bounded on its own: it runs after the task, whatever the
// caller's context says.
func (b *box) release(log *slog.Logger) []sandbox.Violation { return b.end(log, false) }

// releaseKeeping is release that keeps the workspace of a kept box (the
// sandbox's Close committed into it) until discard.
func (b *box) releaseKeeping(log *slog.Logger) []sandbox.Violation { return b.end(log, b.kept) }

func (b *box) end(log *slog.Logger, keep bool) []sandbox.Violation {
	if !b.own {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	closeViol, err := b.sb.Close(ctx)
	if err != nil {
		log.Warn("closing sandbox", "sandbox", b.sb.ID(), "err", err)
	}
	if b.zyg != nil {
		b.zyg.close()
	}
	if b.detach != nil {
		b.detach()
	}
	for _, v := range closeViol {
		b.reports.Add(v)
	}
	viol := b.violations()
	if !keep {
		b.discard(log)
	}
	return viol
}

// discard removes the box's workspace directory (when ours).
func (b *box) discard(log *slog.Logger) {
	if b.workspace == "" {
		return
	}
	if err := os.RemoveAll(b.workspace); err != nil {
		log.Warn("removing task workspace", "dir", b.workspace, "err", err)
		return
	}
	b.record.Release()
	b.workspace = ""
}

// resolve returns the effective policy of a request.
func (s *Service) resolve(ref PolicyRef) (Policy, error) {
	if ref.IsZero() {
		ref.Preset = s.opts.DefaultPreset
	}
	pol, err := s.opts.Resolve(ref)
	if err != nil {
		s.metrics.policyDenied.Inc()
		return nil, err
	}
	return pol, nil
}

// sandboxFor returns a sandbox for pol: a warm one when the pool has one
// and the task needs no files placed before the start, a new one
// otherwise. The workspace of a warm sandbox was made by the pool.
//
// With zygote set (a language, see zygoteLang), the warm sandbox comes
// from a pool of its own whose sandboxes hold that language's zygote
// (when it could start: see createZygote). A zygote found dead or unfit is
// discarded; then, as when that pool is empty (a burst outran its
// refills), the task gets a plain sandbox of pol's pool, or a new one.
//
// With keep (a process's sandbox, see Workspace), the sandbox commits its
// workspace into the host directory when it closes, and that directory is
// kept after the release: those sandboxes have a pool of their own.
func (s *Service) sandboxFor(ctx context.Context, pol Policy, files map[string][]byte, zygote string, keep bool) (*box, error) {
	if keep {
		if len(files) == 0 && s.pool.enabled() {
			if w, _ := s.pool.take(pol.Hash()+"\x00keep", func(ctx context.Context) (*box, error) { return s.create(ctx, pol, nil, true) }, false); w != nil {
				w.warm = true
				return w, nil
			}
		}
		return s.create(ctx, pol, files, true)
	}
	// An exec's takes refill their pools once the exec has answered (see
	// pool.take): b.refill, called by its teardown.
	var refills []func()
	refill := func() {
		for _, r := range refills {
			r()
		}
	}
	if len(files) == 0 && s.pool.enabled() {
		if zygote != "" {
			key := pol.Hash() + "\x00zygote:" + zygote
			w, r := s.pool.take(key, func(ctx context.Context) (*box, error) { return s.createZygote(ctx, pol, key, zygote) }, true)
			refills = append(refills, r)
			if w != nil {
				if w.zyg == nil || w.zyg.usable() {
					w.warm, w.refill = true, refill
					return w, nil
				}
				s.metrics.zygote.WithLabelValues("discarded").Inc()
				s.opts.Log.Warn("warm pool: a zygote ended or wrote before its task; the task starts its interpreter in another sandbox",
					"sandbox", w.sb.ID(), "language", zygote)
				s.report("zygote:"+w.sb.ID(), w.release(s.opts.Log))
			}
		}
		w, r := s.pool.take(pol.Hash(), func(ctx context.Context) (*box, error) { return s.create(ctx, pol, nil, false) }, true)
		refills = append(refills, r)
		if w != nil {
			w.warm, w.refill = true, refill
			return w, nil
		}
	}
	b, err := s.create(ctx, pol, files, false)
	if err != nil {
		refill() // no task to wait for
		return nil, err
	}
	b.refill = refill
	return b, nil
}

// create builds a sandbox with a fresh workspace holding files. Without
// keep, the workspace is throwaway: nothing the task writes leaves the
// sandbox. With keep, the sandbox's Close commits it into the workspace
// directory, which release then keeps (see Workspace).
func (s *Service) create(ctx context.Context, pol Policy, files map[string][]byte, keep bool) (*box, error) {
	rt, err := s.opts.Runtimes.Get(pol.Isolation())
	if err != nil {
		return nil, fmt.Errorf("isolation %q: %w", pol.Isolation(), err)
	}
	ws, err := os.MkdirTemp(s.opts.WorkDir, "task-")
	if err != nil {
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	// Written down (package owner) so that if this process dies, the next
	// agentbox to start removes it. Nothing is in it yet.
	record, err := owner.Default().Record(owner.Record{Kind: owner.KindDir, Path: ws})
	if err != nil {
		_ = os.Remove(ws) // empty; err is the one to report
		return nil, fmt.Errorf("create workspace: %w", err)
	}
	fail := func(err error) (*box, error) {
		if os.RemoveAll(ws) == nil { // best effort: err is the one to report
			record.Release()
		}
		return nil, err
	}
	if err := writeFiles(ws, files); err != nil {
		return fail(err)
	}
	spec, err := pol.Compile(ws, s.opts.HostEnv)
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrPolicyInvalid, err))
	}
	// An exec's workspace is nobody's: what the task writes stays in the
	// sandbox and goes with it, never copied to a host directory. A
	// process's is committed, at its end, into its own directory (no
	// other tree), by the commit's rules: protected paths are dropped and
	// reported as for a session. Hidden paths are not held: the files
	// API's caller is the reviewer (as for a session's files API).
	spec.Throwaway = !keep
	if keep {
		spec.Review = approveAll
	}
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		return fail(fmt.Errorf("create %s sandbox: %w", rt.Name(), err))
	}
	b := newBox(sb, spec, ws)
	b.record, b.kept = record, keep
	return b, nil
}

// approveAll is the review of a kept task workspace's commit.
func approveAll(_ context.Context, changes []sandbox.Change) []bool {
	ok := make([]bool, len(changes))
	for i := range ok {
		ok[i] = true
	}
	return ok
}

// maxFiles bounds the files of one request.
const maxFiles = 1000

// writeFiles places files (relative path → content) in dir, refusing any
// path that would leave it. os.Root keeps symlinks from leading out too.
func writeFiles(dir string, files map[string][]byte) error {
	if len(files) == 0 {
		return nil
	}
	if len(files) > maxFiles {
		return fmt.Errorf("%w: %d files, at most %d", ErrInvalid, len(files), maxFiles)
	}
	for name := range files {
		if err := checkFilePath(name); err != nil {
			return err
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	for name, data := range files {
		name = filepath.FromSlash(name)
		if d := filepath.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return fmt.Errorf("%w: file %q: %w", ErrInvalid, name, err)
			}
		}
		if err := root.WriteFile(name, data, 0o644); err != nil {
			return fmt.Errorf("%w: file %q: %w", ErrInvalid, name, err)
		}
	}
	return nil
}

// checkFilePath accepts slash-separated relative paths inside the
// workspace: no absolute path, no "..", nothing empty.
func checkFilePath(name string) error {
	switch {
	case name == "" || strings.ContainsRune(name, 0):
		return fmt.Errorf("%w: file path %q is empty or holds NUL", ErrInvalid, name)
	case strings.HasPrefix(name, "/") || !filepath.IsLocal(filepath.FromSlash(name)):
		return fmt.Errorf("%w: file path %q must be relative and stay inside the workspace", ErrInvalid, name)
	case strings.HasSuffix(name, "/") || path.Clean(name) == ".":
		return fmt.Errorf("%w: file path %q names a directory", ErrInvalid, name)
	}
	return nil
}

// newID returns a random id with a prefix.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// report records violations in the metrics and hands them to OnViolation.
func (s *Service) report(task string, viol []sandbox.Violation) {
	for _, v := range viol {
		s.metrics.violations.WithLabelValues(v.Kind).Add(float64(v.N()))
		if s.opts.OnViolation != nil {
			s.opts.OnViolation(task, v)
		}
	}
}
