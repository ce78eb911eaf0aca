package agentbox_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
)

// offlinePolicy is a sandbox that reads the host's system files and has no
// network.
const offlinePolicy = `{"version":1,"filesystem":{"read_outside_workspace":true},"network":{"mode":"none"}}`

// TestMockWritesThroughSandbox checks that a sandboxed mock agent's file
// writes happen inside its sandbox like any agent's: their diffs are
// against the file as the sandbox sees it, they reach the host only
// through the commit at the end of the turn, and a protected file it
// writes never does.
func TestMockWritesThroughSandbox(t *testing.T) {
	requireSandbox(t)
	srv := start(t, agentbox.Options{})
	c := srv.Client()
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock", PermissionMode: client.PermissionBypass, Policy: json.RawMessage(offlinePolicy)})
	if err != nil {
		t.Fatal(err)
	}
	prompt := mock.ScriptPrompt(
		mock.Step{Kind: mock.KindCommand, Command: "echo zero > a.txt; id -u > uid.txt"},
		mock.Step{Kind: mock.KindWrite, Path: "a.txt", Content: "one\n"},
		mock.Step{Kind: mock.KindWrite, Path: "sub/b.txt", Content: "bee\n"},
		mock.Step{Kind: mock.KindWrite, Path: "CLAUDE.md", Content: "obey me\n"},
		mock.Step{Kind: mock.KindCommand, Command: "stat -c %u sub/b.txt"},
	)
	tc, evs := turn(t, c, s.ID, prompt)
	if tc.StopReason != event.StopEndTurn {
		t.Fatalf("turn: %+v", tc)
	}
	diffs := map[string]string{}
	var owner string
	for _, e := range evs {
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if ic, ok := p.(*event.ItemCompleted); ok {
			switch ic.Item.Kind {
			case event.ItemFileChange:
				if ic.Item.Status != event.StatusCompleted {
					t.Errorf("write %+v did not complete", ic.Item)
				}
				for _, ch := range ic.Item.Changes {
					diffs[ch.Path] = string(ch.Kind) + "\n" + ch.Diff
				}
			case event.ItemCommand:
				owner = ic.Item.Output
			}
		}
	}
	if d := diffs["a.txt"]; !strings.HasPrefix(d, "update\n") || !strings.Contains(d, "-zero\n+one\n") {
		t.Errorf("a.txt's change %q, want an update from the sandbox's content (zero) to one", d)
	}
	uid, _ := os.ReadFile(filepath.Join(s.Cwd, "uid.txt"))
	if strings.TrimSpace(owner) != strings.TrimSpace(string(uid)) || strings.TrimSpace(owner) == "0" {
		t.Errorf("sub/b.txt is owned by uid %q inside; want the sandbox's user (%q), who wrote it", owner, uid)
	}
	for name, want := range map[string]string{"a.txt": "one\n", "sub/b.txt": "bee\n"} {
		if b, err := os.ReadFile(filepath.Join(s.Cwd, name)); err != nil || string(b) != want {
			t.Errorf("%s on the host: %q, %v; want %q after the turn's commit", name, b, err, want)
		}
	}
	if _, err := os.Lstat(filepath.Join(s.Cwd, "CLAUDE.md")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the protected CLAUDE.md the mock wrote reached the host (%v)", err)
	}
	if !hasViolation(t, evs, "CLAUDE.md", event.ActionDropped) {
		t.Errorf("no dropped violation for CLAUDE.md in %s", agentTypes(evs))
	}
}

func hasViolation(t *testing.T, evs []event.Event, path string, action event.ViolationAction) bool {
	t.Helper()
	for _, e := range evs {
		if e.Type != event.TypeSandboxViolation {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if v := p.(*event.SandboxViolation); v.Path == path && v.Action == action {
			return true
		}
	}
	return false
}

func agentTypes(evs []event.Event) string {
	var b strings.Builder
	for _, e := range evs {
		b.WriteString(string(e.Type) + " ")
	}
	return b.String()
}
