package agentbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

func start(t testing.TB, opts agentbox.Options) *agentbox.Server {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	srv, err := agentbox.Start(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return srv
}

// runTurn sends text and follows the stream to the turn's end, answering
// permission requests with decision.
func runTurn(t testing.TB, c *client.Client, id, text, decision string) []event.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	page, err := c.Events(ctx, id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	after := int64(0)
	if n := len(page.Events); n > 0 {
		after = page.Events[n-1].Seq
	}
	turn, err := c.Send(ctx, id, text)
	if err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	st := c.Stream(ctx, id, after, client.Until(client.EndOfTurn(turn.TurnID)))
	for st.Next() {
		e := st.Event()
		got = append(got, e)
		if e.Type == event.TypePermissionRequested {
			p, _ := e.Decode()
			if _, err := c.AnswerPermission(ctx, id, p.(*event.PermissionRequested).ID, client.PermissionAnswer{Decision: decision}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestEmbeddedRoundTrip(t *testing.T) {
	srv := start(t, agentbox.Options{})
	c := srv.Client()
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	evs := runTurn(t, c, s.ID, "hello there", "allow")
	if evs[len(evs)-1].Type != event.TypeTurnCompleted {
		t.Fatalf("last event %s", evs[len(evs)-1].Type)
	}
	var text string
	for _, e := range evs {
		if e.Type == event.TypeItemCompleted {
			p, _ := e.Decode()
			if it := p.(*event.ItemCompleted).Item; it.Role == event.RoleAssistant {
				text = it.Text()
			}
		}
	}
	if !strings.Contains(text, "hello there") {
		t.Fatalf("assistant said %q", text)
	}
}

// snapshot is everything the API can say about the store's contents.
type snapshot struct {
	Sessions []client.Session
	Events   map[string][]event.Event
	Requests map[string][]client.Request
}

func snap(t *testing.T, c *client.Client) snapshot {
	t.Helper()
	ctx := t.Context()
	list, err := c.ListSessions(ctx, client.ListOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot{Sessions: list.Sessions, Events: map[string][]event.Event{}, Requests: map[string][]client.Request{}}
	for _, ss := range list.Sessions {
		if err := c.EventsAll(ctx, ss.ID, 0, func(e event.Event) error {
			s.Events[ss.ID] = append(s.Events[ss.ID], e)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		reqs, err := c.Requests(ctx, ss.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		s.Requests[ss.ID] = reqs.Requests
	}
	return s
}

// TestBadInputChangesNothing sends every kind of bad request to a real daemon
// and checks each gets the right problem+json answer and the store is exactly
// as before.
func TestBadInputChangesNothing(t *testing.T) {
	const token = "t0ken-for-tests"
	srv := start(t, agentbox.Options{Token: token})
	c := srv.Client()
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	evs := runTurn(t, c, s.ID, "/scenario permission-write", "allow")
	var pid string
	for _, e := range evs {
		if e.Type == event.TypePermissionRequested {
			p, _ := e.Decode()
			pid = p.(*event.PermissionRequested).ID
		}
	}
	if pid == "" {
		t.Fatal("no permission request in the scenario")
	}
	before := snap(t, c)

	big := `{"text":"` + strings.Repeat("x", 9<<20) + `"}`
	sess := "/v1/sessions/" + s.ID
	cases := []struct {
		name, method, path, ctype, body, token string
		status                                 int
		problem                                string
	}{
		{"malformed json", "POST", "/v1/sessions", "application/json", `{"agent":`, token, 400, "bad-request"},
		{"unknown field", "POST", "/v1/sessions", "application/json", `{"agent":"mock","bogus":1}`, token, 422, "validation"},
		{"unknown agent", "POST", "/v1/sessions", "application/json", `{"agent":"nope"}`, token, 422, "unknown-agent"},
		{"bad permission mode", "POST", "/v1/sessions", "application/json", `{"agent":"mock","permission_mode":"yolo"}`, token, 422, "validation"},
		{"wrong content type", "POST", "/v1/sessions", "text/plain", `{"agent":"mock"}`, token, 415, "unsupported-media-type"},
		{"unknown session", "GET", "/v1/sessions/ses_nope", "", "", token, 404, "not-found"},
		{"message to unknown session", "POST", "/v1/sessions/ses_nope/messages", "application/json", `{"text":"hi"}`, token, 404, "not-found"},
		{"empty message", "POST", sess + "/messages", "application/json", `{}`, token, 422, "validation"},
		{"text and content", "POST", sess + "/messages", "application/json", `{"text":"a","content":[{"type":"text","text":"b"}]}`, token, 422, "validation"},
		{"oversize body", "POST", sess + "/messages", "application/json", big, token, 413, "payload-too-large"},
		{"permission answered twice", "POST", sess + "/permissions/" + pid, "application/json", `{"decision":"deny"}`, token, 409, "already-resolved"},
		{"bad decision", "POST", sess + "/permissions/" + pid, "application/json", `{"decision":"maybe"}`, token, 422, "validation"},
		{"unknown permission", "POST", sess + "/permissions/perm_nope", "application/json", `{"decision":"allow"}`, token, 404, "not-found"},
		{"unknown question", "POST", sess + "/questions/q_nope", "application/json", `{"answer":"x"}`, token, 404, "not-found"},
		{"negative after", "GET", sess + "/events?after=-1", "", "", token, 422, "validation"},
		{"overflowing after", "GET", sess + "/events?after=99999999999999999999", "", "", token, 422, "validation"},
		{"zero limit", "GET", sess + "/events?limit=0", "", "", token, 422, "validation"},
		{"huge limit", "GET", sess + "/events?limit=1000000", "", "", token, 422, "validation"},
		{"bad Last-Event-ID", "GET", sess + "/events/stream", "", "", token, 400, ""},
		{"missing token", "GET", "/v1/sessions", "", "", "", 401, "unauthorized"},
		{"wrong token", "POST", "/v1/sessions", "application/json", `{"agent":"mock"}`, "wrong", 401, "unauthorized"},
		{"interrupt without turn", "POST", sess + "/interrupt", "", "", token, 409, "no-turn"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL()+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.name == "bad Last-Event-ID" {
				req.Header.Set("Last-Event-ID", "not-a-number")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if tc.status == 400 && tc.problem == "" && (resp.StatusCode == 400 || resp.StatusCode == 422) {
				tc.status = resp.StatusCode // either is a fair answer
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
				t.Fatalf("content type %q", ct)
			}
			var p client.Problem
			if err := json.Unmarshal(body, &p); err != nil {
				t.Fatalf("problem body: %v: %s", err, body)
			}
			if p.Status != tc.status || !strings.HasPrefix(p.Type, "https://agentbox.dev/problems/") {
				t.Fatalf("problem %+v", p)
			}
			if tc.problem != "" && p.Type != "https://agentbox.dev/problems/"+tc.problem {
				t.Fatalf("problem type %s, want %s", p.Type, tc.problem)
			}
		})
	}
	after := snap(t, c)
	if d := cmp.Diff(before, after); d != "" {
		t.Fatalf("bad requests changed the store (-before +after):\n%s", d)
	}
}

// cutProxy forwards TCP connections to target and cuts each one after a
// random number of bytes from the server, to simulate flaky networks.
type cutProxy struct {
	ln    net.Listener
	cuts  atomic.Int64
	wg    sync.WaitGroup
	close chan struct{}
}

func newCutProxy(t *testing.T, target string, seed uint64) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, close: make(chan struct{})}
	rng := rand.New(rand.NewPCG(seed, seed))
	var mu sync.Mutex
	p.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			limit := int64(300 + rng.IntN(20000))
			mu.Unlock()
			p.wg.Go(func() { p.serve(conn, target, limit) })
		}
	})
	t.Cleanup(func() { ln.Close(); close(p.close); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve(conn net.Conn, target string, limit int64) {
	defer conn.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer up.Close()
	go func() {
		// The client hung up: hang up on the server too.
		_, _ = io.Copy(up, conn)
		up.Close()
	}()
	n, _ := io.CopyN(conn, up, limit)
	if n == limit {
		p.cuts.Add(1)
	}
}

// TestSSEResumeAcrossCuts follows a long session through a proxy that cuts
// the connection at random points: the SDK's stream, resuming with
// Last-Event-ID, must deliver every event exactly once and in order.
func TestSSEResumeAcrossCuts(t *testing.T) {
	// The proxy's port is not the daemon's: allow 127.0.0.1 on any port.
	srv := start(t, agentbox.Options{AllowedHosts: []string{"127.0.0.1"}})
	target := strings.TrimPrefix(srv.URL(), "http://")
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			proxy := newCutProxy(t, target, seed)
			pc, err := client.New("http://"+proxy.ln.Addr().String(), client.WithToken(srv.Token()))
			if err != nil {
				t.Fatal(err)
			}
			c := srv.Client()
			s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
			if err != nil {
				t.Fatal(err)
			}
			steps, _ := json.Marshal([]map[string]any{{"kind": "long", "count": 3000, "delay": "50us"}, {"kind": "text", "text": "done"}})
			turn, err := c.Send(t.Context(), s.ID, "/mock "+string(steps))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			var reconnects int
			st := pc.Stream(ctx, s.ID, 0,
				client.Until(client.EndOfTurn(turn.TurnID)),
				client.WithBackoff(time.Millisecond, 20*time.Millisecond),
				client.OnReconnect(func(int, error, time.Duration) { reconnects++ }))
			var seqs []int64
			for st.Next() {
				seqs = append(seqs, st.Event().Seq)
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			for i, q := range seqs {
				if q != int64(i+1) {
					t.Fatalf("delivery %d has seq %d (duplicate or gap)", i, q)
				}
			}
			last, err := c.LastSeq(ctx, s.ID)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(seqs)) != last {
				t.Fatalf("delivered %d events, the log has %d", len(seqs), last)
			}
			if proxy.cuts.Load() == 0 || reconnects == 0 {
				t.Fatalf("the proxy cut %d connections and the stream reconnected %d times; the test proved nothing", proxy.cuts.Load(), reconnects)
			}
			t.Logf("%d events through %d cuts (%d reconnects)", len(seqs), proxy.cuts.Load(), reconnects)
		})
	}
}

// BenchmarkSSEFanout measures deliveries per second to 100 SSE subscribers of
// one session streaming events.
func BenchmarkSSEFanout(b *testing.B) {
	const subscribers = 100
	const perTurn = 2000
	srv := start(b, agentbox.Options{})
	c := srv.Client()
	s, err := c.CreateSession(context.Background(), client.CreateSession{Agent: "mock"})
	if err != nil {
		b.Fatal(err)
	}
	prompt, _ := json.Marshal([]map[string]any{{"kind": "long", "count": perTurn}})
	var delivered atomic.Int64
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		after, err := c.LastSeq(context.Background(), s.ID)
		if err != nil {
			b.Fatal(err)
		}
		// Subscribers connect first, so what is measured is live fan-out.
		var ready, wg sync.WaitGroup
		for range subscribers {
			ready.Add(1)
			wg.Go(func() {
				st := c.Stream(context.Background(), s.ID, after,
					client.Until(func(e event.Event) bool { return e.Type == event.TypeTurnCompleted }))
				ready.Done()
				for st.Next() {
					delivered.Add(1)
				}
			})
		}
		ready.Wait()
		if _, err := c.Send(context.Background(), s.ID, "/mock "+string(prompt)); err != nil {
			b.Fatal(err)
		}
		wg.Wait()
	}
	el := time.Since(start)
	b.ReportMetric(float64(delivered.Load())/el.Seconds(), "deliveries/s")
	b.ReportMetric(subscribers, "subscribers")
}

// TestMetrics runs a turn with an approved and a timed-out permission and
// checks /metrics reports what the issue asks for, with the right labels.
func TestMetrics(t *testing.T) {
	srv := start(t, agentbox.Options{PermissionTimeout: 100 * time.Millisecond})
	c := srv.Client()
	s, err := c.CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	runTurn(t, c, s.ID, "/scenario permission-write", "allow")
	// Nobody answers this one: it times out.
	turn, err := c.Send(t.Context(), s.ID, "/scenario permission-command")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTurn(t.Context(), s.ID, turn.TurnID, 0, func(event.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+srv.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	text := string(body)
	for _, want := range []string{
		"agentbox_sessions_created_total 1",
		"agentbox_sessions_active 1",
		`agentbox_permission_requests_total{by="user",decision="allow",kind="file_write"} 1`,
		`agentbox_permission_requests_total{by="timeout",decision="deny",kind="command"} 1`,
		`agentbox_permission_wait_seconds_count{kind="command"} 1`,
		`agentbox_turn_duration_seconds_count{agent="mock",stop_reason="end_turn"} 2`,
		`agentbox_tool_call_duration_seconds_count{kind="file_change"} 1`,
		`agentbox_http_request_duration_seconds_count{code="201",method="POST",route="/v1/sessions"} 1`,
		"agentbox_events_appended_total",
		"go_goroutines",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", text)
	}
}
