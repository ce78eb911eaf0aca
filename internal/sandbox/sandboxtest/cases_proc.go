package sandboxtest

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// Process view and identity: §5 rows 8, 14, 19, 20. The sandbox sees only
// its own processes, cannot signal the host's, runs as uid 1000 with no
// capability, and inherits nothing from the host but what the spec lists.

func processCases() []tcase {
	return []tcase{
		{
			name: "08_proc_shows_only_sandbox_pids",
			want: map[string]string{
				"few_pids": "yes", "host_helper_visible": "no", "helper_pid_dir": "ENOENT",
				"daemon_pid_dir": "ENOENT", "own_pid_small": "yes",
				// pid 1 is the sandbox's init, another uid: not traceable,
				// or not even visible (hidepid).
				"proc1_root": "EACCES|ENOENT",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(fmt.Sprintf(`
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
R("few_pids", "yes" if len(pids) <= 16 else "no:%%d" %% len(pids))
seen = 0
for p in pids:
    if p == os.getpid():
        continue  # this script names the marker itself
    try:
        if %q.encode() in read("/proc/%%d/cmdline" %% p):
            seen += 1
    except OSError:
        pass
R("host_helper_visible", "yes" if seen else "no")
op("helper_pid_dir", os.stat, "/proc/%d")
op("daemon_pid_dir", os.stat, "/proc/%d")
R("own_pid_small", "yes" if os.getpid() < 1000 else "no:%%d" %% os.getpid())
op("proc1_root", os.readlink, "/proc/1/root")
`, h.sh.hostHelper.marker, h.sh.hostHelper.pid(), os.Getpid()))
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "08_kill_pid1",
			want: map[string]string{"kill_1": "EPERM", "pid1_alive": "EPERM", "sandbox_alive": "yes"},
			run: func(h *harness) {
				h.create()
				r := h.python(`
op("kill_1", os.kill, 1, 9)
time.sleep(0.2)
op("pid1_alive", os.kill, 1, 0)
`)
				h.expectExit(r, 0)
				h.expect(r, "kill_1", "pid1_alive")
				// The sandbox still works: a second command runs.
				r = h.python(`R("sandbox_alive", "yes")`)
				h.expectExit(r, 0)
				h.expect(r, "sandbox_alive")
			},
		},
		{
			name: "08_kill_host_processes",
			want: map[string]string{
				"daemon_sig0": "ESRCH", "daemon_sigkill": "ESRCH", "daemon_pidfd": "ESRCH",
				"helper_sig0": "ESRCH", "helper_sigkill": "ESRCH",
			},
			run: func(h *harness) {
				h.create()
				// SIGKILL is sent only where signal 0 found nothing, so a
				// broken runtime fails this case instead of killing the
				// test binary.
				r := h.python(fmt.Sprintf(`
for name, pid in [("daemon", %d), ("helper", %d)]:
    try:
        os.kill(pid, 0)
        R(name + "_sig0", "ok")
        R(name + "_sigkill", "not-sent")
    except OSError as e:
        R(name + "_sig0", E(e.errno))
        op(name + "_sigkill", os.kill, pid, 9)
sc("daemon_pidfd", "pidfd_open", %d, 0)
`, os.Getpid(), h.sh.hostHelper.pid(), os.Getpid()))
				h.expectExit(r, 0)
				h.expect(r)
				if !h.sh.hostHelper.alive() {
					h.t.Errorf("host helper process %d was killed from the sandbox", h.sh.hostHelper.pid())
				}
			},
		},
		{
			name: "08_kill_minus_one",
			want: map[string]string{"kill_all": "ok|ESRCH|EPERM", "survived": "yes", "sandbox_alive": "yes"},
			run: func(h *harness) {
				h.create()
				r := h.python(`
op("kill_all", os.kill, -1, 9)
time.sleep(0.2)
R("survived", "yes")
`)
				h.expectExit(r, 0)
				h.expect(r, "kill_all", "survived")
				if !h.sh.hostHelper.alive() {
					h.t.Errorf("host helper process %d was killed by kill(-1) in the sandbox", h.sh.hostHelper.pid())
				}
				r = h.python(`R("sandbox_alive", "yes")`)
				h.expectExit(r, 0)
				h.expect(r, "sandbox_alive")
			},
		},
		{
			name: "14_setuid_binaries_fail",
			want: map[string]string{
				"setuid0": "EPERM", "setresuid0": "EPERM", "setgid0": "EPERM",
				"su": "denied|ENOENT", "sudo": "denied|ENOENT", "mount_bin": "denied|ENOENT",
				"no_new_privs": "1", "usr_nosuid": "yes", "still_1000": "yes",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(`
import subprocess
op("setuid0", os.setuid, 0)
op("setresuid0", os.setresuid, 0, 0, 0)
op("setgid0", os.setgid, 0)
def runbin(name, argv):
    # "denied": the binary ran but did not do what root could.
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except OSError as e:
        R(name, E(e.errno))
        return
    out = p.stdout.decode(errors="replace").strip()
    R(name, "denied" if p.returncode != 0 else "ran:" + out.replace(" ", "_")[:40])
runbin("su", ["su", "-c", "id -u", "root"])
runbin("sudo", ["sudo", "-n", "id", "-u"])
runbin("mount_bin", ["mount", "-t", "tmpfs", "none", "/tmp"])
R("no_new_privs", no_new_privs())
R("usr_nosuid", mount_has("/usr/bin/su", "nosuid"))
R("still_1000", "yes" if os.getuid() == 1000 and os.geteuid() == 1000 else "no")
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "14_uid_1000_no_capabilities",
			want: map[string]string{
				"uid": "1000", "gid": "1000", "groups": "none",
				"cap_inh": "0000000000000000", "cap_prm": "0000000000000000", "cap_eff": "0000000000000000",
				"cap_bnd": "0000000000000000", "cap_amb": "0000000000000000",
				"no_new_privs": "1", "seccomp": "2",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(`
status = dict((k, v.strip()) for k, v in (l.split(":", 1) for l in read("/proc/self/status").decode().splitlines() if ":" in l))
def ids(v):
    s = set(v.split())
    return s.pop() if len(s) == 1 else ",".join(v.split())
R("uid", ids(status["Uid"]))
R("gid", ids(status["Gid"]))
R("groups", ",".join(str(g) for g in os.getgroups()) or "none")
for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]:
    R("cap_" + k[3:].lower(), status.get(k, "missing"))
R("no_new_privs", no_new_privs())
R("seccomp", status.get("Seccomp", "missing"))
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "19_env_is_only_the_spec",
			want: map[string]string{"proc1_environ": "EACCES|ENOENT", "shell_env": "ok"},
			run: func(h *harness) {
				h.create()
				r := h.python(`
import subprocess
for k, v in sorted(os.environ.items()):
    print("ENV %s=%s" % (k, v))
for kv in read("/proc/self/environ").split(b"\0"):
    if kv:
        print("SELF " + kv.decode(errors="replace"))
env1 = op("proc1_environ", read, "/proc/1/environ")
if env1:
    print("PID1 " + env1.decode(errors="replace").replace("\0", " "))
op("shell_env", lambda: print("SHELL " + subprocess.run(["sh", "-c", "env"], capture_output=True).stdout.decode().replace("\n", " ")))
`)
				h.expectExit(r, 0)
				h.expect(r)
				// The environment the process got from execve is exactly
				// Spec.Env plus Cmd.Env.
				want := map[string]string{"AGENTBOX_ESCAPE_MARKER": h.marker}
				for k, v := range h.spec.Env {
					want[k] = v
				}
				got := map[string]string{}
				for line := range strings.Lines(r.stdout) {
					if kv, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "SELF "); ok {
						k, v, _ := strings.Cut(kv, "=")
						got[k] = v
					}
				}
				if fmtEnv(got) != fmtEnv(want) {
					h.t.Errorf("environment inside differs from the spec:\n got: %s\nwant: %s", fmtEnv(got), fmtEnv(want))
				}
				// (Secret values are checked in every output by wait.)
			},
		},
		{
			name: "19_only_fds_0_to_2",
			// inherited_host_fd: the number of a host directory fd the test
			// process holds without O_CLOEXEC.
			want: map[string]string{"extra_fds": "none", "std_fds": "0,1,2", "inherited_host_fd": "EBADF"},
			run: func(h *harness) {
				h.create()
				r := h.python(fmt.Sprintf(`
def read_at(dirfd):
    fd = os.open("secret.txt", os.O_RDONLY, dir_fd=dirfd)
    os.close(fd)
op("inherited_host_fd", read_at, %d)`, h.sh.leakFD) + `
extra, std = [], []
for e in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        target = os.readlink("/proc/self/fd/" + e)
    except OSError:
        continue  # the descriptor listdir used, closed by now
    (std if int(e) <= 2 else extra).append(e if int(e) <= 2 else e + "->" + target)
R("extra_fds", ",".join(extra) or "none")
R("std_fds", ",".join(std))
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "20_tiocsti",
			want: map[string]string{"stdin_tiocsti": "EPERM", "dev_tty": "ENXIO|ENOENT", "pty_tiocsti": "EPERM|ENOENT|EACCES|ENODEV|ENXIO"},
			run: func(h *harness) {
				h.create()
				r := h.python(`
c = ctypes.c_char(b"x")
r, err = raw("ioctl", 0, TIOCSTI, ctypes.byref(c))
R("stdin_tiocsti", err or "ok")
op("dev_tty", os.open, "/dev/tty", os.O_RDWR)
try:
    m, s = os.openpty()
    r, err = raw("ioctl", s, TIOCSTI, ctypes.byref(c))
    R("pty_tiocsti", err or "ok")
except OSError as e:
    R("pty_tiocsti", E(e.errno))
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
	}
}

func fmtEnv(m map[string]string) string {
	keys := sortedKeys(m)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
