package sandboxtest

// Kernel attack surface: §5 rows 9–13. Each attempt is a raw syscall made
// through ctypes; the errno is the assertion (seccomp denials leave no
// audit record on this kernel, so the errno is all there is). Several probes
// are chosen so that they succeed without the seccomp filter (TRACEME,
// process_vm_readv on oneself, keyctl, io_uring_setup, user-mode
// userfaultfd, clone3's ENOSYS): they prove the filter, not just the
// missing capabilities.

func kernelCases() []tcase {
	cases := []tcase{
		{
			name: "09_proc_sys_hostname",
			want: map[string]string{
				"proc_sys_hostname": "EACCES|EROFS", "core_pattern": "EACCES|EROFS",
				"sysrq_trigger": "EACCES|EROFS|ENOENT", "sethostname": "EPERM", "hostname": "sandbox",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(`
op("proc_sys_hostname", write, "/proc/sys/kernel/hostname", "pwned")
op("core_pattern", write, "/proc/sys/kernel/core_pattern", "|/tmp/evil")
op("sysrq_trigger", write, "/proc/sysrq-trigger", "h")
sc("sethostname", "sethostname", ctypes.c_char_p(b"pwned"), 5)
R("hostname", socket.gethostname())
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "09_sys_fs_cgroup",
			want: map[string]string{
				"cgroup_mkdir": "ENOENT|EROFS|EACCES", "cgroup_memory_mkdir": "ENOENT|EROFS|EACCES",
				"release_agent": "ENOENT|EROFS|EACCES", "uevent_helper": "ENOENT|EROFS|EACCES",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(`
op("cgroup_mkdir", os.mkdir, "/sys/fs/cgroup/escape")
op("cgroup_memory_mkdir", os.mkdir, "/sys/fs/cgroup/memory/escape")
op("release_agent", write, "/sys/fs/cgroup/memory/release_agent", "/tmp/evil")
op("uevent_helper", write, "/sys/kernel/uevent_helper", "/tmp/evil")
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "10_mount_family",
			want: map[string]string{
				"mount_tmpfs": "EPERM", "umount_proc": "EPERM", "pivot_root": "EPERM",
				"chroot": "EPERM", "fsopen": "EPERM", "open_tree": "EPERM",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(`
sc("mount_tmpfs", "mount", ctypes.c_char_p(b"none"), ctypes.c_char_p(b"/tmp"), ctypes.c_char_p(b"tmpfs"), 0, None)
sc("umount_proc", "umount2", ctypes.c_char_p(b"/proc"), MNT_DETACH)
sc("pivot_root", "pivot_root", ctypes.c_char_p(b"/tmp"), ctypes.c_char_p(b"/tmp"))
sc("chroot", "chroot", ctypes.c_char_p(b"/tmp"))
sc("fsopen", "fsopen", ctypes.c_char_p(b"tmpfs"), 0)
sc("open_tree", "open_tree", AT_FDCWD, ctypes.c_char_p(b"/tmp"), OPEN_TREE_CLONE)
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "11_unshare_namespaces",
			want: map[string]string{
				"unshare_user": "EPERM", "unshare_user_net": "EPERM", "unshare_mount": "EPERM",
				"unshare_U_cmd": "EPERM", "unshare_rn_cmd": "EPERM",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(`
import subprocess
sc("unshare_user", "unshare", CLONE_NEWUSER)
sc("unshare_user_net", "unshare", CLONE_NEWUSER | CLONE_NEWNET)
sc("unshare_mount", "unshare", CLONE_NEWNS)
def cmd(name, argv):
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except OSError as e:
        R(name, E(e.errno))
        return
    err = p.stderr.decode(errors="replace")
    if p.returncode == 0:
        R(name, "ok")
    elif "Operation not permitted" in err:
        R(name, "EPERM")
    elif "Permission denied" in err:
        R(name, "EACCES")
    else:
        R(name, "failed:" + err.strip().replace(" ", "_")[:60])
cmd("unshare_U_cmd", ["unshare", "-U", "true"])
cmd("unshare_rn_cmd", ["unshare", "-rn", "true"])
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "11_clone_new_namespaces",
			want: map[string]string{"clone_newuser": "EPERM", "clone_newns": "EPERM", "clone_newpid": "EPERM", "clone_newnet": "EPERM"},
			run: func(h *harness) {
				h.create()
				r := h.python(`
def tryclone(name, flags):
    r, err = raw("clone", flags | SIGCHLD, 0, 0, 0, 0)
    if r == 0:
        os._exit(0)  # the child of a clone that should have failed
    if err:
        R(name, err)
    else:
        os.waitpid(r, 0)
        R(name, "ok")
tryclone("clone_newuser", CLONE_NEWUSER)
tryclone("clone_newns", CLONE_NEWNS)
tryclone("clone_newpid", CLONE_NEWPID)
tryclone("clone_newnet", CLONE_NEWNET)
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "11_clone3_enosys_threads_work",
			want: map[string]string{"clone3": "ENOSYS", "thread": "ok", "fork": "ok", "subprocess": "ok"},
			run: func(h *harness) {
				h.create()
				r := h.python(`
import subprocess, threading
# clone3's flags live in a struct seccomp cannot read: the filter must make
# it ENOSYS (so libc falls back to clone, whose flags it can check).
# Unfiltered, clone3(NULL, 0) is EINVAL.
sc("clone3", "clone3", None, 0)
out = []
t = threading.Thread(target=lambda: out.append(1))
t.start(); t.join()
R("thread", "ok" if out else "failed")
pid = os.fork()
if pid == 0:
    os._exit(7)
_, st = os.waitpid(pid, 0)
R("fork", "ok" if os.WIFEXITED(st) and os.WEXITSTATUS(st) == 7 else "failed")
op("subprocess", subprocess.run, ["true"], check=True)
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
		{
			name: "12_ptrace_and_process_vm",
			want: map[string]string{
				"traceme": "EPERM", "attach_pid1": "EPERM", "seize_child": "EPERM",
				"process_vm_readv_self": "EPERM", "process_vm_writev_child": "EPERM",
			},
			run: func(h *harness) {
				h.create()
				r := h.python(`
import signal
sc("traceme", "ptrace", PTRACE_TRACEME, 0, 0, 0)
sc("attach_pid1", "ptrace", PTRACE_ATTACH, 1, 0, 0)
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
sc("seize_child", "ptrace", PTRACE_SEIZE, child, 0, 0)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
src = ctypes.create_string_buffer(b"secret!", 8)
dst = ctypes.create_string_buffer(8)
local = iovec(ctypes.cast(dst, ctypes.c_void_p), 8)
remote = iovec(ctypes.cast(src, ctypes.c_void_p), 8)
sc("process_vm_readv_self", "process_vm_readv", os.getpid(), ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
sc("process_vm_writev_child", "process_vm_writev", child, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
`)
				h.expectExit(r, 0)
				h.expect(r)
			},
		},
	}
	// Row 13: one case per syscall family.
	for _, k := range []struct {
		name string
		want map[string]string
		code string
	}{
		{"13_bpf", map[string]string{"bpf": "EPERM"}, `
attr = ctypes.create_string_buffer(128)
sc("bpf", "bpf", BPF_MAP_CREATE, attr, 128)
`},
		{"13_keyctl", map[string]string{"keyctl": "EPERM", "add_key": "EPERM"}, `
sc("keyctl", "keyctl", KEYCTL_GET_ID, KEY_SPEC_SESSION, 1)
sc("add_key", "add_key", ctypes.c_char_p(b"user"), ctypes.c_char_p(b"x"), ctypes.c_char_p(b"y"), 1, KEY_SPEC_SESSION)
`},
		{"13_io_uring_setup", map[string]string{"io_uring_setup": "EPERM"}, `
params = ctypes.create_string_buffer(120)
sc("io_uring_setup", "io_uring_setup", 4, params)
`},
		{"13_perf_event_open", map[string]string{"perf_event_open": "EPERM"}, `
attr = ctypes.create_string_buffer(128)
sc("perf_event_open", "perf_event_open", attr, 0, -1, -1, 0)
`},
		{"13_userfaultfd", map[string]string{"userfaultfd": "EPERM"}, `
sc("userfaultfd", "userfaultfd", UFFD_USER_MODE)
`},
		{"13_open_by_handle_at", map[string]string{"open_by_handle_at": "EPERM"}, `
handle = ctypes.create_string_buffer(64)
sc("open_by_handle_at", "open_by_handle_at", AT_FDCWD, handle, 0)
`},
		{"13_module_loading", map[string]string{"init_module": "EPERM", "finit_module": "EPERM", "delete_module": "EPERM"}, `
sc("init_module", "init_module", None, 0, ctypes.c_char_p(b""))
fd = os.open("/dev/null", os.O_RDONLY)
sc("finit_module", "finit_module", fd, ctypes.c_char_p(b""), 0)
sc("delete_module", "delete_module", ctypes.c_char_p(b"ext4"), 0)
`},
		{"13_kexec", map[string]string{"kexec_load": "EPERM", "kexec_file_load": "EPERM"}, `
sc("kexec_load", "kexec_load", 0, 0, None, 0)
sc("kexec_file_load", "kexec_file_load", -1, -1, 0, ctypes.c_char_p(b""), 0)
`},
	} {
		cases = append(cases, tcase{
			name: k.name,
			want: k.want,
			run: func(h *harness) {
				h.create()
				r := h.python(k.code)
				h.expectExit(r, 0)
				h.expect(r)
			},
		})
	}
	return cases
}
