package relay

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/provider"
)

// TestClassify: what the relay does with each kind of inner event. The
// host records its own turn and session bookkeeping and the user's
// message; it relays what the agent and the inner sandbox say.
func TestClassify(t *testing.T) {
	tests := []struct {
		typ  event.Type
		src  event.Source
		want Kind
	}{
		{event.TypeSessionStarted, event.SourceDaemon, Skip},
		{event.TypeSessionConfigured, event.SourceDaemon, Skip},
		{event.TypeTurnStarted, event.SourceDaemon, Skip},
		{event.TypeItemStarted, event.SourceDaemon, Skip}, // the user's message
		{event.TypeItemCompleted, event.SourceDaemon, Skip},
		{event.TypePermissionResolved, event.SourceDaemon, Skip},
		{event.TypeQuestionResolved, event.SourceDaemon, Skip},
		{event.TypeItemStarted, event.SourceAgent, Forward},
		{event.TypeItemDelta, event.SourceAgent, Forward},
		{event.TypeItemCompleted, event.SourceAgent, Forward},
		{event.TypeError, event.SourceAgent, Forward},
		{event.TypeError, event.SourceDaemon, Forward},
		{event.TypeSandboxViolation, event.SourceDaemon, Forward},
		{event.TypeNative, event.SourceAgent, Forward},
		{event.TypeTurnCompleted, event.SourceDaemon, TurnEnd},
		{event.TypePermissionRequested, event.SourceDaemon, Permission},
		{event.TypeQuestionRequested, event.SourceDaemon, Question},
		{event.TypeSessionEnded, event.SourceDaemon, End},
	}
	for _, tt := range tests {
		if got := Classify(event.Event{Type: tt.typ, Source: tt.src}); got != tt.want {
			t.Errorf("Classify(%s from %s) = %d, want %d", tt.typ, tt.src, got, tt.want)
		}
	}
}

// TestRelayed: the host's copy keeps the type, source and data, names the
// inner seq and id in its raw field, and leaves the envelope to the host.
func TestRelayed(t *testing.T) {
	in := event.Event{ID: "evt_inner", Seq: 42, SessionID: "ses_inner", TurnID: "turn_inner", Type: event.TypeItemDelta,
		Source: event.SourceAgent, Data: json.RawMessage(`{"item_id":"i","delta":{"text":"x"}}`), NativeSessionID: "n"}
	out := Relayed(in)
	if out.ID != "" || out.Seq != 0 || out.SessionID != "" || out.TurnID != "" || out.NativeSessionID != "" {
		t.Errorf("Relayed kept the inner envelope: %+v", out)
	}
	if out.Type != in.Type || out.Source != in.Source || string(out.Data) != string(in.Data) {
		t.Errorf("Relayed = %+v, want the inner type, source and data", out)
	}
	if string(out.Raw) != `{"relay":{"seq":42,"id":"evt_inner"}}` {
		t.Errorf("Raw = %s", out.Raw)
	}
	if seq, ok := InnerSeq(out.Raw); !ok || seq != 42 {
		t.Errorf("InnerSeq = %d, %v", seq, ok)
	}
	for _, raw := range []string{``, `{}`, `{"relay":{}}`, `{"relay":{"seq":-1}}`, `{"type":"x"}`, `not json "relay"`} {
		if seq, ok := InnerSeq(json.RawMessage(raw)); ok {
			t.Errorf("InnerSeq(%s) = %d, true; want not relayed", raw, seq)
		}
	}
}

func TestNative(t *testing.T) {
	tests := []native{
		{Provider: "docker", Nonce: "ab"},
		{Provider: "docker", Nonce: "ab", Sandbox: "c/d:e"},
		{Provider: "e2b", Nonce: "ab", Sandbox: "sbx 1", Session: "ses_1"},
		{Provider: "docker", Nonce: "ab", Sandbox: "c", Session: "ses_1", Snapshot: "snap/1"},
	}
	for _, n := range tests {
		got, ok := parseNative(n.String())
		if !ok || got != n {
			t.Errorf("parseNative(%q) = %+v, %v; want %+v", n.String(), got, ok, n)
		}
	}
	for _, s := range []string{"", "ses_1", "relay/", "relay/docker", "relay/docker//x", "relay/a/b/c/d/e/f", "relay/a/b/c//e", "relay/a/%zz", "xrelay/a/b"} {
		if n, ok := parseNative(s); ok {
			t.Errorf("parseNative(%q) = %+v, want refused", s, n)
		}
	}
}

func FuzzParseNative(f *testing.F) {
	f.Add("relay/docker/ab/sbx/ses")
	f.Add("relay/a%2Fb/c")
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseNative(s)
		if !ok {
			return
		}
		again, ok := parseNative(n.String())
		if !ok || again != n {
			t.Fatalf("%q parses as %+v, which does not round-trip (%+v, %v)", s, n, again, ok)
		}
	})
}

// TestTokens: a token depends on the key, the provider and the nonce;
// Place gives every session a nonce of its own.
func TestTokens(t *testing.T) {
	key := make([]byte, 32)
	r := newRelay(t, key)
	other := newRelay(t, append([]byte{1}, key[1:]...))
	if r.token("p", "n") == other.token("p", "n") || r.token("p", "n") == r.token("p", "m") || r.token("p", "n") == r.token("q", "n") {
		t.Fatal("tokens collide across keys, nonces or providers")
	}
	if r.Owner() == other.Owner() {
		t.Fatal("two keys give one owner")
	}
	seen := map[string]bool{}
	for range 100 {
		id, err := r.Place("")
		if err != nil {
			t.Fatal(err)
		}
		n, ok := parseNative(id)
		if !ok || n.Provider != "fake" || seen[n.Nonce] {
			t.Fatalf("Place = %q (seen: %v)", id, seen[n.Nonce])
		}
		seen[n.Nonce] = true
	}
	if _, err := r.Place("nope"); err == nil {
		t.Fatal("Place(nope) succeeded")
	}
	_, _, _, tok, ok := Inner(key, native{Provider: "p", Nonce: "n", Sandbox: "s"}.String())
	if !ok || tok != r.token("p", "n") {
		t.Fatal("Inner does not derive the relay's token")
	}
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	k1, err := LoadKey(dir)
	if err != nil || len(k1) != 32 {
		t.Fatalf("LoadKey = %d bytes, %v", len(k1), err)
	}
	k2, err := LoadKey(dir)
	if err != nil || string(k1) != string(k2) {
		t.Fatal("the key changed across loads")
	}
	if fi, err := os.Stat(filepath.Join(dir, KeyFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	if err := os.Chmod(filepath.Join(dir, KeyFileName), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(dir); err == nil {
		t.Fatal("a key others can read was accepted")
	}
}

// TestReconcile: what a session keeps stays, the rest of the owner's
// sandboxes go, and a provider without Lister is left alone.
func TestReconcile(t *testing.T) {
	r := newRelay(t, make([]byte, 32))
	f := r.cfg.Providers
	p, _ := f.Get("fake")
	fp := p.(*fakeProvider)
	fp.ids = []string{"a", "b", "c"}
	removed, err := r.Reconcile(t.Context(), map[string]map[string]bool{"fake": {"b": true}})
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 || removed[0] != "fake/a" || removed[1] != "fake/c" {
		t.Fatalf("removed %v", removed)
	}
	if fp.owner != r.Owner() {
		t.Fatalf("listed for %q, want the relay's owner", fp.owner)
	}
}

func newRelay(t *testing.T, key []byte) *Relay {
	t.Helper()
	reg := provider.NewRegistry()
	reg.Register(&fakeProvider{})
	r, err := New(Config{Providers: reg, Default: "fake", Key: key, LastRelayed: func(context.Context, string) (int64, error) { return 0, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fakeProvider lists ids and records destroys; it makes nothing.
type fakeProvider struct {
	ids   []string
	owner string
}

func (*fakeProvider) Name() string                        { return "fake" }
func (*fakeProvider) Capabilities() provider.Capabilities { return provider.Capabilities{} }
func (*fakeProvider) Health(context.Context) error        { return nil }
func (*fakeProvider) Create(context.Context, provider.Spec) (provider.Sandbox, error) {
	return provider.Sandbox{}, provider.ErrUnavailable
}
func (*fakeProvider) Connect(context.Context, string, string) (provider.Sandbox, error) {
	return provider.Sandbox{}, provider.ErrGone
}
func (f *fakeProvider) Destroy(_ context.Context, id string) error {
	for i, x := range f.ids {
		if x == id {
			f.ids = append(f.ids[:i], f.ids[i+1:]...)
			return nil
		}
	}
	return nil
}
func (f *fakeProvider) List(_ context.Context, owner string) ([]string, error) {
	f.owner = owner
	return append([]string(nil), f.ids...), nil
}
