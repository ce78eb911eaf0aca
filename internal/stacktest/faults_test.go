package stacktest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/agent/mock"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// faultyStack serves the mock agent with faults and returns a session
// whose log holds n item.delta events after its first ones (the seq of
// the last of those is base).
func faultyStack(t *testing.T, f *stacktest.Faults, n int) (s *stacktest.Stack, id string, base int64) {
	t.Helper()
	reg := agent.NewRegistry()
	reg.Register(mock.Name, mock.New())
	s = stacktest.New(t, stacktest.Options{Agents: reg, Faults: f})
	ses, err := s.Client.CreateSession(t.Context(), client.CreateSession{Agent: mock.Name})
	if err != nil {
		t.Fatal(err)
	}
	if base, err = s.Client.LastSeq(t.Context(), ses.ID); err != nil {
		t.Fatal(err)
	}
	evs := make([]event.Event, n)
	for i := range evs {
		evs[i] = event.New(event.SourceAgent, &event.ItemDelta{ItemID: "it", Field: event.DeltaText, Delta: fmt.Sprint(i)})
	}
	if _, err := s.Store.Append(t.Context(), ses.ID, evs...); err != nil {
		t.Fatal(err)
	}
	return s, ses.ID, base
}

// raw reads session id's event stream from after until it holds want (or
// ends, or a second passes) and returns what it read and how it ended.
func raw(t *testing.T, s *stacktest.Stack, id string, after int64, want string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/sessions/%s/events/stream?after=%d", s.URL, id, after), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			return got.String(), err
		}
		if strings.Contains(got.String(), want) {
			return got.String(), nil
		}
	}
}

// ids returns the seqs of the id fields of an SSE body with LF endings.
func ids(body string) []string {
	var out []string
	for l := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(l, "id: "); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestFaults(t *testing.T) {
	t.Parallel()
	t.Run("none: the real stream", func(t *testing.T) {
		t.Parallel()
		s, id, base := faultyStack(t, &stacktest.Faults{}, 3)
		body, err := raw(t, s, id, base, fmt.Sprintf("id: %d\n", base+3))
		if err != nil || !slicesEqual(ids(body), seqs(base+1, base+3)) {
			t.Fatalf("%v\n%q", err, body)
		}
	})
	t.Run("duplicate", func(t *testing.T) {
		t.Parallel()
		s, id, base := faultyStack(t, &stacktest.Faults{Duplicate: 1}, 3)
		body, err := raw(t, s, id, base, fmt.Sprintf("id: %d\n", base+3))
		got := ids(body)
		if err != nil || len(got) < 4 || got[0] != fmt.Sprint(base+1) || got[1] != fmt.Sprint(base+1) {
			t.Fatalf("ids %v (every event sent twice, the repeat right after), %v\n%q", got, err, body)
		}
	})
	t.Run("skip", func(t *testing.T) {
		t.Parallel()
		var base int64
		f := &stacktest.Faults{SkipSeq: func(seq int64) bool { return seq == base+2 || seq == base+3 }}
		s, id, b := faultyStack(t, f, 3)
		base = b
		body, err := raw(t, s, id, base, fmt.Sprintf("id: %d\n", base+3))
		// base+3 is the last event: never left out, or the client would not
		// learn of the gap.
		if err != nil || !slicesEqual(ids(body), []string{fmt.Sprint(base + 1), fmt.Sprint(base + 3)}) {
			t.Fatalf("%v\n%q", err, body)
		}
	})
	t.Run("cut", func(t *testing.T) {
		t.Parallel()
		f := &stacktest.Faults{Cut: 1}
		s, id, base := faultyStack(t, f, 3)
		for range 4 { // half the cuts are abrupt, half clean
			body, err := raw(t, s, id, base, "never")
			if errors.Is(err, context.DeadlineExceeded) || strings.Contains(body, "\ndata: ") && strings.Contains(body, "}\n\n") {
				t.Fatalf("the stream was not cut inside its first event: %v\n%q", err, body)
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Logf("abrupt cut: %v", err)
			}
		}
		if f.Connections() != 4 {
			t.Fatalf("%d connections counted, want 4", f.Connections())
		}
	})
	t.Run("vary", func(t *testing.T) {
		t.Parallel()
		s, id, base := faultyStack(t, &stacktest.Faults{Vary: true}, 20)
		seen := map[string]bool{}
		spread := false
		for range 30 {
			body, err := raw(t, s, id, base, fmt.Sprintf("id: %d", base+20))
			if err != nil {
				t.Fatal(err)
			}
			eol := "\n"
			switch {
			case strings.Contains(body, "\r\n"):
				eol = "\r\n"
			case strings.Contains(body, "\r"):
				eol = "\r"
			}
			seen[eol] = true
			if strings.Count(strings.ReplaceAll(body, eol, "\n"), "\ndata: ") > strings.Count(strings.ReplaceAll(body, eol, "\n"), "\nid: ") {
				spread = true
			}
		}
		if len(seen) != 3 || !spread {
			t.Fatalf("line endings %v, data spread over lines %v; want all three and some spread", seen, spread)
		}
	})
}

func seqs(from, to int64) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprint(i))
	}
	return out
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
