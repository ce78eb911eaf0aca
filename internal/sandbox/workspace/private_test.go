package workspace

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestPrivateRootMustBeOurs: the commit of a state directory (an agent's
// home, written back as the daemon's user, root) refuses a directory that
// someone else could have swapped for another: a symbolic link, one owned
// by another user, or one below a directory another user can change. It
// writes nothing anywhere then. A symbolic link in a directory only we
// can change is followed as before.
func TestPrivateRootMustBeOurs(t *testing.T) {
	root := os.Geteuid() == 0
	tests := []struct {
		name string
		// setup makes the state directory under base and returns it.
		setup    func(t *testing.T, base, outside string) string
		needRoot bool
		ok       bool
	}{
		{name: "plain", ok: true, setup: func(t *testing.T, base, _ string) string {
			return mkdir(t, base, "home")
		}},
		{name: "the home is a symlink", setup: func(t *testing.T, base, outside string) string {
			must(t, os.Symlink(outside, filepath.Join(base, "home")))
			return filepath.Join(base, "home")
		}},
		{name: "a symlink above, in a directory of ours", ok: true, setup: func(t *testing.T, base, _ string) string {
			mkdir(t, base, "real/home")
			must(t, os.Symlink(filepath.Join(base, "real"), filepath.Join(base, "link")))
			return filepath.Join(base, "link", "home")
		}},
		{name: "a symlink above, in a directory others can write", setup: func(t *testing.T, base, outside string) string {
			shared := mkdir(t, base, "shared")
			must(t, os.Chmod(shared, 0o777))
			mkdir(t, outside, "home")
			must(t, os.Symlink(outside, filepath.Join(shared, "sessions")))
			return filepath.Join(shared, "sessions", "home")
		}},
		{name: "a parent others can write", setup: func(t *testing.T, base, _ string) string {
			parent := mkdir(t, base, "sessions")
			must(t, os.Chmod(parent, 0o777))
			return mkdir(t, parent, "home")
		}},
		{name: "a sticky parent others can write", ok: true, setup: func(t *testing.T, base, _ string) string {
			parent := mkdir(t, base, "sessions")
			must(t, os.Chmod(parent, os.ModeSticky|0o777))
			return mkdir(t, parent, "home")
		}},
		{name: "the home is writable by others", setup: func(t *testing.T, base, _ string) string {
			home := mkdir(t, base, "home")
			must(t, os.Chmod(home, 0o777))
			return home
		}},
		{name: "the home is another user's", needRoot: true, setup: func(t *testing.T, base, _ string) string {
			home := mkdir(t, base, "home")
			must(t, os.Chown(home, 65534, 65534))
			return home
		}},
		{name: "a parent is another user's", needRoot: true, setup: func(t *testing.T, base, _ string) string {
			parent := mkdir(t, base, "sessions")
			home := mkdir(t, parent, "home")
			must(t, os.Chown(parent, 65534, 65534))
			return home
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.needRoot && !root {
				t.Skip("chown needs root")
			}
			base, outside, upper := t.TempDir(), t.TempDir(), t.TempDir()
			home := tc.setup(t, base, outside)
			write(t, upper, "settings.json", "{}", 0o600)
			_, err := Commit(t.Context(), upper, home, Options{Private: true})
			if tc.ok {
				if err != nil {
					t.Fatalf("commit: %v", err)
				}
				if _, err := os.Stat(filepath.Join(home, "settings.json")); err != nil {
					t.Errorf("the commit did not reach the home: %v", err)
				}
				return
			}
			if err == nil {
				t.Error("the commit was accepted")
			}
			var found []string
			_ = filepath.WalkDir(outside, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.Name() == "settings.json" {
					found = append(found, p)
				}
				return nil
			})
			if len(found) != 0 {
				t.Errorf("the commit wrote %v", found)
			}
		})
	}
}

func mkdir(t *testing.T, base, rel string) string {
	t.Helper()
	p := filepath.Join(base, rel)
	must(t, os.MkdirAll(p, 0o700))
	return p
}

// TestCommitWhileTheSandboxChurns: a state directory is committed while
// the sandbox still runs (an agent's home between turns), and its CLI
// writes, renames and removes lock and temporary files all the while. An
// entry gone from the upper layer between the listing and its reading has
// nothing to apply: no commit fails for it, and what stays is committed.
func TestCommitWhileTheSandboxChurns(t *testing.T) {
	home, upper := t.TempDir(), t.TempDir()
	for i := range 300 {
		write(t, upper, fmt.Sprintf("f%03d.json", i), "{}", 0o600)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(upper, fmt.Sprintf(".claude.json.tmp.%d", i%50))
			_ = os.WriteFile(tmp, []byte("{}"), 0o600)
			_ = os.Rename(tmp, filepath.Join(upper, ".claude.json"))
			dir := filepath.Join(upper, fmt.Sprintf("d%d", i%20))
			_ = os.MkdirAll(filepath.Join(dir, "sub"), 0o700)
			_ = os.RemoveAll(dir)
		}
	}()
	for range 40 {
		if _, err := Commit(t.Context(), upper, home, Options{Private: true}); err != nil {
			close(stop)
			<-done
			t.Fatalf("commit while the sandbox churns: %v", err)
		}
	}
	close(stop)
	<-done
	if _, err := os.Stat(filepath.Join(home, "f299.json")); err != nil {
		t.Errorf("a file that stayed was not committed: %v", err)
	}
}
