package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/sandbox/process"
	"github.com/agentbox/agentbox/internal/sandbox/sandboxtest"
)

// sandboxInits lists the sandbox inits (the process runtime's, spares
// included) this process started that are left.
func sandboxInits() []int { return sandboxtest.Children("agentbox-sandbox-init") }

// TestShutdownEndsSpareInit: the daemon keeps a spare sandbox init once it
// made a sandbox, and its shutdown leaves no init behind, spare or not.
func TestShutdownEndsSpareInit(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("process sandboxes need root")
	}
	if left := sandboxInits(); len(left) > 0 {
		t.Fatalf("sandbox inits before the test: %v", left)
	}
	c, _, stop := runDaemon(t, filepath.Join(t.TempDir(), "data"), "")
	if _, err := c.Exec(t.Context(), client.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(sandboxInits()) == 0 { // the spare the exec's Create started
		if time.Now().After(deadline) {
			t.Fatal("no spare init after an exec")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if left := sandboxInits(); len(left) > 0 {
		t.Errorf("sandbox inits after shutdown: %v", left)
	}
}

// TestSandboxSpares: Config.SandboxSpares sets how many spare inits the
// process runtime keeps (serve --sandbox-spares): zero is the default,
// negative none, more than process.MaxSpares is refused rather than
// clamped.
func TestSandboxSpares(t *testing.T) {
	for _, tc := range []struct {
		spares, want int
		err          bool
	}{
		{0, DefaultSandboxSpares, false},
		{-1, 0, false},
		{3, 3, false},
		{process.MaxSpares, process.MaxSpares, false},
		{process.MaxSpares + 1, 0, true},
	} {
		t.Run(strconv.Itoa(tc.spares), func(t *testing.T) {
			cfg, _, err := configure(Config{DataDir: t.TempDir(), SandboxSpares: tc.spares, Log: slog.New(slog.DiscardHandler)})
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), "at most") {
					t.Fatalf("err %v, want a refusal", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rt, err := cfg.Runtimes.Get("process")
			if err != nil {
				t.Fatal(err)
			}
			if got := rt.(*process.Runtime).Spares(); got != tc.want {
				t.Errorf("spares %d, want %d", got, tc.want)
			}
		})
	}
}
