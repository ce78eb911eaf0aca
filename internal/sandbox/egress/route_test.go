package egress

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// TestSubstitute checks that a route credential takes the place of its
// placeholder only in its own header and only as the header's whole value
// in its format: nowhere an upstream might echo it, never in another
// credential's header.
func TestSubstitute(t *testing.T) {
	creds := []Secret{
		{Name: "api-key", Value: "real-api", Header: "x-api-key"},
		{Name: "auth-token", Value: "real-auth", Header: "Authorization", Format: "Bearer {value}"},
		{Name: "oauth-token", Value: "real-oauth", Header: "Authorization", Format: "Bearer {value}"},
		{Name: "goog", Value: "real-goog", Header: "x-goog-api-key"},
		{Name: "goog", Value: "real-goog", Header: "Authorization", Format: "Bearer {value}"},
	}
	ph := Placeholder
	for _, tc := range []struct {
		name string
		in   http.Header
		want http.Header
		used []string
	}{
		{"api key", http.Header{"X-Api-Key": {ph("api-key")}}, http.Header{"X-Api-Key": {"real-api"}}, []string{"api-key"}},
		{"oauth bearer", http.Header{"Authorization": {"Bearer " + ph("oauth-token")}, "Anthropic-Beta": {"oauth-2025-04-20"}},
			http.Header{"Authorization": {"Bearer real-oauth"}, "Anthropic-Beta": {"oauth-2025-04-20"}}, []string{"oauth-token"}},
		{"scheme in lower case", http.Header{"Authorization": {"bearer " + ph("auth-token")}}, http.Header{"Authorization": {"Bearer real-auth"}}, []string{"auth-token"}},
		{"two at once", http.Header{"X-Api-Key": {ph("api-key")}, "Authorization": {"Bearer " + ph("auth-token")}},
			http.Header{"X-Api-Key": {"real-api"}, "Authorization": {"Bearer real-auth"}}, []string{"api-key", "auth-token"}},
		{"one name, either header", http.Header{"X-Goog-Api-Key": {ph("goog")}, "Authorization": {"Bearer " + ph("goog")}},
			http.Header{"X-Goog-Api-Key": {"real-goog"}, "Authorization": {"Bearer real-goog"}}, []string{"goog"}},
		// Nothing where the value would not belong.
		{"in an echoable header", http.Header{"User-Agent": {ph("api-key")}, "X-Echo": {"Bearer " + ph("oauth-token")}},
			http.Header{"User-Agent": {ph("api-key")}, "X-Echo": {"Bearer " + ph("oauth-token")}}, nil},
		{"in another credential's header", http.Header{"X-Api-Key": {ph("oauth-token")}, "Authorization": {ph("api-key")}},
			http.Header{"X-Api-Key": {ph("oauth-token")}, "Authorization": {ph("api-key")}}, nil},
		{"not the whole value", http.Header{"X-Api-Key": {ph("api-key") + "x"}, "Authorization": {"Bearer " + ph("oauth-token") + " " + ph("oauth-token")}},
			http.Header{"X-Api-Key": {ph("api-key") + "x"}, "Authorization": {"Bearer " + ph("oauth-token") + " " + ph("oauth-token")}}, nil},
		{"wrong scheme", http.Header{"Authorization": {"Basic " + ph("auth-token")}}, http.Header{"Authorization": {"Basic " + ph("auth-token")}}, nil},
		{"a daemon secret's placeholder", http.Header{"X-Api-Key": {ph("github")}}, http.Header{"X-Api-Key": {ph("github")}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.in.Clone()
			used := substitute(h, creds)
			if fmt.Sprint(h) != fmt.Sprint(tc.want) || !slices.Equal(used, tc.used) {
				t.Errorf("got %v (used %v), want %v (used %v)", h, used, tc.want, tc.used)
			}
		})
	}
}

// TestGateRouteCredentials runs route credentials through a gate: the
// upstream sees each real value where the client put its placeholder, and
// the audit names every credential used, never a value.
func TestGateRouteCredentials(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Clone(context.Background()).Header)
		mu.Unlock()
		_, _ = fmt.Fprintf(w, "echo %s", r.Header.Get("X-Echo"))
	}))
	t.Cleanup(ts.Close)
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{opts: Options{RootCAs: rootsOf(ts)}, cfg: Config{Routes: []Route{{Name: "anthropic", Upstream: u, Credentials: []Secret{
		{Name: "anthropic-api-key", Value: "real-api", Header: "x-api-key"},
		{Name: "anthropic-oauth-token", Value: "real-oauth", Header: "Authorization", Format: "Bearer {value}"},
	}}}}})
	resp, body := h.raw(t, "POST /llm/anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n"+
		"Authorization: Bearer "+Placeholder("anthropic-oauth-token")+"\r\nanthropic-beta: oauth-2025-04-20\r\n"+
		"X-Echo: "+Placeholder("anthropic-api-key")+"\r\n\r\n{}")
	if resp.StatusCode != http.StatusOK || body != "echo "+Placeholder("anthropic-api-key") {
		t.Fatalf("route: %d %q", resp.StatusCode, body)
	}
	mu.Lock()
	got := seen[0]
	mu.Unlock()
	if got.Get("Authorization") != "Bearer real-oauth" || got.Get("Anthropic-Beta") != "oauth-2025-04-20" || got.Get("X-Api-Key") != "" {
		t.Errorf("upstream saw %v", got)
	}
	recs := h.rec.waitRecords(t, 1, func(r Record) bool { return r.Type == "secret" })
	if recs[0].Secret != "anthropic-oauth-token" || recs[0].Via != "route" {
		t.Errorf("secret record %+v", recs[0])
	}
	for _, r := range h.rec.Records() {
		if s := fmt.Sprintf("%+v", r); strings.Contains(s, "real-") {
			t.Errorf("a record holds a value: %s", s)
		}
	}
}

// TestGateRouteDaemonSecret checks that a daemon secret the sandbox holds
// a placeholder of (env.secrets) goes with route requests to its host, as
// with any request to that host, and with no other route.
func TestGateRouteDaemonSecret(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "key=%s", r.Header.Get("x-api-key"))
	}))
	t.Cleanup(ts.Close)
	u, err := url.Parse(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	named := *u
	named.Host = "localhost:" + u.Port()
	store := NewSecrets()
	if err := store.Put(Secret{Name: "anth", Value: "anth-real", Host: "localhost", Header: "x-api-key"}, "api"); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{opts: Options{Secrets: store}, cfg: Config{
		Network: sandbox.Network{Secrets: map[string]string{"ANTHROPIC_API_KEY": "anth"}},
		Routes:  []Route{{Name: "named", Upstream: &named}, {Name: "other", Upstream: u}},
	}})
	for route, want := range map[string]string{"named": "key=anth-real", "other": "key=" + Placeholder("anth")} {
		resp, body := h.raw(t, "GET /llm/"+route+"/v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: "+Placeholder("anth")+"\r\n\r\n")
		if resp.StatusCode != http.StatusOK || body != want {
			t.Errorf("route %s: %d %q, want %q", route, resp.StatusCode, body, want)
		}
	}
}
