package providertest

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/provider"
)

// runAbilities runs the steps of the optional abilities the provider
// says it has (its capability flags and interfaces must agree).
func runAbilities(t *testing.T, factory Factory) {
	t.Run("Capabilities", func(t *testing.T) {
		s := setup(t, factory)
		caps := s.Provider.Capabilities()
		_, pauser := s.Provider.(provider.Pauser)
		_, snap := s.Provider.(provider.Snapshotter)
		_, files := s.Provider.(provider.FileTransferer)
		_, carrier := s.Provider.(provider.EgressCarrier)
		if caps.PauseResume != pauser || caps.Snapshot != snap || caps.FileTransfer != files || caps.CarriedEgress != carrier {
			t.Fatalf("capabilities %+v, but Pauser %v, Snapshotter %v, FileTransferer %v, EgressCarrier %v", caps, pauser, snap, files, carrier)
		}
	})
	t.Run("PauseResume", func(t *testing.T) { testPause(t, setup(t, factory)) })
	t.Run("SnapshotResume", func(t *testing.T) { testSnapshot(t, setup(t, factory)) })
}

// innerTurn runs one mock-agent turn of the inner session id and fails
// unless it ends its turn.
func innerTurn(ctx context.Context, t *testing.T, c *client.Client, id string, steps ...mock.Step) {
	t.Helper()
	if tc := turn(ctx, t, c, id, steps...); tc.StopReason != event.StopEndTurn {
		t.Fatalf("inner turn ended %s: %s", tc.StopReason, tc.Message)
	}
}

func readInner(ctx context.Context, t *testing.T, c *client.Client, id, path string) string {
	t.Helper()
	rc, err := c.ReadFile(ctx, id, path, 0, -1)
	if err != nil {
		t.Fatalf("read %s of inner session %s: %v", path, id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testPause: a paused sandbox's inner daemon does not answer; resumed,
// it answers with its token and its session is as it was.
func testPause(t *testing.T, s *suite) {
	pz, ok := s.Provider.(provider.Pauser)
	if !ok {
		t.Skip("the provider has no Pauser (capability pause_resume)")
	}
	ctx := s.ctx(t)
	spec := s.spec(t)
	sb, err := s.Provider.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = s.Provider.Destroy(context.WithoutCancel(ctx), sb.ID) })
	in := inner(t, sb, spec.Token)
	sess, err := in.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	innerTurn(ctx, t, in, sess.ID, mock.Step{Kind: mock.KindWrite, Path: "before-pause.txt", Content: "kept\n"})
	if err := pz.Pause(ctx, sb.ID); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if err := pz.Pause(ctx, sb.ID); err != nil {
		t.Fatalf("Pause of a paused sandbox: %v", err)
	}
	// A frozen daemon cannot answer, however long it is given: this
	// bound only ends the probe.
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = in.Health(hctx)
	cancel()
	if err == nil {
		t.Fatal("the inner daemon of a paused sandbox answered")
	}
	re, err := pz.Resume(ctx, sb.ID, spec.Token)
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	answers(ctx, t, re, spec.Token)
	in = inner(t, re, spec.Token)
	if got := readInner(ctx, t, in, sess.ID, "before-pause.txt"); got != "kept\n" {
		t.Fatalf("after the resume, before-pause.txt = %q", got)
	}
	innerTurn(ctx, t, in, sess.ID, mock.Step{Kind: mock.KindCommand, Command: "echo after-resume"})
	if err := s.Provider.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	s.empty(ctx, t)
}

// testSnapshot is the issue's "resumable on a fresh sandbox where the
// provider supports snapshots": a session's sandbox whose inner daemon
// died (Harness.KillInner; running, without it) is snapshotted and
// destroyed; a fresh sandbox from the snapshot, with a new token (the
// old one refused), has the inner session with its log and workspace,
// and the work goes on there in that workspace.
func testSnapshot(t *testing.T, s *suite) {
	sn, ok := s.Provider.(provider.Snapshotter)
	if !ok {
		t.Skip("the provider has no Snapshotter (capability snapshot)")
	}
	ctx := s.ctx(t)
	spec := s.spec(t)
	sb, err := s.Provider.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { _ = s.Provider.Destroy(context.WithoutCancel(ctx), sb.ID) })
	in := inner(t, sb, spec.Token)
	sess, err := in.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	innerTurn(ctx, t, in, sess.ID, mock.Step{Kind: mock.KindWrite, Path: "kept.txt", Content: "from the first sandbox\n"})
	if s.KillInner != nil {
		if err := s.KillInner(ctx, sb.ID); err != nil {
			t.Fatalf("KillInner: %v", err)
		}
	}
	snapID, err := sn.Snapshot(ctx, sb.ID)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	t.Cleanup(func() { _ = sn.DeleteSnapshot(context.WithoutCancel(ctx), snapID) })
	if err := s.Provider.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	fresh := s.spec(t)
	sb2, err := sn.CreateFrom(ctx, snapID, fresh)
	if err != nil {
		t.Fatalf("CreateFrom: %v", err)
	}
	t.Cleanup(func() { _ = s.Provider.Destroy(context.WithoutCancel(ctx), sb2.ID) })
	if sb2.ID == sb.ID {
		t.Fatalf("CreateFrom gave back the destroyed sandbox %s", sb.ID)
	}
	answers(ctx, t, sb2, fresh.Token)
	var ae *client.APIError
	if _, err := inner(t, sb2, spec.Token).ListSessions(ctx, client.ListOptions{}); !errors.As(err, &ae) || ae.Status != 401 {
		t.Fatalf("the fresh sandbox with the first one's token: %v, want 401", err)
	}
	in2 := inner(t, sb2, fresh.Token)
	if got := readInner(ctx, t, in2, sess.ID, "kept.txt"); got != "from the first sandbox\n" {
		t.Fatalf("kept.txt in the fresh sandbox = %q", got)
	}
	// The inner session is there with its log as the crash left it: the
	// turn that wrote kept.txt, completed, and nothing running.
	old, err := in2.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatalf("the session in the fresh sandbox: %v", err)
	}
	if old.Status == client.StatusRunning || old.Status == client.StatusStarting {
		t.Fatalf("the session in the fresh sandbox is %s", old.Status)
	}
	if log := hostLog(ctx, t, in2, sess.ID); !strings.Contains(log, "kept.txt") || !strings.Contains(log, string(event.TypeTurnCompleted)) {
		t.Fatalf("the session's log in the fresh sandbox lacks its turn:\n%s", log)
	}
	// Work goes on there in the same workspace (the mock agent cannot
	// resume its conversation: a session of it continues the work).
	next, err := in2.CreateSession(ctx, client.CreateSession{Agent: "mock", Cwd: old.Cwd})
	if err != nil {
		t.Fatalf("a session in the restored workspace %s: %v", old.Cwd, err)
	}
	if got := readInner(ctx, t, in2, next.ID, "kept.txt"); got != "from the first sandbox\n" {
		t.Fatalf("kept.txt in the restored workspace = %q", got)
	}
	innerTurn(ctx, t, in2, next.ID, mock.Step{Kind: mock.KindWrite, Path: "kept.txt", Content: "and the fresh one\n"})
	// The change's diff is against what the first sandbox wrote.
	if log := hostLog(ctx, t, in2, next.ID); !strings.Contains(log, `-from the first sandbox\n+and the fresh one`) {
		t.Fatalf("the write in the restored workspace is not a change of kept.txt:\n%s", log)
	}

	if err := s.Provider.Destroy(ctx, sb2.ID); err != nil {
		t.Fatal(err)
	}
	if err := sn.DeleteSnapshot(ctx, snapID); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if err := sn.DeleteSnapshot(ctx, snapID); err != nil {
		t.Fatalf("DeleteSnapshot of a deleted snapshot: %v", err)
	}
	if _, err := sn.CreateFrom(ctx, snapID, s.spec(t)); !errors.Is(err, provider.ErrGone) {
		t.Fatalf("CreateFrom a deleted snapshot = %v, want ErrGone", err)
	}
	s.empty(ctx, t)
}
