package sandboxtest

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Conformance: the contract of sandbox.Runtime, Sandbox and Process. These
// are also the positive controls of the escape cases: a sandbox that can
// write nothing, or commits nothing, would pass the escape cases for the
// wrong reason.

func conformanceCases() []tcase {
	return []tcase{
		{
			name: "conf_exec_basics",
			run: func(h *harness) {
				h.create()
				r := h.shell("echo out; pwd; echo err >&2; exit 3")
				if r.err != nil || r.exit.Code != 3 || r.exit.Reason != "" {
					h.t.Errorf("want exit 3, no verdict:\n%s", r)
				}
				if want := "out\n" + h.spec.WorkspaceDir + "\n"; r.stdout != want {
					h.t.Errorf("stdout = %q, want %q", r.stdout, want)
				}
				if r.stderr != "err\n" {
					h.t.Errorf("stderr = %q, want %q", r.stderr, "err\n")
				}
			},
		},
		{
			name: "conf_stdin_and_exit_zero",
			run: func(h *harness) {
				h.create()
				r := h.start([]string{"cat"}, runOpts{stdin: strings.NewReader("hello stdin\n")}).wait()
				h.expectExit(r, 0)
				if r.stdout != "hello stdin\n" {
					h.t.Errorf("stdout = %q, want the stdin echoed", r.stdout)
				}
			},
		},
		{
			// sandbox.Cmd's stdio work as in os/exec: an *os.File is the
			// process's own descriptor, so the caller closes its copy of a
			// pipe's write end after Start (agent.Proc.StartPiped does, as
			// every agent's adapter does) and reads the output at the
			// other end until EOF. A runtime that writes into the file
			// from a goroutine of its own loses everything then.
			name: "conf_stdio_file_passed_through",
			run: func(h *harness) {
				h.create()
				var reads [2]*os.File
				var writes [2]*os.File
				for i := range 2 {
					r, w, err := os.Pipe()
					if err != nil {
						h.t.Fatal(err)
					}
					defer r.Close()
					reads[i], writes[i] = r, w
				}
				pr := h.start(h.shellArgs(`echo out; echo err >&2`), runOpts{stdout: writes[0], stderr: writes[1]})
				writes[0].Close()
				writes[1].Close()
				var got [2]string
				for i, r := range reads {
					_ = r.SetReadDeadline(time.Now().Add(time.Minute + h.opts.SlowStart))
					b, err := io.ReadAll(r)
					if err != nil {
						h.t.Errorf("reading the process's fd %d: %v", i+1, err)
					}
					got[i] = string(b)
				}
				r := pr.wait()
				h.expectExit(r, 0)
				if got != [2]string{"out\n", "err\n"} {
					h.t.Errorf("stdout, stderr through *os.File pipes closed by the caller after Start = %q, want [out err]", got)
				}
			},
		},
		{
			name: "conf_cmd_env_and_dir",
			run: func(h *harness) {
				h.create()
				r := h.start(h.shellArgs(`printf '%s|%s|%s\n' "$HOME" "$EXTRA" "$(pwd)"`), runOpts{
					env: map[string]string{"HOME": "/override", "EXTRA": "1"},
					dir: filepath.Join(h.spec.WorkspaceDir, "sub"),
				}).wait()
				h.expectExit(r, 0)
				if want := "/override|1|" + filepath.Join(h.spec.WorkspaceDir, "sub") + "\n"; r.stdout != want {
					h.t.Errorf("stdout = %q, want %q (Cmd.Env wins over Spec.Env; Cmd.Dir is the cwd)", r.stdout, want)
				}
			},
		},
		{
			name: "conf_workspace_changes_commit",
			run: func(h *harness) {
				h.create()
				expected := map[string]bool{"README.md": true, "new.txt": true, "dir": true, "dir/x.txt": true, "old.txt": true}
				h.allow = func(c change) bool { return expected[c.Path] }
				r := h.shell(`set -e
printf 'changed\n' > README.md
printf 'new\n' > new.txt
mkdir dir && printf 'x\n' > dir/x.txt
rm old.txt
cat README.md new.txt dir/x.txt`)
				h.expectExit(r, 0)
				if r.stdout != "changed\nnew\nx\n" {
					h.t.Errorf("inside, the changes are not visible: stdout %q", r.stdout)
				}
				// Until Commit, the host workspace is untouched.
				if got, _ := h.read("README.md"); got != workspaceFiles["README.md"] {
					h.t.Errorf("host README.md changed before Commit: %q", got)
				}
				if v := h.commit(); len(v) != 0 {
					h.t.Errorf("Commit of ordinary changes reported violations: %s", fmtViolations(v))
				}
				for rel, want := range map[string]string{"README.md": "changed\n", "new.txt": "new\n", "dir/x.txt": "x\n"} {
					if got, ok := h.read(rel); !ok || got != want {
						h.t.Errorf("after Commit, host %s = %q (exists %v), want %q", rel, got, ok, want)
					}
				}
				if fileExists(filepath.Join(h.ws, "old.txt")) {
					h.t.Errorf("after Commit, host old.txt still exists; the sandbox deleted it")
				}
				// Commit is idempotent.
				if v := h.commit(); len(v) != 0 {
					h.t.Errorf("second Commit reported violations: %s", fmtViolations(v))
				}
				// Later changes are committed by Close.
				r = h.shell(`printf 'later\n' > new.txt`)
				h.expectExit(r, 0)
				h.close()
				if got, _ := h.read("new.txt"); got != "later\n" {
					h.t.Errorf("after Close, host new.txt = %q, want %q (Close commits)", got, "later\n")
				}
			},
		},
		{
			// §2 of issue 11: code execution's workspace is nobody's,
			// and nothing written there may reach a host directory.
			name: "conf_throwaway_workspace_never_copied_back",
			run: func(h *harness) {
				h.create(func(s *sandbox.Spec) { s.Throwaway = true })
				// h.allow stays nil: any change on the host fails the case.
				r := h.shell(`set -e
printf 'changed\n' > README.md
printf 'new\n' > new.txt
mkdir dir && printf 'x\n' > dir/x.txt
rm old.txt
printf '{}' > .mcp.json
ln -s /etc/passwd link
cat README.md new.txt`)
				h.expectExit(r, 0)
				if r.stdout != "changed\nnew\n" {
					h.t.Errorf("inside, the changes are not visible: stdout %q", r.stdout)
				}
				if v := h.commit(); len(v) != 0 {
					h.t.Errorf("Commit of a throwaway workspace reported violations (it must apply nothing): %s", fmtViolations(v))
				}
				h.close()
				if v := h.violations; len(v) != 0 {
					h.t.Errorf("Close of a throwaway workspace reported violations (it must apply nothing): %s", fmtViolations(v))
				}
			},
		},
		{
			// A runtime that shows its live workspace to the host
			// (sandbox.WorkspaceViewer) shows what the sandbox sees
			// now, changes not yet committed included, confined to the
			// workspace: a symlink planted inside never leads out.
			name: "conf_workspace_view",
			run: func(h *harness) {
				h.create(func(s *sandbox.Spec) { s.Throwaway = true })
				v, ok := h.sb.(sandbox.WorkspaceViewer)
				if !ok {
					h.t.Skipf("the %s runtime does not show its live workspace", h.rt.Name())
				}
				r := h.shell(`set -e
printf 'new\n' > new.txt
rm old.txt
ln -s /etc/passwd link
ln -s / rootlink`)
				h.expectExit(r, 0)
				root, err := v.ViewWorkspace()
				if err != nil {
					h.t.Fatalf("ViewWorkspace: %v", err)
				}
				defer root.Close()
				if b, err := root.ReadFile("new.txt"); err != nil || string(b) != "new\n" {
					h.t.Errorf("the view's new.txt: %q, %v; want what the sandbox wrote", b, err)
				}
				if _, err := root.Lstat("old.txt"); !errors.Is(err, fs.ErrNotExist) {
					h.t.Errorf("the view's old.txt, removed inside: %v", err)
				}
				if b, err := root.ReadFile("README.md"); err != nil || string(b) != workspaceFiles["README.md"] {
					h.t.Errorf("the view's README.md: %q, %v", b, err)
				}
				for _, p := range []string{"link", "rootlink/etc/passwd"} {
					if _, err := root.ReadFile(p); err == nil {
						h.t.Errorf("the view followed %s out of the workspace", p)
					}
				}
				if got, _ := h.read("new.txt"); got != "" {
					h.t.Errorf("the view wrote the host: new.txt = %q", got)
				}
				h.close()
				if r, err := v.ViewWorkspace(); !errors.Is(err, sandbox.ErrClosed) {
					if r != nil {
						r.Close()
					}
					h.t.Errorf("ViewWorkspace after Close: %v, want ErrClosed", err)
				}
			},
		},
		{
			// An agent's home (Spec.StateDirs): writable inside,
			// written back by Commit without protected patterns, and
			// what the host adds to it after Create shows inside.
			name: "conf_state_dir_commit",
			run: func(h *harness) {
				state := h.stateDir(map[string]string{"existing.txt": "old\n", "gone.txt": "x\n", ".config/app.json": "{}\n"})
				h.create(func(s *sandbox.Spec) { s.StateDirs = []string{state} })
				// The daemon writes into the home after the sandbox
				// exists (an adapter's per-run config).
				if err := os.WriteFile(filepath.Join(state, "from-host.txt"), []byte("host\n"), 0o600); err != nil {
					h.t.Fatal(err)
				}
				r := h.shell(`set -e
cd "$STATE"
cat from-host.txt existing.txt
printf 'new\n' > existing.txt
printf 'made\n' > new.txt
mkdir -p .claude/projects && printf '{"a":1}\n' > .claude/projects/t.jsonl
rm gone.txt`, runOpts{env: map[string]string{"STATE": state}})
				h.expectExit(r, 0)
				if r.stdout != "host\nold\n" {
					h.t.Errorf("inside, the state directory shows %q, want the host's files (also one added after Create)", r.stdout)
				}
				if v := h.commit(); len(v) != 0 {
					h.t.Errorf("Commit of a state directory reported violations: %s", fmtViolations(v))
				}
				for rel, want := range map[string]string{"existing.txt": "new\n", "new.txt": "made\n", ".claude/projects/t.jsonl": "{\"a\":1}\n", "from-host.txt": "host\n"} {
					if b, err := os.ReadFile(filepath.Join(state, rel)); err != nil || string(b) != want {
						h.t.Errorf("after Commit, host state %s = %q (%v), want %q", rel, b, err, want)
					}
				}
				if fileExists(filepath.Join(state, "gone.txt")) {
					h.t.Error("after Commit, host state gone.txt still exists")
				}
			},
		},
		{
			name: "conf_signal",
			run: func(h *harness) {
				h.create()
				p := h.start([]string{"sleep", "1000"}, runOpts{timeout: 20 * time.Second})
				time.Sleep(100 * time.Millisecond)
				if err := p.p.Signal(syscall.SIGTERM); err != nil {
					h.t.Errorf("Signal(SIGTERM): %v", err)
				}
				r := p.wait()
				if r.exit.Code != -1 || r.exit.Signal == "" || r.exit.Reason != "" {
					h.t.Errorf("want code -1 with the signal named and no verdict, got:\n%s", r)
				}
			},
		},
		{
			// A workload starts with default signal dispositions and an
			// empty mask, whatever the daemon or the sandbox's init
			// ignore; otherwise SIGTERM cannot stop it and SIGPIPE does
			// not end a pipeline.
			name: "conf_default_signal_dispositions",
			want: map[string]string{"sig_ign": "0000000000000000", "sig_blk": "0000000000000000"},
			run: func(h *harness) {
				h.create()
				// The shell reads its own status: Python would show the
				// SIGPIPE and SIGXFSZ it ignores itself at start-up.
				r := h.shell(`ign=missing blk=missing
while read -r k v; do
	case $k in
	SigIgn:) ign=$v ;;
	SigBlk:) blk=$v ;;
	esac
done < /proc/self/status
echo "R sig_ign $ign"
echo "R sig_blk $blk"`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "conf_info_and_close",
			run: func(h *harness) {
				h.create()
				info := h.sb.Info()
				if info.Runtime != h.rt.Name() {
					h.t.Errorf("Info().Runtime = %q, want %q", info.Runtime, h.rt.Name())
				}
				if len(info.Mechanisms) == 0 {
					h.t.Errorf("Info().Mechanisms is empty: a sandbox must say what is in force")
				}
				if h.sb.ID() == "" {
					h.t.Errorf("ID() is empty")
				}
				h.close()
				ctx, cancel := bg(time.Minute)
				defer cancel()
				if _, err := h.sb.Close(ctx); err != nil {
					h.t.Errorf("second Close: %v (must be safe to call twice)", err)
				}
				_, err := h.sb.Start(ctx, sandbox.Cmd{Args: []string{"true"}})
				if !errors.Is(err, sandbox.ErrClosed) {
					h.t.Errorf("Start after Close: err = %v, want ErrClosed", err)
				}
			},
		},
		{
			name: "conf_create_fails_closed",
			run:  failClosed,
		},
	}
}

// failClosed creates sandboxes from specs the runtime cannot or must not
// enforce: each must fail at Create, and nothing may run.
func failClosed(h *harness) {
	for _, tc := range []struct {
		name          string
		mod           func(*sandbox.Spec)
		unenforceable bool // must wrap sandbox.ErrUnenforceable
		mention       string
	}{
		// The host cannot deny a syscall it does not have: a deny list that
		// cannot be applied in full is not enforceable.
		{"unknown_syscall_in_deny_list", func(s *sandbox.Spec) { s.Syscalls.Deny = []string{"agentbox_no_such_syscall"} }, true, "agentbox_no_such_syscall"},
		{"unknown_seccomp_profile", func(s *sandbox.Spec) { s.Syscalls.Profile = "agentbox-no-such-profile" }, false, "agentbox-no-such-profile"},
		{"unknown_network_mode", func(s *sandbox.Spec) { s.Network.Mode = "agentbox-no-such-mode" }, false, "agentbox-no-such-mode"},
		{"missing_workspace", func(s *sandbox.Spec) { s.Workspace = filepath.Join(h.root, "no-such-dir") }, false, ""},
	} {
		spec := h.defaultSpec()
		tc.mod(&spec)
		if h.opts.Spec != nil {
			h.opts.Spec(&spec)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute+h.opts.SlowStart)
		sb, err := safeCreate(ctx, h.rt, spec)
		if err == nil {
			// Fail the case, but prove whether it would also have run.
			h.t.Errorf("%s: Create succeeded; want an error", tc.name)
			p, serr := sb.Start(ctx, sandbox.Cmd{Args: []string{"sh", "-c", "echo ran > ran.txt", h.marker}})
			if serr == nil {
				_, _ = p.Wait()
			}
			_, _ = sb.Close(ctx)
			if fileExists(filepath.Join(h.ws, "ran.txt")) {
				h.t.Errorf("%s: the command ran under a spec that should have been refused", tc.name)
				_ = os.Remove(filepath.Join(h.ws, "ran.txt"))
			}
			cancel()
			continue
		}
		cancel()
		if errors.Is(err, errPanicked) {
			h.t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if tc.unenforceable && !errors.Is(err, sandbox.ErrUnenforceable) {
			h.t.Errorf("%s: err = %v; want it to wrap sandbox.ErrUnenforceable", tc.name, err)
		}
		if tc.mention != "" && !strings.Contains(err.Error(), tc.mention) {
			h.t.Errorf("%s: error %q does not name %q", tc.name, err, tc.mention)
		}
	}
	if left := waitNoMarkerProcs(h.marker, time.Second); len(left) > 0 {
		h.t.Errorf("processes left after refused specs: %v", left)
	}
}
