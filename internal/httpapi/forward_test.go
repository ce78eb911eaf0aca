package httpapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/engine"
)

// ownedElsewhere is an engine whose every session another daemon drives.
type ownedElsewhere struct {
	*fakeEngine
	owner engine.Owner
}

func (o ownedElsewhere) SessionOwner(context.Context, string) (engine.Owner, bool, error) {
	return o.owner, true, nil
}

// TestForward: the requests that need a session's agent go to the daemon
// that drives it, once, with this daemon's token; the reads the store
// answers do not; an owner that does not answer is a 503 with Retry-After.
func TestForward(t *testing.T) {
	const token = "shared-token"
	owner := newFakeEngine()
	ses, err := owner.Create(t.Context(), engine.CreateParams{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	// The owner sees what reaches it.
	var seen http.Header
	ownerAPI := New(Config{Token: token, Version: "test"}, owner, nil, nil)
	ownerSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = r.Header.Clone()
		ownerAPI.ServeHTTP(w, r)
	}))
	t.Cleanup(ownerSrv.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	_ = ln.Close()

	tests := []struct {
		name       string
		addr       string
		method     string
		path       string
		body       string
		header     http.Header
		wantStatus int
		forwarded  bool
		want       string // in the body
	}{
		{name: "message", addr: ownerSrv.URL, method: http.MethodPost, path: "/v1/sessions/" + ses.ID + "/messages",
			body: `{"text":"hi"}`, wantStatus: http.StatusAccepted, forwarded: true, want: `"turn_id"`},
		{name: "interrupt", addr: ownerSrv.URL, method: http.MethodPost, path: "/v1/sessions/" + ses.ID + "/interrupt",
			wantStatus: http.StatusAccepted, forwarded: true, want: `"turn_id"`},
		{name: "session read served here", addr: ownerSrv.URL, method: http.MethodGet, path: "/v1/sessions/" + ses.ID,
			wantStatus: http.StatusNotFound},
		{name: "events served here", addr: ownerSrv.URL, method: http.MethodGet, path: "/v1/sessions/" + ses.ID + "/events",
			wantStatus: http.StatusNotFound},
		{name: "forwarded once only", addr: ownerSrv.URL, method: http.MethodPost, path: "/v1/sessions/" + ses.ID + "/interrupt",
			header: http.Header{forwardedHeader: {"1"}}, wantStatus: http.StatusNotFound},
		{name: "owner gone", addr: gone, method: http.MethodPost, path: "/v1/sessions/" + ses.ID + "/interrupt",
			wantStatus: http.StatusServiceUnavailable, want: "does not answer"},
		{name: "no address", addr: "", method: http.MethodPost, path: "/v1/sessions/" + ses.ID + "/interrupt",
			wantStatus: http.StatusConflict, want: "advertises no address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			eng := ownedElsewhere{newFakeEngine(), engine.Owner{Daemon: "dmn_owner", Addr: tc.addr, Expires: time.Now().Add(3 * time.Second)}}
			srv := httptest.NewServer(New(Config{Token: token, Version: "test"}, eng, nil, nil))
			t.Cleanup(srv.Close)
			seen = nil
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header[k] = v
			}
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || !strings.Contains(string(b), tc.want) {
				t.Fatalf("%s %s = %d %s; want %d with %q", tc.method, tc.path, resp.StatusCode, b, tc.wantStatus, tc.want)
			}
			if got := seen != nil; got != tc.forwarded {
				t.Fatalf("reached the owner: %v, want %v", got, tc.forwarded)
			}
			if tc.forwarded && (seen.Get(forwardedHeader) == "" || seen.Get("Authorization") != "Bearer "+token) {
				t.Errorf("forwarded request headers %v: want the mark and the daemon's token", seen)
			}
			if tc.wantStatus == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			if ct := resp.Header.Get("Content-Type"); !tc.forwarded && tc.wantStatus >= 400 && ct != problemContentType {
				t.Errorf("Content-Type %q, want a problem", ct)
			}
		})
	}
}
