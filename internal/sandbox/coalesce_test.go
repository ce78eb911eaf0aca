package sandbox_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// clock is a manual clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type sink struct {
	mu  sync.Mutex
	got []sandbox.Violation
}

func (s *sink) emit(vs ...sandbox.Violation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, vs...)
}

func (s *sink) total() (reports, violations int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range s.got {
		violations += v.N()
	}
	return len(s.got), violations
}

func netViolation(host string, port int) sandbox.Violation {
	return sandbox.Violation{Kind: sandbox.ViolationNetwork, Host: host, Port: port, Target: fmt.Sprintf("%s:%d", host, port),
		Rule: "default:deny", Action: "blocked", Detail: "denied"}
}

func newCoalescer(clk *clock, s *sink) *sandbox.Coalescer[sandbox.Violation] {
	return sandbox.NewCoalescer(sandbox.CoalesceConfig[sandbox.Violation]{
		Key: func(v sandbox.Violation) (string, string) {
			return fmt.Sprintf("%s|%s|%s|%d", v.Kind, v.Rule, v.Host, v.Port), v.Kind
		},
		Summary: sandbox.SummarizeViolations, Emit: s.emit,
		// A window no timer ends within the test: only the clock does.
		Window: time.Hour, Rate: 5, Kinds: 8, Now: clk.Now,
	})
}

// TestCoalescer floods a coalescer and checks that every violation is
// counted exactly once, the first of each kind is reported at once and
// the number of reports stays within the bound.
func TestCoalescer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flood func(add func(sandbox.Violation), clk *clock)
		n     int
		// atOnce is what must be reported before any flush; maxReports
		// bounds everything reported.
		atOnce, maxReports int
	}{
		{"one kind repeated", func(add func(sandbox.Violation), _ *clock) {
			for range 10000 {
				add(netViolation("a.example", 443))
			}
		}, 10000, 1, 2},
		{"a few kinds interleaved", func(add func(sandbox.Violation), _ *clock) {
			for i := range 9000 {
				add(netViolation("a.example", 440+i%3))
			}
		}, 9000, 3, 6},
		{"many kinds over the rate", func(add func(sandbox.Violation), _ *clock) {
			for i := range 5000 {
				add(netViolation("a.example", 1000+i))
			}
		}, 5000, 5, 6},
		{"one violation", func(add func(sandbox.Violation), _ *clock) { add(netViolation("a.example", 1)) }, 1, 1, 1},
		{"many windows", func(add func(sandbox.Violation), clk *clock) {
			for w := range 10 {
				for i := range 1000 {
					add(netViolation("a.example", 1000+i%50+w))
				}
				clk.advance(time.Hour)
			}
		}, 10000, 5, 10 * (5 + 8 + 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			s := &sink{}
			c := newCoalescer(clk, s)
			first := true
			tc.flood(func(v sandbox.Violation) {
				c.Add(v)
				if first {
					first = false
					if n, _ := s.total(); n != 1 {
						t.Fatalf("the first violation was not reported at once (%d reports)", n)
					}
				}
			}, clk)
			if tc.name != "many windows" {
				if n, _ := s.total(); n != tc.atOnce {
					t.Errorf("%d reports before the flush, want %d", n, tc.atOnce)
				}
			}
			c.Close()
			reports, violations := s.total()
			if violations != tc.n || reports > tc.maxReports {
				t.Errorf("%d reports counting %d violations; want at most %d counting %d", reports, violations, tc.maxReports, tc.n)
			}
			for _, v := range s.got {
				if v.Count > 1 && (v.First.IsZero() || v.Last.Before(v.First)) {
					t.Errorf("summary %+v without its time span", v)
				}
			}
			// After Close, reports pass straight through.
			c.Add(netViolation("late.example", 1))
			if r, _ := s.total(); r != reports+1 {
				t.Errorf("a violation after Close was not reported")
			}
		})
	}
}

// TestCoalescerRepeatsAfterQuietWindow checks that a kind quiet for a
// whole window is reported at once again, and that a window's summaries
// are reported when the next window starts.
func TestCoalescerRepeatsAfterQuietWindow(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := &sink{}
	c := newCoalescer(clk, s)
	defer c.Close()
	v := netViolation("a.example", 443)
	c.Add(v)
	c.Add(v)
	c.Add(v)
	if n, _ := s.total(); n != 1 {
		t.Fatalf("%d reports, want the first only", n)
	}
	clk.advance(time.Hour)
	c.Add(netViolation("b.example", 443)) // rolls the window
	if len(s.got) != 3 || s.got[1].Count != 2 || s.got[2].Host != "b.example" {
		t.Fatalf("reports %+v, want the first, the summary of 2, then b", s.got)
	}
	clk.advance(time.Hour) // a.example was quiet for a whole window
	clk.advance(time.Hour)
	c.Add(v)
	c.Add(v)
	if len(s.got) != 4 || s.got[3].Count != 0 {
		t.Fatalf("reports %+v, want a.example reported at once again", s.got)
	}
	if c.Idle() {
		t.Fatal("a coalescer holding a count is not idle")
	}
}

// TestCoalescerTimer checks that a window's summaries are reported when it
// ends with nothing else happening.
func TestCoalescerTimer(t *testing.T) {
	clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := &sink{}
	done := make(chan struct{})
	c := sandbox.NewCoalescer(sandbox.CoalesceConfig[sandbox.Violation]{
		Key:     func(v sandbox.Violation) (string, string) { return v.Host, v.Kind },
		Summary: sandbox.SummarizeViolations,
		Emit: func(vs ...sandbox.Violation) {
			s.emit(vs...)
			if vs[0].Count > 1 {
				close(done)
			}
		},
		// The timer runs on real time, the window's end on the clock.
		Window: time.Millisecond, Now: clk.Now,
	})
	defer c.Close()
	for range 3 {
		c.Add(netViolation("a.example", 443))
	}
	clk.advance(time.Second) // the window ends; the next tick sees it
	<-done                   // the test's own deadline bounds the wait
	if n, v := s.total(); n != 2 || v != 3 {
		t.Fatalf("%d reports counting %d violations, want the first and a summary of 2", n, v)
	}
}

// TestCoalescerDecoys is a sandbox hiding the destination it cares about
// behind decoys: enough new kinds to spend the window's rate first, then
// the one that matters. The over-rate summary counts the distinct kinds
// and names them, all of them up to sandbox.MaxOverSamples, else that many
// picked at random, so the decoys show and the real one is named with a
// probability that only more decoys lower.
func TestCoalescerDecoys(t *testing.T) {
	const rate = sandbox.DefaultCoalesceRate
	const exfil = "exfil.example:443"
	run := func(decoys int) (summary sandbox.Violation, reports int) {
		t.Helper()
		clk := &clock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
		s := &sink{}
		c := sandbox.NewCoalescer(sandbox.CoalesceConfig[sandbox.Violation]{
			Key: func(v sandbox.Violation) (string, string) {
				return fmt.Sprintf("%s|%s|%s|%d", v.Kind, v.Rule, v.Host, v.Port), v.Kind
			},
			Summary: sandbox.SummarizeViolations, Emit: s.emit,
			Window: time.Hour, Now: clk.Now,
		})
		for i := range rate + decoys {
			c.Add(netViolation(fmt.Sprintf("decoy-%d.example", i), 443))
		}
		c.Add(netViolation("exfil.example", 443))
		c.Add(netViolation("exfil.example", 443)) // a repeat is no new kind
		c.Close()
		var found int
		for _, v := range s.got {
			if strings.Contains(v.Detail, "over the sandbox's reporting rate") {
				summary = v
				found++
			}
		}
		if found != 1 {
			t.Fatalf("%d over-rate summaries, want 1: %+v", found, s.got)
		}
		if n, total := s.total(); total != rate+decoys+2 {
			t.Fatalf("%d reports counting %d violations, want %d", n, total, rate+decoys+2)
		}
		return summary, len(s.got)
	}
	targets := func(detail string) []string {
		_, list, ok := strings.Cut(detail, ": ")
		if !ok {
			return nil
		}
		return strings.Split(list, ", ")
	}

	// A few decoys past the rate: every kind over it is named.
	v, reports := run(10)
	if !strings.Contains(v.Detail, "of 11 distinct kinds: ") || !slices.Contains(targets(v.Detail), exfil) || len(targets(v.Detail)) != 11 {
		t.Errorf("summary after 10 decoys over the rate does not name all 11 kinds: %q", v.Detail)
	}
	if reports != rate+1 {
		t.Errorf("%d reports, want %d", reports, rate+1)
	}

	// Many decoys: 32 named at random, all counted; over many runs the
	// real one is named about 32 times in 101.
	named := 0
	for range 100 {
		v, _ := run(100)
		got := targets(v.Detail)
		if !strings.Contains(v.Detail, fmt.Sprintf("of 101 distinct kinds; %d picked at random: ", sandbox.MaxOverSamples)) || len(got) != sandbox.MaxOverSamples {
			t.Fatalf("summary of 101 kinds: %q", v.Detail)
		}
		if slices.Contains(got, exfil) {
			named++
		}
	}
	// P(never named in 100 runs) = (69/101)^100 < 1e-16.
	if named == 0 {
		t.Errorf("the real destination was never named in 100 floods of 100 decoys")
	}

	// More kinds than are counted: a lower bound, and the detail stays
	// bounded.
	v, _ = run(sandbox.MaxOverKinds + 10)
	if !strings.Contains(v.Detail, fmt.Sprintf("of at least %d distinct kinds", sandbox.MaxOverKinds)) {
		t.Errorf("summary of too many kinds: %q", v.Detail)
	}
	if len(v.Detail) > sandbox.MaxOverSamples*(128+len("…, "))+200 {
		t.Errorf("the summary's detail is %d bytes", len(v.Detail))
	}
}
