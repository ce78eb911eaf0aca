package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/relay"
)

// idlePause is the host's --provider-idle-pause in the idle step: short,
// so the step does not wait long; nothing in the step depends on how
// long the pause took.
const idlePause = 2 * time.Second

// testRelayPause: a relayed session paused through the host's API
// (POST /v1/sessions/{id}/pause) is paused, shows it, and its sandbox's
// inner daemon does not answer; its next message resumes it, as does a
// resume; then a host with --provider-idle-pause pauses the idle session
// by itself, and its next message resumes it. After each, the host's
// relayed events are the inner log's exactly. On a provider that cannot
// pause, the pause is 409 not-pausable and the session goes on.
func testRelayPause(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	name := s.Provider.Name()
	_, pauser := s.Provider.(provider.Pauser)
	cut := newCutting(s.Provider)
	t.Cleanup(cut.closeAll)
	dataDir := t.TempDir()
	h := s.startHost(t, dataDir, cut.wrapped())
	key, err := relay.LoadKey(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	s.owner = relay.OwnerOf(key)
	sess, err := h.c.CreateSession(ctx, client.CreateSession{Agent: "mock", Provider: name})
	if err != nil {
		t.Fatalf("create a session on %s: %v", name, err)
	}
	_, sandboxID, innerID, token, _ := relay.Inner(key, sess.NativeSessionID)
	sb, err := s.Provider.Connect(ctx, sandboxID, token)
	if err != nil {
		t.Fatal(err)
	}
	in := inner(t, sb, token)
	if done := turn(ctx, t, h.c, sess.ID, mock.Step{Kind: mock.KindWrite, Path: "before-pause.txt", Content: "kept\n"}); done.StopReason != event.StopEndTurn {
		t.Fatalf("turn ended %s: %s", done.StopReason, done.Message)
	}

	_, err = h.c.Pause(ctx, sess.ID)
	if !pauser {
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 409 || ae.Type != client.ProblemNotPausable {
			t.Fatalf("pause on %s (no pause_resume): %v; want 409 not-pausable", name, err)
		}
		if done := turn(ctx, t, h.c, sess.ID, mock.Step{Kind: mock.KindCommand, Command: "echo not-paused"}); done.StopReason != event.StopEndTurn {
			t.Fatalf("turn after a refused pause ended %s: %s", done.StopReason, done.Message)
		}
		exact(ctx, t, h.c, in, sess.ID, innerID)
		return
	}
	if err != nil {
		t.Fatalf("pause: %v", err)
	}
	t.Log("paused through the API")
	paused(ctx, t, h.c, sess.ID, in)
	if got, err := h.c.Pause(ctx, sess.ID); err != nil || got.Status != client.StatusPaused {
		t.Fatalf("pause of a paused session: %+v, %v", got.Status, err)
	}
	if _, err := h.c.Interrupt(ctx, sess.ID); err == nil {
		t.Fatal("interrupt of a paused session succeeded")
	}
	t.Log("its next message resumes it")
	if done := turn(ctx, t, h.c, sess.ID, mock.Step{Kind: mock.KindCommand, Command: "echo after-pause"}); done.StopReason != event.StopEndTurn {
		t.Fatalf("turn after the pause ended %s: %s", done.StopReason, done.Message)
	}
	if got := readInner(ctx, t, in, innerID, "before-pause.txt"); got != "kept\n" {
		t.Fatalf("before-pause.txt after the resume = %q", got)
	}
	exact(ctx, t, h.c, in, sess.ID, innerID)

	t.Log("paused, then resumed through POST /v1/sessions/{id}/resume")
	if _, err := h.c.Pause(ctx, sess.ID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	paused(ctx, t, h.c, sess.ID, in)
	if got, err := h.c.Resume(ctx, sess.ID, client.ResumeSession{}); err != nil || got.Status != client.StatusIdle {
		t.Fatalf("resume of the paused session: %+v, %v", got.Status, err)
	}
	if _, err := in.Health(ctx); err != nil {
		t.Fatalf("the resumed sandbox's inner daemon: %v", err)
	}
	if done := turn(ctx, t, h.c, sess.ID, mock.Step{Kind: mock.KindCommand, Command: "echo after-resume"}); done.StopReason != event.StopEndTurn {
		t.Fatalf("turn after the resume ended %s: %s", done.StopReason, done.Message)
	}
	exact(ctx, t, h.c, in, sess.ID, innerID)

	t.Logf("a host with --provider-idle-pause %s pauses the idle session by itself", idlePause)
	h.stop(t)
	h = s.startHost(t, dataDir, cut.wrapped(), func(c *daemon.Config) { c.ProviderIdlePause = idlePause })
	if _, err := h.c.Resume(ctx, sess.ID, client.ResumeSession{}); err != nil {
		t.Fatalf("resume on the idle-pausing host: %v", err)
	}
	waitStatus(ctx, t, h.c, sess.ID, client.StatusPaused)
	ended := lastEnded(ctx, t, h.c, sess.ID)
	if ended.Reason != event.EndPaused {
		t.Fatalf("the idle session's run ended %+v, want reason paused", ended)
	}
	paused(ctx, t, h.c, sess.ID, in)
	if done := turn(ctx, t, h.c, sess.ID, mock.Step{Kind: mock.KindCommand, Command: "echo after-idle-pause"}); done.StopReason != event.StopEndTurn {
		t.Fatalf("turn after the idle pause ended %s: %s", done.StopReason, done.Message)
	}
	exact(ctx, t, h.c, in, sess.ID, innerID)
	if err := h.c.DeleteSession(ctx, sess.ID, true); err != nil {
		t.Fatal(err)
	}
	s.empty(ctx, t)
}

// paused fails unless the host shows the session paused, its run ended
// with reason paused, and the sandbox's inner daemon does not answer.
func paused(ctx context.Context, t *testing.T, c *client.Client, id string, in *client.Client) {
	t.Helper()
	got, err := c.GetSession(ctx, id)
	if err != nil || got.Status != client.StatusPaused {
		t.Fatalf("GET of the paused session: %+v, %v; want status paused", got.Status, err)
	}
	if ended := lastEnded(ctx, t, c, id); ended.Reason != event.EndPaused {
		t.Fatalf("the paused session's last session.ended = %+v, want reason paused", ended)
	}
	// A frozen daemon cannot answer, however long it is given: this
	// bound only ends the probe.
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := in.Health(hctx); err == nil {
		t.Fatal("the inner daemon of the paused session's sandbox answered")
	}
}

// lastEnded returns the session's last session.ended on the host.
func lastEnded(ctx context.Context, t *testing.T, c *client.Client, id string) event.SessionEnded {
	t.Helper()
	var last event.SessionEnded
	for _, e := range allEvents(ctx, t, c, id) {
		if e.Type == event.TypeSessionEnded {
			if err := json.Unmarshal(e.Data, &last); err != nil {
				t.Fatal(err)
			}
		}
	}
	return last
}

// waitStatus waits until the host shows the session in status.
func waitStatus(ctx context.Context, t *testing.T, c *client.Client, id, status string) {
	t.Helper()
	for {
		got, err := c.GetSession(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == status {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("session %s stayed %s, want %s", id, got.Status, status)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
