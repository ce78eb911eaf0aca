package sandbox

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of CoalesceConfig.
const (
	// DefaultCoalesceWindow is how long repeats of a kind are counted
	// before their summary is reported.
	DefaultCoalesceWindow = 10 * time.Second
	// DefaultCoalesceRate is how many reports of new kinds one sandbox
	// makes at once per window; beyond it, new kinds are counted into a
	// summary per class too.
	DefaultCoalesceRate = 20
	// DefaultCoalesceKinds bounds the kinds one sandbox's coalescer
	// tracks at a time.
	DefaultCoalesceKinds = 100
	// MaxOverSamples is how many distinct kinds an over-rate summary names
	// (see Over): all of them up to this many, else this many picked at
	// random.
	MaxOverSamples = 32
	// MaxOverKinds bounds the distinct kinds an over-rate summary counts
	// per class and window; past it the count is a lower bound.
	MaxOverKinds = 4096
)

// Over is what a summary of the reports of one class over the rate limit
// stands for, beyond their number.
type Over[T any] struct {
	// Samples is the first report of distinct kinds among them, in the
	// order they came: every kind when there are at most MaxOverSamples,
	// else MaxOverSamples of them picked uniformly at random (reservoir
	// sampling), so that no place in a flood of decoys is sure to go
	// unnamed.
	Samples []T
	// Kinds is how many distinct kinds there were; with KindsAtLeast,
	// more than MaxOverKinds came and Kinds is a lower bound (and kinds
	// past it are not sampled).
	Kinds        int
	KindsAtLeast bool
}

// CoalesceConfig configures a Coalescer of reports of type T.
type CoalesceConfig[T any] struct {
	// Key names the kind of a report (reports of one kind are repeats
	// of each other) and its class (what a summary over the rate limit
	// groups, e.g. the violation kind).
	Key func(T) (kind, class string)
	// Summary is the one report that stands for n reports: the repeats of
	// sample's kind (over is nil) or the reports of sample's class over
	// the rate limit (sample is then the first of them, and over names
	// their distinct kinds), seen between first and last. It is only
	// called with n > 1.
	Summary func(sample T, n int, first, last time.Time, over *Over[T]) T
	// Emit reports. It is called in order, with the Coalescer's lock
	// held: it must not block for long nor call the Coalescer.
	Emit func(reports ...T)
	// Window, Rate and Kinds default to DefaultCoalesceWindow,
	// DefaultCoalesceRate and DefaultCoalesceKinds.
	Window time.Duration
	Rate   int
	Kinds  int
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Coalescer bounds how many reports one sandbox can cause, however many
// times it repeats itself, while losing none: the first report of a kind
// is passed on at once; its repeats are counted and passed on as one
// summary (with their count and the times of the first and last of them)
// at the end of the window, at Flush or at Close. At most Rate new kinds
// are passed on at once per window, and at most Kinds are tracked; the
// reports of new kinds beyond that are counted into one summary per
// class. So a window costs at most Rate + Kinds + (classes) reports.
//
// A class's over-rate summary counts the distinct kinds in it and names
// up to MaxOverSamples of them (see Over), so a sandbox cannot hide the
// one destination it cares about behind Rate decoys: it takes many
// decoys per window to leave it unnamed with some probability, and the
// summary's count of distinct kinds shows that they were made. It is a
// bound, not a guarantee: past MaxOverSamples distinct kinds, a given one
// may go unnamed (its number never does), and past MaxOverKinds new ones
// are counted only as reports.
//
// The same mechanism serves every place violations are reported: session
// events, execution results and the audit log.
type Coalescer[T any] struct {
	cfg CoalesceConfig[T]

	mu     sync.Mutex
	start  time.Time // of the current window
	fresh  int       // kinds passed on at once in the current window
	kinds  map[string]*tally[T]
	over   map[string]*overTally[T] // by class
	seed   maphash.Seed             // of the kind hashes overTally keeps
	timer  *time.Timer
	closed bool
}

// tally counts the reports a summary will stand for.
type tally[T any] struct {
	sample      T
	n           int
	first, last time.Time
	seen        bool // the kind came up in the current window
}

// overTally counts the reports of one class over the rate limit, and the
// distinct kinds among them.
type overTally[T any] struct {
	tally[T]
	kinds   map[uint64]struct{} // hashes of the kinds seen, at most MaxOverKinds
	capped  bool                // more kinds came than kinds holds
	samples []overSample[T]     // reservoir of kinds' first reports
}

type overSample[T any] struct {
	i int // the kind's arrival rank among distinct kinds
	r T
}

// add counts r, of kind, into the tally: a kind not seen before may take
// a place in the reservoir of samples (Algorithm R: the i-th distinct kind
// replaces a random sample with probability MaxOverSamples/(i+1)).
func (t *overTally[T]) add(r T, kind string, seed maphash.Seed, now time.Time) {
	t.n++
	if t.n == 1 {
		t.first = now
	}
	t.last = now
	if t.capped {
		return
	}
	h := maphash.String(seed, kind)
	if _, ok := t.kinds[h]; ok {
		return
	}
	if len(t.kinds) >= MaxOverKinds {
		t.capped = true
		return
	}
	i := len(t.kinds)
	t.kinds[h] = struct{}{}
	switch {
	case i < MaxOverSamples:
		t.samples = append(t.samples, overSample[T]{i, r})
	default:
		if j := rand.IntN(i + 1); j < MaxOverSamples {
			t.samples[j] = overSample[T]{i, r}
		}
	}
}

// over is what the summary of the tally names.
func (t *overTally[T]) over() *Over[T] {
	// sort.Slice (the same pdqsort) rather than slices.SortFunc: one sort shared
	// by every element type instead of a copy for this one (12-17 KB of the binary).
	sort.Slice(t.samples, func(i, j int) bool { return t.samples[i].i < t.samples[j].i })
	o := &Over[T]{Kinds: len(t.kinds), KindsAtLeast: t.capped, Samples: make([]T, len(t.samples))}
	for i, s := range t.samples {
		o.Samples[i] = s.r
	}
	return o
}

// NewCoalescer returns a Coalescer; cfg.Key, cfg.Summary and cfg.Emit
// are required.
func NewCoalescer[T any](cfg CoalesceConfig[T]) *Coalescer[T] {
	if cfg.Window <= 0 {
		cfg.Window = DefaultCoalesceWindow
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultCoalesceRate
	}
	if cfg.Kinds <= 0 {
		cfg.Kinds = DefaultCoalesceKinds
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Coalescer[T]{cfg: cfg, kinds: map[string]*tally[T]{}, over: map[string]*overTally[T]{}, seed: maphash.MakeSeed()}
}

// Add reports r: at once, or counted into a later summary. After Close
// it is passed on at once.
func (c *Coalescer[T]) Add(r T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		c.cfg.Emit(r)
		return
	}
	now := c.cfg.Now()
	c.rollLocked(now)
	kind, class := c.cfg.Key(r)
	if t := c.kinds[kind]; t != nil {
		t.seen = true
		t.count(r, now)
		c.armLocked(now)
		return
	}
	if c.fresh < c.cfg.Rate && len(c.kinds) < c.cfg.Kinds {
		c.fresh++
		c.kinds[kind] = &tally[T]{seen: true}
		c.cfg.Emit(r)
		return
	}
	t := c.over[class]
	if t == nil {
		t = &overTally[T]{tally: tally[T]{sample: r}, kinds: map[uint64]struct{}{}}
		c.over[class] = t
	}
	t.add(r, kind, c.seed, now)
	c.armLocked(now)
}

func (t *tally[T]) count(r T, now time.Time) {
	t.n++
	if t.n == 1 {
		t.first = now
	}
	t.sample, t.last = r, now
}

// Flush passes on the summaries of what was counted so far.
func (c *Coalescer[T]) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flushLocked()
}

// Close flushes and stops the Coalescer's timer; later reports are
// passed on at once.
func (c *Coalescer[T]) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	c.flushLocked()
}

// Idle reports whether the Coalescer holds nothing and its window has
// ended, so that replacing it by a new one changes nothing but which
// kinds count as already reported.
func (c *Coalescer[T]) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.over) > 0 || c.cfg.Now().Sub(c.start) < c.cfg.Window {
		return false
	}
	for _, t := range c.kinds {
		if t.n > 0 {
			return false
		}
	}
	return true
}

// rollLocked starts a new window when the current one has ended: the
// summaries of the old one are passed on, kinds that did not come up in it
// are forgotten, and the rate budget is renewed.
func (c *Coalescer[T]) rollLocked(now time.Time) {
	if now.Sub(c.start) < c.cfg.Window {
		return
	}
	c.flushLocked()
	for k, t := range c.kinds {
		if !t.seen {
			delete(c.kinds, k)
		}
		t.seen = false
	}
	c.start, c.fresh = now, 0
}

// armLocked makes sure the current window's summaries are passed on when
// it ends, even if nothing else comes.
func (c *Coalescer[T]) armLocked(now time.Time) {
	if c.timer != nil {
		return
	}
	c.timer = time.AfterFunc(c.start.Add(c.cfg.Window).Sub(now), c.tick)
}

func (c *Coalescer[T]) tick() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timer = nil
	if c.closed {
		return
	}
	now := c.cfg.Now()
	if now.Sub(c.start) < c.cfg.Window {
		c.armLocked(now) // early: the clock is not the timer's
		return
	}
	c.rollLocked(now)
}

// flushLocked passes on every summary due, oldest first.
func (c *Coalescer[T]) flushLocked() {
	type due struct {
		r     T
		first time.Time
	}
	var out []due
	add := func(t *tally[T], over func() *Over[T]) {
		r := t.sample
		if t.n > 1 {
			var o *Over[T]
			if over != nil {
				o = over()
			}
			r = c.cfg.Summary(t.sample, t.n, t.first, t.last, o)
		}
		out = append(out, due{r, t.first})
	}
	for _, t := range c.kinds {
		if t.n > 0 {
			add(t, nil)
			t.n = 0
		}
	}
	for class, t := range c.over {
		add(&t.tally, t.over)
		delete(c.over, class)
	}
	if len(out) == 0 {
		return
	}
	// sort.SliceStable rather than slices.SortStableFunc: one sort shared by
	// every element type instead of a copy for this one (23 KB of the binary).
	sort.SliceStable(out, func(i, j int) bool { return out[i].first.Compare(out[j].first) < 0 })
	rs := make([]T, len(out))
	for i, d := range out {
		rs[i] = d.r
	}
	c.cfg.Emit(rs...)
}

// NewViolationCoalescer returns the Coalescer of a sandbox's violations:
// a kind is the violation's kind, rule, target, host and port; a class
// its kind. emit gets each violation or summary (Count > 1).
func NewViolationCoalescer(emit func(...Violation)) *Coalescer[Violation] {
	return NewCoalescer(CoalesceConfig[Violation]{
		Key: func(v Violation) (string, string) {
			return fmt.Sprintf("%s\x00%s\x00%s\x00%s\x00%d", v.Kind, v.Rule, v.Target, v.Host, v.Port), v.Kind
		},
		Summary: SummarizeViolations,
		Emit:    emit,
	})
}

// SummarizeViolations is the summary of n violations like sample seen
// between first and last; with over they are the violations of sample's
// kind over the sandbox's reporting rate, sample the first, and the
// detail counts their distinct kinds and names the sampled ones' targets
// (ViolationTarget).
func SummarizeViolations(sample Violation, n int, first, last time.Time, over *Over[Violation]) Violation {
	v := sample
	v.Count, v.First, v.Last = n, first.UTC(), last.UTC()
	if over != nil {
		targets := make([]string, len(over.Samples))
		for i, s := range over.Samples {
			targets[i] = ViolationTarget(s)
		}
		v.Detail = fmt.Sprintf("%d %s violations over the sandbox's reporting rate%s", n, v.Kind, OverDetail(over.Kinds, over.KindsAtLeast, targets))
	}
	return v
}

// maxTargetLen bounds each target an over-rate summary names, in bytes.
const maxTargetLen = 128

// OverDetail is how an over-rate summary's detail goes on after its count:
// the number of distinct kinds and the targets of the sampled ones, e.g.
// ", of 57 distinct kinds; 32 picked at random: a:443, b:22, …".
func OverDetail(kinds int, atLeast bool, targets []string) string {
	var b strings.Builder
	b.WriteString(", of ")
	if atLeast {
		b.WriteString("at least ")
	}
	b.WriteString(strconv.Itoa(kinds))
	b.WriteString(" distinct kinds")
	switch {
	case len(targets) == 0:
		return b.String()
	case len(targets) < kinds || atLeast:
		fmt.Fprintf(&b, "; %d picked at random: ", len(targets))
	default:
		b.WriteString(": ")
	}
	for i, t := range targets {
		if i > 0 {
			b.WriteString(", ")
		}
		if len(t) > maxTargetLen {
			t = strings.ToValidUTF8(t[:maxTargetLen], "") + "…"
		}
		b.WriteString(t)
	}
	return b.String()
}

// ViolationTarget names what a violation was about, for a summary's list:
// its destination (host:port), else its path or target, else its rule.
func ViolationTarget(v Violation) string {
	switch {
	case v.Host != "" && v.Port != 0:
		return net.JoinHostPort(v.Host, strconv.Itoa(v.Port))
	case v.Host != "":
		return v.Host
	case v.Target != "":
		return v.Target
	}
	return v.Rule
}
