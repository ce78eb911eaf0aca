package sandboxtest

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Resources: §5 rows 15–18 and the output cap. Each ends with a Verdict
// reason (the /v1/exec error code and the resource audit record) and, as
// every case, with no process of the sandbox left on the host.

func resourceCases() []tcase {
	return []tcase{
		{
			name: "15_fork_bomb",
			want: map[string]string{"fork": "EAGAIN", "forked_some": "yes"},
			run: func(h *harness) {
				h.create(func(s *sandbox.Spec) { s.Limits.Pids = 32 })
				// The children detach from stdout so that Wait measures the
				// bomb's parent, not how long the children hold the pipe.
				r := h.python(`
n = 0
try:
    while True:
        pid = os.fork()
        if pid == 0:
            fd = os.open("/dev/null", os.O_RDWR)
            for i in range(3):
                os.dup2(fd, i)
            time.sleep(600)
            os._exit(0)
        n += 1
except OSError as e:
    R("fork", E(e.errno))
    R("forked_some", "yes" if n > 0 else "no")
    sys.exit(1)
`, runOpts{watchdog: 2 * time.Minute})
				h.expect(r)
				expectVerdict(h, r, sandbox.ReasonPids)
				// "The tree reaped" is asserted after Close by the
				// end-of-case check: no process with the marker is left.
			},
		},
		{
			name: "16_memory_hog",
			run: func(h *harness) {
				h.create(func(s *sandbox.Spec) { s.Limits.MemoryBytes = 64 << 20 })
				r := h.python(`
chunks = []
for i in range(64):
    chunks.append(b"\x01" * (16 << 20))  # touched: 1 GiB in total
R("allocated", "1GiB")
`, runOpts{watchdog: 2 * time.Minute})
				if r.got("allocated") != "" {
					h.t.Errorf("allocated 1 GiB under a 64 MiB limit:\n%s", r)
				}
				expectVerdict(h, r, sandbox.ReasonMemory)
				if r.exit.Code == 0 {
					h.t.Errorf("memory hog exited 0:\n%s", r)
				}
			},
		},
		{
			name: "17_timeout_sleep",
			run: func(h *harness) {
				h.create()
				r := h.start(h.shellArgs("sleep 1000"), runOpts{timeout: time.Second}).wait()
				expectVerdict(h, r, sandbox.ReasonTimeout)
			},
		},
		{
			name: "17_timeout_ignores_sigterm",
			want: map[string]string{"ready": "yes"},
			run: func(h *harness) {
				// The wall-clock limit from the spec, not the command;
				// long enough for python to start and say so under
				// gVisor's ptrace platform on a loaded machine.
				h.create(func(s *sandbox.Spec) { s.Limits.Timeout = 5 * time.Second })
				r := h.python(`
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
R("ready", "yes")
while True:
    time.sleep(1)
`)
				h.expect(r)
				expectVerdict(h, r, sandbox.ReasonTimeout)
			},
		},
		{
			name: "17_daemon_holding_output_timeout",
			run: func(h *harness) {
				h.create()
				// The daemon keeps the output pipe: Wait can only return once
				// the runtime has killed the whole tree, not just the leader.
				r := h.start(h.shellArgs("setsid nohup sleep 1000 & sleep 1000"), runOpts{timeout: time.Second}).wait()
				expectVerdict(h, r, sandbox.ReasonTimeout)
			},
		},
		{
			name: "17_detached_daemon_killed_on_close",
			run: func(h *harness) {
				h.create()
				r := h.shell("setsid nohup sleep 1000 </dev/null >/dev/null 2>&1 & echo started", runOpts{timeout: 30 * time.Second})
				h.expectExit(r, 0)
				if r.stdout != "started\n" {
					h.t.Errorf("stdout = %q, want %q", r.stdout, "started\n")
				}
				// Close must take the daemon with it (checked by finish).
			},
		},
		{
			name: "18_fill_tmp",
			want: map[string]string{"fill": "ENOSPC"},
			run: func(h *harness) {
				const limit = 16 << 20
				h.create(func(s *sandbox.Spec) { s.Limits.DiskBytes = limit })
				r := h.python(fillCode("/tmp/fill.bin", limit))
				h.expect(r)
				expectVerdict(h, r, sandbox.ReasonDisk)
			},
		},
		{
			name: "18_fill_workspace",
			want: map[string]string{"fill": "ENOSPC"},
			run: func(h *harness) {
				const limit = 16 << 20
				h.create(func(s *sandbox.Spec) { s.Limits.DiskBytes = limit })
				// What was written before ENOSPC may be committed, but
				// never more than the limit.
				h.allow = func(c change) bool {
					return c.Path == "fill.bin" && c.Before == nil && c.Now.Size <= limit
				}
				r := h.python(fillCode("fill.bin", limit))
				h.expect(r)
				expectVerdict(h, r, sandbox.ReasonDisk)
			},
		},
		{
			// §2 of issue 11: empty files cost no disk quota, so only a
			// bound on entries stops a sandbox from spending the host's
			// inodes (and the commit's time).
			name: "18_many_files_tmp",
			want: map[string]string{"create": "ENOSPC", "within_limit": "yes"},
			run: func(h *harness) {
				const limit = 500
				h.create(func(s *sandbox.Spec) { s.Limits.Files = limit })
				r := h.python(manyFilesCode("/tmp/many", limit))
				h.expect(r)
				expectVerdict(h, r, sandbox.ReasonFiles)
			},
		},
		{
			name: "18_many_files_workspace",
			want: map[string]string{"create": "ENOSPC", "within_limit": "yes"},
			run: func(h *harness) {
				const limit = 500
				h.create(func(s *sandbox.Spec) { s.Limits.Files = limit })
				// What was created before ENOSPC may be committed, but
				// never more entries than the limit.
				n := 0
				h.allow = func(c change) bool {
					if c.Before != nil || c.Path != "many" && !strings.HasPrefix(c.Path, "many/") {
						return false
					}
					n++
					return n <= limit
				}
				r := h.python(manyFilesCode("many", limit))
				h.expect(r)
				expectVerdict(h, r, sandbox.ReasonFiles)
			},
		},
		{
			// §2 of issue 11: an agent's home is a host directory; what
			// the sandbox writes there counts in the disk limit, with
			// what the directory already holds.
			name: "18_fill_state_dir",
			want: map[string]string{"fill": "ENOSPC"},
			run: func(h *harness) {
				const limit, held = 16 << 20, 4 << 20
				state := h.stateDir(map[string]string{"held.bin": strings.Repeat("x", held)})
				h.create(func(s *sandbox.Spec) { s.Limits.DiskBytes = limit; s.StateDirs = []string{state} })
				r := h.python(fillCode(state+"/fill.bin", limit))
				h.expect(r)
				expectVerdict(h, r, sandbox.ReasonDisk)
				h.close()
				if u, err := sandbox.UsageOf(state, 0, 0); err != nil || u.Bytes > limit {
					h.t.Errorf("the host state directory holds %d bytes after Close (%v), more than the %d-byte limit", u.Bytes, err, limit)
				}
			},
		},
		{
			name: "18_many_files_state_dir",
			want: map[string]string{"create": "ENOSPC", "within_limit": "yes"},
			run: func(h *harness) {
				const limit, held = 500, 100
				files := map[string]string{}
				for i := range held - 1 {
					files[fmt.Sprintf("old/f%d", i)] = ""
				}
				state := h.stateDir(files) // held entries: old and its files
				h.create(func(s *sandbox.Spec) { s.Limits.Files = limit; s.StateDirs = []string{state} })
				r := h.python(manyFilesCode(state+"/many", limit-held))
				h.expect(r)
				expectVerdict(h, r, sandbox.ReasonFiles)
				h.close()
				if u, err := sandbox.UsageOf(state, 0, 0); err != nil || u.Files > limit {
					h.t.Errorf("the host state directory holds %d entries after Close (%v), more than the limit of %d", u.Files, err, limit)
				}
			},
		},
		{
			name: "conf_output_100mb",
			run: func(h *harness) {
				const total, capN = 100_000_000, 1 << 20
				h.create(func(s *sandbox.Spec) { s.Limits.OutputBytes = capN })
				var kept bytes.Buffer
				seen := &countWriter{}
				lw := &sandbox.LimitedWriter{W: &kept, N: capN}
				r := h.start(h.shellArgs(fmt.Sprintf("head -c %d /dev/zero", total)),
					runOpts{stdout: io.MultiWriter(seen, lw), watchdog: 3 * time.Minute}).wait()
				switch n := seen.n.Load(); n {
				case total:
					// The runtime streamed everything; capping is the
					// caller's LimitedWriter.
					if r.err != nil || r.exit.Code != 0 || (r.exit.Reason != "" && r.exit.Reason != sandbox.ReasonOutput) {
						h.t.Errorf("streaming 100 MB: want exit 0, got:\n%s", r)
					}
				case capN:
					// The runtime capped at Limits.OutputBytes itself.
					if r.exit.Reason != sandbox.ReasonOutput {
						h.t.Errorf("runtime cut output at %d bytes but the verdict is %q, want %q", n, r.exit.Reason, sandbox.ReasonOutput)
					}
				default:
					h.t.Errorf("runtime delivered %d bytes of stdout, want all %d or exactly the limit %d:\n%s", n, total, capN, r)
				}
				n := seen.n.Load()
				if int64(kept.Len()) != min(n, capN) || lw.Truncated() != (n > capN) {
					h.t.Errorf("LimitedWriter kept %d bytes (truncated=%v) of %d delivered, want %d (truncated=%v)",
						kept.Len(), lw.Truncated(), n, min(n, capN), n > capN)
				}
				if bytes.IndexFunc(kept.Bytes(), func(r rune) bool { return r != 0 }) >= 0 {
					h.t.Errorf("captured output is not the zeros the command wrote")
				}
			},
		},
	}
}

// fillCode writes 1 MiB blocks to path until the write fails, and stops at
// four times the limit so that a runtime without a disk limit cannot fill
// the host's disk.
func fillCode(path string, limit int64) string {
	return fmt.Sprintf(`
block = b"\x00" * (1 << 20)
n = 0
try:
    with open(%q, "wb") as f:
        while n < %d:
            f.write(block)
            f.flush()
            n += 1
    R("fill", "no-limit:%%dMiB" %% n)
except OSError as e:
    R("fill", E(e.errno))
sys.exit(1)
`, path, 4*limit>>20)
}

// manyFilesCode creates empty files in dir until creation fails, and stops
// at four times the limit so that a runtime without a file limit cannot
// spend the host's inodes.
func manyFilesCode(dir string, limit int) string {
	return fmt.Sprintf(`
os.mkdir(%[1]q)
n = 0
try:
    while n < %[2]d:
        os.close(os.open("%%s/f%%d" %% (%[1]q, n), os.O_CREAT | os.O_WRONLY, 0o644))
        n += 1
    R("create", "no-limit:%%d" %% n)
except OSError as e:
    R("create", E(e.errno))
R("n", n)
R("within_limit", "yes" if n <= %[3]d else "no:%%d" %% n)
sys.exit(1)
`, dir, 4*limit, limit)
}

// expectVerdict asserts the Verdict reason of r.
func expectVerdict(h *harness, r *result, reason string) {
	h.t.Helper()
	if r.exit.Reason != reason {
		h.t.Errorf("verdict %q, want %q:\n%s", r.exit.Reason, reason, r)
	}
}

type countWriter struct{ n atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.n.Add(int64(len(p)))
	return len(p), nil
}
