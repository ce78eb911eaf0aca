package metrics

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// desc is what every instrument has: its name, HELP, TYPE and label
// names.
type desc struct {
	name, help, typ string
	labels          []string
}

func newDesc(name, help, typ string, labels []string) desc {
	if !validName(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	for _, l := range labels {
		if !validName(l) || strings.Contains(l, ":") || strings.HasPrefix(l, "__") || l == "le" || l == "quantile" {
			panic(fmt.Sprintf("metrics: %s: invalid label name %q", name, l))
		}
	}
	return desc{name: name, help: help, typ: typ, labels: slices.Clone(labels)}
}

func (d *desc) names() []string { return []string{d.name} }

// validName: [a-zA-Z_:][a-zA-Z0-9_:]*, the exposition format's names.
func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		letter := c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// family is one metric family as a scrape reports it.
type family struct {
	*desc
	samples []sample
}

// sample is one line: the family's name with suffix, the formatted
// label pairs, an optional extra label with a float value (le, quantile),
// and the value.
type sample struct {
	suffix     string
	labels     string
	extra      string
	extraValue float64
	value      float64
}

// Collector is something a Registry reports: one of this package's
// instruments or collectors. Only this package implements it.
type Collector interface {
	// names are the metric names the collector reports.
	names() []string
	// collect emits the collector's families, each with at least one
	// sample.
	collect(emit func(family))
}

// Registerer is what a subsystem registers its instruments on.
type Registerer interface {
	Register(Collector) error
	MustRegister(...Collector)
	Unregister(Collector) bool
}

// ErrDuplicate is returned by Register for a metric name already
// registered.
var ErrDuplicate = errors.New("metrics: duplicate metric name")

// Registry holds collectors and serves them as the Prometheus text
// exposition format (version 0.0.4). Safe for concurrent use.
type Registry struct {
	mu         sync.Mutex
	collectors []Collector
	taken      map[string]Collector
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{taken: map[string]Collector{}} }

// Register adds c; it fails, adding nothing, when one of c's names is
// already registered.
func (r *Registry) Register(c Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := c.names()
	for i, n := range names {
		if r.taken[n] != nil || slices.Contains(names[:i], n) {
			return fmt.Errorf("%w: %s", ErrDuplicate, n)
		}
	}
	for _, n := range names {
		r.taken[n] = c
	}
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers cs and panics on an error.
func (r *Registry) MustRegister(cs ...Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister removes c, reporting whether it was registered.
func (r *Registry) Unregister(c Collector) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := slices.Index(r.collectors, c)
	if i < 0 {
		return false
	}
	r.collectors = slices.Delete(r.collectors, i, i+1)
	for _, n := range c.names() {
		delete(r.taken, n)
	}
	return true
}

// WriteText writes every family in the text exposition format, sorted by
// name; families with no samples (a vector no label values were used on)
// are left out, as Prometheus's client leaves them out.
func (r *Registry) WriteText(w io.Writer) error {
	r.mu.Lock()
	cs := slices.Clone(r.collectors)
	r.mu.Unlock()
	var fams []family
	for _, c := range cs {
		c.collect(func(f family) { fams = append(fams, f) })
	}
	// sort.Slice (the same pdqsort) rather than slices.SortFunc: one sort shared
	// by every element type instead of a copy for this one (12-17 KB of the binary).
	sort.Slice(fams, func(i, j int) bool { return fams[i].name < fams[j].name })
	bw := bufio.NewWriter(w)
	var num []byte
	for _, f := range fams {
		bw.WriteString("# HELP ")
		bw.WriteString(f.name)
		bw.WriteByte(' ')
		writeEscaped(bw, f.help, false)
		bw.WriteString("\n# TYPE ")
		bw.WriteString(f.name)
		bw.WriteByte(' ')
		bw.WriteString(f.typ)
		bw.WriteByte('\n')
		for _, s := range f.samples {
			bw.WriteString(f.name)
			bw.WriteString(s.suffix)
			if s.labels != "" || s.extra != "" {
				bw.WriteByte('{')
				bw.WriteString(s.labels)
				if s.extra != "" {
					if s.labels != "" {
						bw.WriteByte(',')
					}
					bw.WriteString(s.extra)
					bw.WriteString(`="`)
					num = appendFloat(num[:0], s.extraValue)
					bw.Write(num)
					bw.WriteByte('"')
				}
				bw.WriteByte('}')
			}
			bw.WriteByte(' ')
			num = appendFloat(num[:0], s.value)
			bw.Write(num)
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

// ContentType is the text exposition format's media type, as Prometheus's
// client sends it.
const ContentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

// ServeHTTP serves GET /metrics: the text format, gzipped when the client
// accepts gzip.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Add("Vary", "Accept")
	h.Add("Vary", "Accept-Encoding")
	out := io.Writer(w)
	if acceptsGzip(req.Header.Values("Accept-Encoding")) {
		h.Set("Content-Encoding", "gzip")
		gz := gzip.NewWriter(w)
		defer func() { _ = gz.Close() }() // an error here is the client going away
		out = gz
	}
	_ = r.WriteText(out) // an error here is the client going away
}

// acceptsGzip reports whether an Accept-Encoding lists gzip with a
// non-zero quality.
func acceptsGzip(values []string) bool {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			if !strings.EqualFold(strings.TrimSpace(name), "gzip") {
				continue
			}
			q, ok := strings.CutPrefix(strings.TrimSpace(params), "q=")
			if !ok {
				return true
			}
			if f, err := strconv.ParseFloat(q, 64); err != nil || f > 0 {
				return true
			}
		}
	}
	return false
}

// appendFloat formats as Prometheus's client does: shortest 'g', with
// +Inf, -Inf and NaN spelled out.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// writeEscaped writes s escaped for a HELP line (backslash, newline) or,
// with quote, for a label value (also the double quote). Invalid UTF-8 is
// replaced, as the format requires UTF-8.
func writeEscaped(w io.StringWriter, s string, quote bool) {
	s = strings.ToValidUTF8(s, "\uFFFD")
	start := 0
	for i := 0; i < len(s); i++ {
		var esc string
		switch s[i] {
		case '\\':
			esc = `\\`
		case '\n':
			esc = `\n`
		case '"':
			if !quote {
				continue
			}
			esc = `\"`
		default:
			continue
		}
		_, _ = w.WriteString(s[start:i])
		_, _ = w.WriteString(esc)
		start = i + 1
	}
	_, _ = w.WriteString(s[start:])
}
