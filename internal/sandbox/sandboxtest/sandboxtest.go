// Package sandboxtest is the conformance, escape and resource suite every
// sandbox.Runtime must pass. Run drives a runtime through each attempt of the
// escape list in docs (isolation research §5), for sandboxes without a
// network and behind the egress proxy (a real egress gate serves the
// runtime's Egress listener), asserts the exact outcome (an errno name, a
// Verdict reason, or a Violation from Commit/Close) and then asserts that the
// host is unchanged: protected and outside files byte-identical, no stray
// files in the host workspace, no process left.
//
// Runtimes differ where their kernels differ (gVisor implements its own
// syscall table). Options states every such difference explicitly, per case
// and per probe; nothing is skipped silently.
package sandboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Options declares how a runtime legitimately differs from the default
// expectations. Keys that name no case or probe fail the suite, so a typo
// cannot hide a case.
type Options struct {
	// Expect overrides the expected result of single probes, keyed
	// "case/probe", e.g. "13_bpf/bpf": "ENOSYS". A value is a result or
	// several separated by "|": an errno name ("EPERM"), "ok", or a
	// case-specific word documented at the probe.
	Expect map[string]string
	// Skip names cases that do not apply to this runtime, each with the
	// reason; the case reports t.Skip with that reason.
	Skip map[string]string
	// Spec adjusts the default spec of every case (after the case's own
	// changes are applied), e.g. to point at a runtime-specific root.
	Spec func(*sandbox.Spec)
	// SlowStart is added to every watchdog (runtimes with a slow start,
	// such as gVisor on the ptrace platform).
	SlowStart time.Duration
	// AllowUnavailable makes Run skip (with the probe's reason) instead of
	// fail when the runtime's Probe says it is unavailable on this host.
	AllowUnavailable bool
	// Only, when not empty, runs just the named cases (for debugging one
	// case with a runtime; the names are still validated).
	Only []string
}

// Env names Run sets in the test process (the "daemon") to values that must
// never be seen inside a sandbox.
var secretEnv = []string{"AGENTBOX_TEST_SECRET", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "ANTHROPIC_API_KEY"}

// tcase is one subtest of the suite.
type tcase struct {
	name string
	// want is the expected result of each named probe (before overrides).
	want map[string]string
	// serial cases do not call t.Parallel (they need the machine to
	// themselves, e.g. to fill memory).
	serial bool
	run    func(h *harness)
}

// suite is the full list, assembled from the cases_*.go files.
func suite() []tcase {
	var all []tcase
	all = append(all, conformanceCases()...)
	all = append(all, filesystemCases()...)
	all = append(all, processCases()...)
	all = append(all, kernelCases()...)
	all = append(all, networkCases()...)
	all = append(all, egressCases()...)
	all = append(all, resourceCases()...)
	all = append(all, commitCases()...)
	return all
}

// shared is what Run sets up once for all cases.
type shared struct {
	secrets    map[string]string // env name → secret value set in the host process
	hostHelper *hostHelper       // a host process the sandbox must not see
	agentSock  string            // a host unix socket (SSH_AUTH_SOCK) the sandbox must not reach
	abstract   string            // a host abstract unix socket name
	sockHits   *counter          // connections accepted on those sockets
	leakFD     int               // a host directory fd without O_CLOEXEC
}

// Run runs the suite against rt. The calling test must not be parallel:
// Run sets host environment variables (secrets the sandbox must not see).
func Run(t *testing.T, rt sandbox.Runtime, opts Options) {
	cases := suite()
	if err := validate(cases, opts); err != nil {
		t.Fatal(err)
	}
	pr := rt.Probe(t.Context())
	if !pr.Available {
		if opts.AllowUnavailable {
			t.Skipf("runtime %q unavailable on this host: %s", rt.Name(), pr.Reason)
		}
		t.Fatalf("runtime %q unavailable on this host: %s", rt.Name(), pr.Reason)
	}

	sh := &shared{secrets: map[string]string{}, sockHits: &counter{}}
	for _, name := range secretEnv {
		v := "agentbox-secret-" + randHex(12)
		sh.secrets[name] = v
		t.Setenv(name, v)
	}
	sh.hostHelper = startHostHelper(t)
	sh.agentSock, sh.abstract = listenHostUnix(t, sh.sockHits)
	t.Setenv("SSH_AUTH_SOCK", sh.agentSock)
	sh.secrets["SSH_AUTH_SOCK"] = sh.agentSock
	sh.leakFD = openLeakyDir(t)

	for _, c := range cases {
		if len(opts.Only) > 0 && !slices.Contains(opts.Only, c.name) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := opts.Skip[c.name]; ok {
				t.Skipf("runtime %q declares this case does not apply: %s", rt.Name(), reason)
			}
			if !c.serial {
				t.Parallel()
			}
			h := newHarness(t, rt, opts, sh, c)
			c.run(h)
		})
	}
	// The host listeners must have seen nothing from any sandbox. Checked
	// after the parallel subtests, which finish before Cleanup runs.
	t.Cleanup(func() {
		if n := sh.sockHits.get(); n != 0 {
			t.Errorf("host unix sockets (SSH_AUTH_SOCK, abstract) accepted %d connections from sandboxes", n)
		}
		if !sh.hostHelper.alive() {
			t.Errorf("host helper process %d died while the suite ran (killed from a sandbox?)", sh.hostHelper.pid())
		}
	})
}

// openLeakyDir opens a host directory holding a secret WITHOUT O_CLOEXEC,
// as a daemon may hold descriptors it inherited or opened carelessly. A
// runtime must not let any such descriptor reach a workload: through a
// directory fd, openat reaches the host's filesystem past every mount.
func openLeakyDir(t *testing.T) int {
	t.Helper()
	dir := t.TempDir()
	// World-readable, as most of a host's directories are: only the
	// descriptor's absence may protect it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/secret.txt", []byte("leaked through an inherited fd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	return fd
}

// validate checks that every key in opts names a case or a probe, and that
// every override is well formed.
func validate(cases []tcase, opts Options) error {
	byName := map[string]tcase{}
	for _, c := range cases {
		if _, dup := byName[c.name]; dup {
			return fmt.Errorf("sandboxtest: duplicate case %q", c.name)
		}
		byName[c.name] = c
	}
	var bad []string
	for key, val := range opts.Expect {
		cname, probe, ok := strings.Cut(key, "/")
		c, found := byName[cname]
		if !ok || !found {
			bad = append(bad, fmt.Sprintf("Expect[%q]: no case %q", key, cname))
			continue
		}
		if _, ok := c.want[probe]; !ok {
			bad = append(bad, fmt.Sprintf("Expect[%q]: case %q has no probe %q (probes: %s)", key, cname, probe, strings.Join(sortedKeys(c.want), ", ")))
		}
		if strings.TrimSpace(val) == "" {
			bad = append(bad, fmt.Sprintf("Expect[%q]: empty expectation", key))
		}
	}
	for name, reason := range opts.Skip {
		if _, ok := byName[name]; !ok {
			bad = append(bad, fmt.Sprintf("Skip[%q]: no such case", name))
		}
		if strings.TrimSpace(reason) == "" {
			bad = append(bad, fmt.Sprintf("Skip[%q]: a reason is required", name))
		}
	}
	for _, name := range opts.Only {
		if _, ok := byName[name]; !ok {
			bad = append(bad, fmt.Sprintf("Only: no case %q", name))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("sandboxtest: invalid Options:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// bg is a context for cleanup paths, where t.Context is already done.
func bg(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
