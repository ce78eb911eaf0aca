package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// confineScript reproduces, without systemd, the parts of the unit that
// can take something from sandbox creation, then execs its arguments:
// a mount and IPC namespace of its own (PrivateMounts=, PrivateIPC=; the
// caller's unshare), PrivateTmp= (a directory of the test bound on /tmp),
// ProtectSystem=full (/usr, /boot, /efi, /etc read-only), and
// NoNewPrivileges= with the unit's CapabilityBoundingSet= (setpriv).
// Not reproduced: the seccomp filters of LockPersonality=,
// RestrictRealtime=, ProtectKernelModules= and ProtectKernelLogs= (they
// refuse personality changes, realtime scheduling, module loading and the
// kernel log, which nothing of agentbox does).
const confineScript = `set -eu
mount --make-rslave /
mount --bind "$PRIVATE_TMP" /tmp
for d in /usr /boot /efi /etc; do
  [ -d "$d" ] || continue
  mount --rbind "$d" "$d"
  mount -o remount,bind,ro "$d"
done
[ -z "$DROP" ] || set -- --bounding-set="$DROP" -- "$@"
exec setpriv --no-new-privs "$@"
`

// confined is a command that runs argv as the unit would run the daemon
// (confineScript), its /tmp the directory private.
func confined(t *testing.T, private string, drop []string, argv ...string) *exec.Cmd {
	t.Helper()
	var b []string
	for _, c := range drop {
		b = append(b, "-"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	cmd := exec.Command("unshare", append([]string{"--mount", "--ipc", "--propagation", "unchanged", "--", "sh", "-c", confineScript, "sh"}, argv...)...)
	cmd.Env = append(os.Environ(), "PRIVATE_TMP="+private, "DROP="+strings.Join(b, ","))
	return cmd
}

type doctorReport struct {
	Mechanisms []struct {
		Name string `json:"name"`
		OK   bool   `json:"ok"`
	} `json:"mechanisms"`
	Runtimes []struct {
		Runtime   string `json:"runtime"`
		Available bool   `json:"available"`
		Reason    string `json:"reason"`
	} `json:"runtimes"`
}

func (r doctorReport) working() []string {
	var ok []string
	for _, m := range r.Mechanisms {
		if m.OK {
			ok = append(ok, m.Name)
		}
	}
	for _, rt := range r.Runtimes {
		if rt.Available {
			ok = append(ok, "runtime "+rt.Runtime)
		}
	}
	slices.Sort(ok)
	return ok
}

func doctor(t *testing.T, cmd *exec.Cmd) doctorReport {
	t.Helper()
	out, err := cmd.Output()
	var rep doctorReport
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		t.Fatalf("%s: %v (%v)\n%s", cmd, jerr, err, out)
	}
	return rep
}

// TestUnitConfinement: under the unit's confinement (confineScript: its
// namespaces, read-only system, private /tmp, no_new_privs and capability
// deny list), `agentbox doctor` finds every mechanism and runtime it finds
// without, and the daemon runs a sandboxed exec. A unit option that takes
// what sandboxes need fails here, not on a user's machine.
func TestUnitConfinement(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon's sandboxes do, and so does reproducing the unit's namespaces")
	}
	for _, tool := range []string{"unshare", "setpriv", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (util-linux, mount; scripts/setup installs them)", tool)
		}
	}
	drop := droppedCaps(t, unitOptions(t, "agentbox.service"))
	bin := nativeDaemon(t)

	host := doctor(t, exec.Command(bin, "doctor", "--json", "--no-boot"))
	if !slices.Contains(host.working(), "runtime process") {
		t.Skipf("the process runtime cannot run on this host even without the unit: %+v", host.Runtimes)
	}
	// The binary where the daemon (and doctor) can reach it under the
	// private /tmp, as /usr/local/bin is under the unit.
	private := t.TempDir()
	if err := os.Chmod(private, 0o1777); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(private, "agentbox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	const inBin = "/tmp/agentbox"

	in := doctor(t, confined(t, private, drop, inBin, "doctor", "--json", "--no-boot"))
	if got, want := in.working(), host.working(); !slices.Equal(got, want) {
		t.Errorf("doctor under the unit's confinement finds %q, without it %q", got, want)
	}

	// The daemon, confined, runs a sandboxed exec.
	token := randomHex(t, 32)
	srv := confined(t, private, drop, inBin, "serve", "--data-dir", "/tmp/data", "--listen", "unix:/tmp/agentbox.sock", "--exec-pool", "0")
	srv.Env = append(srv.Env, "AGENTBOX_TOKEN="+token)
	var logs strings.Builder
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		// unshare, sh and setpriv exec: the pid is the daemon's.
		_ = srv.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			_ = srv.Process.Kill()
			<-done
			t.Errorf("the confined daemon did not stop within 30s of SIGTERM")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })

	c, err := client.New("unix://"+filepath.Join(private, "agentbox.sock"), client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := c.Health(ctx)
		cancel()
		if err == nil {
			break
		}
		select {
		case werr := <-done:
			t.Fatalf("the confined daemon exited (%v) before answering; its log:\n%s", werr, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the confined daemon does not answer: %v; its log:\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	runtimes := []string{"process"}
	if slices.Contains(host.working(), "runtime gvisor") {
		runtimes = append(runtimes, "gvisor") // runsc runs as root under the same bounding set
	}
	for _, rt := range runtimes {
		res, err := c.Exec(t.Context(), client.ExecRequest{
			Argv:   []string{"sh", "-c", "echo sandboxed"},
			Policy: json.RawMessage(`{"version": 1, "isolation": "` + rt + `"}`),
		})
		if err != nil || res.ExitCode != 0 || res.Stdout != "sandboxed\n" || res.Sandbox.Runtime != rt {
			t.Errorf("exec (%s) under the unit's confinement: %v %+v; the daemon's log:\n%s", rt, err, res, logs.String())
		}
	}
	if err := stop(); err != nil {
		t.Errorf("the confined daemon on SIGTERM: %v; its log:\n%s", err, logs.String())
	}
}
