package metrics

import (
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Opts name and describe a counter or gauge: Name is the metric's full
// name, Help its HELP line.
type Opts struct {
	Name string
	Help string
}

// CounterOpts and GaugeOpts are Opts.
type (
	CounterOpts = Opts
	GaugeOpts   = Opts
)

// HistogramOpts name and describe a histogram; Buckets are the upper
// bounds, increasing (DefBuckets when empty). The +Inf bucket is implied.
type HistogramOpts struct {
	Name    string
	Help    string
	Buckets []float64
}

// DefBuckets are the default histogram buckets (Prometheus's).
var DefBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// ExponentialBuckets returns count buckets, the first start and each the
// previous times factor (computed as Prometheus's client does, so that the
// le values are the same to the last digit).
func ExponentialBuckets(start, factor float64, count int) []float64 {
	if count < 1 || start <= 0 || factor <= 1 {
		panic("metrics: ExponentialBuckets needs count >= 1, start > 0, factor > 1")
	}
	b := make([]float64, count)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// atomicFloat is a float64 updated with compare-and-swap.
type atomicFloat struct{ bits atomic.Uint64 }

func (f *atomicFloat) add(v float64) {
	for {
		old := f.bits.Load()
		if f.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

func (f *atomicFloat) load() float64 { return math.Float64frombits(f.bits.Load()) }

// Counter is a value that only goes up. Safe for concurrent use.
type Counter struct {
	desc
	v atomicFloat
}

// NewCounter returns a counter at 0.
func NewCounter(o CounterOpts) *Counter {
	return &Counter{desc: newDesc(o.Name, o.Help, "counter", nil)}
}

// Inc adds 1.
func (c *Counter) Inc() { c.v.add(1) }

// Add adds v, which must not be negative.
func (c *Counter) Add(v float64) {
	if v < 0 {
		panic("metrics: counter " + c.name + " cannot decrease")
	}
	c.v.add(v)
}

// Value returns the count.
func (c *Counter) Value() float64 { return c.v.load() }

func (c *Counter) collect(emit func(family)) {
	emit(family{desc: &c.desc, samples: []sample{{value: c.Value()}}})
}

// Gauge is a value that goes up and down. Safe for concurrent use.
type Gauge struct {
	desc
	v atomicFloat
}

// NewGauge returns a gauge at 0.
func NewGauge(o GaugeOpts) *Gauge { return &Gauge{desc: newDesc(o.Name, o.Help, "gauge", nil)} }

// Inc adds 1.
func (g *Gauge) Inc() { g.v.add(1) }

// Dec subtracts 1.
func (g *Gauge) Dec() { g.v.add(-1) }

// Add adds v.
func (g *Gauge) Add(v float64) { g.v.add(v) }

// Sub subtracts v.
func (g *Gauge) Sub(v float64) { g.v.add(-v) }

// Set sets the gauge to v.
func (g *Gauge) Set(v float64) { g.v.bits.Store(math.Float64bits(v)) }

// Value returns the gauge's value.
func (g *Gauge) Value() float64 { return g.v.load() }

func (g *Gauge) collect(emit func(family)) {
	emit(family{desc: &g.desc, samples: []sample{{value: g.Value()}}})
}

// histogram holds one histogram's counts; upper is shared by a vector's
// children.
type histogram struct {
	upper  []float64
	counts []atomic.Uint64 // len(upper)+1: the last is the +Inf bucket
	sum    atomicFloat
}

func newHistogram(upper []float64) *histogram {
	return &histogram{upper: upper, counts: make([]atomic.Uint64, len(upper)+1)}
}

// Observe records v: it counts in the first bucket whose upper bound is
// at least v.
func (h *histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.upper, v)].Add(1)
	h.sum.add(v)
}

// samples appends the histogram's bucket, sum and count samples. The count
// is the sum of the buckets read, so that it always equals the +Inf
// bucket even while observations land.
func (h *histogram) samples(out []sample, labels string) []sample {
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		le := math.Inf(1)
		if i < len(h.upper) {
			le = h.upper[i]
		}
		out = append(out, sample{suffix: "_bucket", labels: labels, extra: "le", extraValue: le, value: float64(cum)})
	}
	return append(out,
		sample{suffix: "_sum", labels: labels, value: h.sum.load()},
		sample{suffix: "_count", labels: labels, value: float64(cum)})
}

// Histogram counts observations in buckets. Safe for concurrent use.
type Histogram struct {
	desc
	h *histogram
}

// NewHistogram returns an empty histogram.
func NewHistogram(o HistogramOpts) *Histogram {
	return &Histogram{desc: newDesc(o.Name, o.Help, "histogram", nil), h: newHistogram(buckets(o))}
}

// Observe records v.
func (h *Histogram) Observe(v float64) { h.h.Observe(v) }

func (h *Histogram) collect(emit func(family)) {
	emit(family{desc: &h.desc, samples: h.h.samples(nil, "")})
}

func buckets(o HistogramOpts) []float64 {
	b := o.Buckets
	if len(b) == 0 {
		b = DefBuckets
	}
	if !slices.IsSorted(b) || len(slices.Compact(slices.Clone(b))) != len(b) {
		panic("metrics: histogram " + o.Name + ": buckets must increase")
	}
	if math.IsInf(b[len(b)-1], 1) {
		b = b[:len(b)-1]
	}
	return slices.Clone(b)
}

// vec is a set of children, one per combination of label values, created
// on first use.
type vec[T any] struct {
	desc
	order    []int // label indexes in the order of their sorted names
	newChild func() *T
	mu       sync.RWMutex
	children map[string]*child[T]
}

type child[T any] struct {
	sorted []string // label values in the order of the sorted names
	labels string   // formatted label pairs
	v      *T
}

func newVec[T any](name, help, typ string, labels []string, newChild func() *T) vec[T] {
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(labels[a], labels[b]) })
	return vec[T]{desc: newDesc(name, help, typ, labels), order: order, newChild: newChild, children: map[string]*child[T]{}}
}

// with returns the child for values, creating it on first use. It panics
// when the number of values is not the number of labels, as that is a
// programming error.
func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic("metrics: " + v.name + ": wrong number of label values")
	}
	key := strings.Join(values, "\xff")
	v.mu.RLock()
	c := v.children[key]
	v.mu.RUnlock()
	if c != nil {
		return c.v
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c = v.children[key]; c != nil {
		return c.v
	}
	c = &child[T]{sorted: make([]string, len(values)), v: v.newChild()}
	var b strings.Builder
	for i, j := range v.order {
		c.sorted[i] = values[j]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(v.labels[j])
		b.WriteString(`="`)
		writeEscaped(&b, values[j], true)
		b.WriteByte('"')
	}
	c.labels = b.String()
	v.children[key] = c
	return c.v
}

// sortedChildren returns the children ordered by their label values (in
// the order of the sorted label names), as Prometheus's client orders
// them.
func (v *vec[T]) sortedChildren() []*child[T] {
	v.mu.RLock()
	cs := make([]*child[T], 0, len(v.children))
	for _, c := range v.children {
		cs = append(cs, c)
	}
	v.mu.RUnlock()
	// sort.Slice (the same pdqsort) rather than slices.SortFunc: one sort shared
	// by every element type instead of a copy for this one (12-17 KB of the binary).
	sort.Slice(cs, func(i, j int) bool { return slices.Compare(cs[i].sorted, cs[j].sorted) < 0 })
	return cs
}

// CounterVec is a counter per combination of label values.
type CounterVec struct{ vec[Counter] }

// NewCounterVec returns a counter vector with the given label names.
func NewCounterVec(o CounterOpts, labels []string) *CounterVec {
	return &CounterVec{newVec(o.Name, o.Help, "counter", labels, func() *Counter { return &Counter{} })}
}

// WithLabelValues returns the counter of these label values (in the order
// of the label names given to NewCounterVec).
func (v *CounterVec) WithLabelValues(values ...string) *Counter { return v.with(values) }

func (v *CounterVec) collect(emit func(family)) {
	cs := v.sortedChildren()
	if len(cs) == 0 {
		return
	}
	f := family{desc: &v.desc, samples: make([]sample, len(cs))}
	for i, c := range cs {
		f.samples[i] = sample{labels: c.labels, value: c.v.Value()}
	}
	emit(f)
}

// HistogramVec is a histogram per combination of label values.
type HistogramVec struct{ vec[histogram] }

// NewHistogramVec returns a histogram vector with the given label names.
func NewHistogramVec(o HistogramOpts, labels []string) *HistogramVec {
	upper := buckets(o)
	return &HistogramVec{newVec(o.Name, o.Help, "histogram", labels, func() *histogram { return newHistogram(upper) })}
}

// Observer is what a HistogramVec hands out: a histogram's Observe.
type Observer interface{ Observe(float64) }

// WithLabelValues returns the histogram of these label values (in the
// order of the label names given to NewHistogramVec).
func (v *HistogramVec) WithLabelValues(values ...string) Observer { return v.with(values) }

func (v *HistogramVec) collect(emit func(family)) {
	cs := v.sortedChildren()
	if len(cs) == 0 {
		return
	}
	f := family{desc: &v.desc}
	for _, c := range cs {
		f.samples = c.v.samples(f.samples, c.labels)
	}
	emit(f)
}
