package relay_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/execution"
	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/localproc"
	"github.com/agentbox/agentbox/internal/provider/providertest"
	"github.com/agentbox/agentbox/internal/provider/relay"
)

func TestMain(m *testing.M) { providertest.Main(m) }

// lockedBuffer is an output writer read while the process writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProcessLost: a provider process whose inner daemon dies (so no
// exit event ever comes, and the stream's reconnections would go on for
// ever) is taken for lost once the daemon has not answered for
// LostAfter: Wait returns the provider's unavailability naming the
// sandbox, and Close leaves nothing on the provider.
func TestProcessLost(t *testing.T) {
	p := localproc.New(t.TempDir())
	reg := provider.NewRegistry()
	reg.Register(p)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	r, err := relay.New(relay.Config{Providers: reg, Binary: providertest.Binary(t), Key: key, LostAfter: 3 * time.Second,
		LastRelayed: func(context.Context, string) (int64, error) { return 0, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	out := &lockedBuffer{}
	rp, err := r.StartProcess(ctx, execution.RemoteStartRequest{
		StartRequest: execution.StartRequest{Argv: []string{"sh", "-c", "echo up; exec sleep 600"}, Provider: localproc.Name},
		Policy:       json.RawMessage(`"exec-default"`), Stdout: out, Stderr: out,
	})
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), "up") {
		select {
		case <-ctx.Done():
			t.Fatalf("no output: %q", out.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	id := rp.Sandbox().ID
	if err := p.KillInner(ctx, id); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { _, err := rp.Wait(); waited <- err }()
	select {
	case err := <-waited:
		if !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), id) || !strings.Contains(err.Error(), "not answered") {
			t.Fatalf("Wait = %v; want the provider unavailable, naming sandbox %s, not answering", err, id)
		}
	case <-ctx.Done():
		t.Fatal("Wait did not return after the inner daemon died")
	}
	if _, err := rp.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ids, err := p.List(ctx, r.Owner()); err != nil || len(ids) != 0 {
		t.Fatalf("List after Close = %v, %v; want nothing", ids, err)
	}
}
