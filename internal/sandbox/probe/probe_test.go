package probe

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestHost(t *testing.T) {
	start := time.Now()
	rows := Host(t.Context(), Options{Runsc: true})
	t.Logf("first probe: %v", time.Since(start))
	for _, r := range rows {
		t.Logf("%-20s %-5v %s", r.Name, r.OK, r.Detail)
	}
	names := map[string]bool{}
	for _, r := range rows {
		if names[r.Name] {
			t.Errorf("duplicate row %s", r.Name)
		}
		names[r.Name] = true
		if r.Detail == "" {
			t.Errorf("row %s has no detail", r.Name)
		}
	}
	for _, n := range []string{"userns", "mountns", "pidns", "netns", "ipcns", "utsns", "overlay-userns",
		"landlock", "seccomp", "seccomp-user-notif", "cgroup", "runsc", "kvm"} {
		if !names[n] {
			t.Errorf("no %s row", n)
		}
	}
	// Cross-check the probes against the kernel's own view.
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) != "0" {
		if r, _ := Find(rows, "userns"); !r.OK {
			t.Errorf("user namespaces are enabled but the probe failed: %s", r.Detail)
		}
	}
	if b, err := os.ReadFile("/sys/kernel/security/lsm"); err == nil && strings.Contains(string(b), "landlock") {
		if r, _ := Find(rows, "landlock"); !r.OK || !strings.HasPrefix(r.Detail, "ABI ") {
			t.Errorf("landlock is an active LSM but the probe says %+v", r)
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/seccomp/actions_avail"); err == nil {
		r, _ := Find(rows, "seccomp-user-notif")
		if r.OK != strings.Contains(string(b), "user_notif") {
			t.Errorf("user_notif row %+v disagrees with actions_avail %q", r, b)
		}
		if r, _ := Find(rows, "seccomp"); !r.OK {
			t.Errorf("seccomp filter probe failed: %s", r.Detail)
		}
	}
	if os.Geteuid() == 0 {
		if r, _ := Find(rows, "cgroup"); !r.OK {
			t.Errorf("root and no usable cgroups: %s", r.Detail)
		}
	}
	// Cached: the second call is cheap.
	start = time.Now()
	Host(t.Context(), Options{Runsc: true})
	if d := time.Since(start); d > time.Second {
		t.Errorf("cached probe took %v", d)
	}
}

func TestHelperRejectsUnknown(t *testing.T) {
	if err := runHelper("no-such-helper", 0); err == nil || !strings.Contains(err.Error(), "unknown probe helper") {
		t.Errorf("runHelper(unknown) = %v", err)
	}
}
