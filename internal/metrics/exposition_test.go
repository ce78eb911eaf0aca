package metrics

import (
	"bytes"
	"compress/gzip"
	"io"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/golden"
)

// fixture is a registry with one of each instrument, used so that its
// exposition covers every rule of the format this package writes: HELP
// escaping, label pairs sorted by name, children sorted by label values,
// label value escaping (and invalid UTF-8), histogram buckets with le last,
// float formatting (integers, exponents, -1, +Inf, NaN), and vectors no
// value was used on left out.
func fixture() *Registry {
	r := NewRegistry()
	c := NewCounter(CounterOpts{Name: "a_total", Help: "help with \\ backslash\nand newline and \"quotes\""})
	g := NewGauge(GaugeOpts{Name: "b_gauge", Help: "a gauge"})
	inf := NewGauge(GaugeOpts{Name: "b_inf", Help: "an infinite gauge"})
	nan := NewGauge(GaugeOpts{Name: "b_nan", Help: "not a number"})
	v := NewCounterVec(CounterOpts{Name: "c_total", Help: "labels given out of order"}, []string{"zeta", "alpha", "mid"})
	h := NewHistogramVec(HistogramOpts{Name: "d_seconds", Help: "a histogram vector", Buckets: ExponentialBuckets(0.0001, 4, 10)}, []string{"method", "route", "code"})
	h1 := NewHistogram(HistogramOpts{Name: "e_seconds", Help: "a histogram", Buckets: []float64{0.001, 0.01, 0.1, 1, 5, 15, 30, 60, 300}})
	empty := NewCounterVec(CounterOpts{Name: "f_total", Help: "never used: left out"}, []string{"x"})
	r.MustRegister(h1, empty, c, g, inf, nan, v, h)

	for _, f := range []float64{1, 2.5, 1e-9, 123456789, 0.1} {
		c.Add(f)
	}
	g.Set(-1)
	g.Add(math.Pi)
	inf.Set(math.Inf(1))
	nan.Set(math.NaN())
	vals := [][]string{{"z", "a", "m"}, {"a\\b", "q\"uote", "new\nline"}, {"", "", ""}, {"z", "a", "l"}, {"é", "b", "c"}, {"bad\xffutf8", "b", "c"}}
	for i, lv := range vals {
		for range i + 1 {
			v.WithLabelValues(lv...).Inc()
		}
	}
	for i, o := range []float64{0, 0.0001, 0.00011, 0.0004, 0.5, 3, 1e9, -1, 0.0016} {
		l := []string{"GET", "/r", "200"}
		if i%2 == 0 {
			l = []string{"POST", "/a", "201"}
		}
		h.WithLabelValues(l...).Observe(o)
		h1.Observe(o * 100)
	}
	return r
}

// TestExposition pins the text format. The golden file was checked to be
// byte for byte what Prometheus's client_golang v1.25.0 (promhttp), which
// this package replaced, wrote for the same instruments and observations
// (given the invalid UTF-8 value already replaced: that client panicked on
// it).
func TestExposition(t *testing.T) {
	var b bytes.Buffer
	if err := fixture().WriteText(&b); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "testdata/exposition.golden", b.Bytes())
}

// TestServeHTTP: the content type Prometheus's client sent, and gzip when
// (and only when) the scraper accepts it.
func TestServeHTTP(t *testing.T) {
	r := fixture()
	var want bytes.Buffer
	if err := r.WriteText(&want); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		accept string
		gzip   bool
	}{
		{"", false},
		{"gzip", true},
		{"deflate, gzip;q=0.5", true},
		{"gzip;q=0", false},
		{"identity", false},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tc.accept != "" {
			req.Header.Set("Accept-Encoding", tc.accept)
		}
		r.ServeHTTP(rec, req)
		if ct := rec.Header().Get("Content-Type"); ct != ContentType {
			t.Errorf("%q: Content-Type %q", tc.accept, ct)
		}
		body := rec.Body.Bytes()
		if got := rec.Header().Get("Content-Encoding") == "gzip"; got != tc.gzip {
			t.Fatalf("Accept-Encoding %q: gzip %v, want %v", tc.accept, got, tc.gzip)
		}
		if tc.gzip {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(body, want.Bytes()) {
			t.Errorf("Accept-Encoding %q: body differs from WriteText", tc.accept)
		}
	}
}

// TestRuntimeCollectors: the go_* and process_* families Prometheus's Go
// and process collectors reported, with their types; the values are live.
func TestRuntimeCollectors(t *testing.T) {
	r := NewRegistry()
	r.MustRegister(NewGoCollector(), NewProcessCollector())
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, b.String())
	var got strings.Builder
	for _, f := range fams {
		got.WriteString(f.name + " " + f.typ + " " + f.help + "\n")
	}
	golden.Check(t, "testdata/runtime.golden", []byte(got.String()))
	for _, name := range []string{"go_goroutines", "go_threads", "go_memstats_sys_bytes", "process_resident_memory_bytes", "process_open_fds", "process_start_time_seconds"} {
		if v := fams.value(name); !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
}

// TestConcurrent counts from many goroutines while scrapes run (run it
// with -race): no count is lost and every scrape parses, with each
// histogram's count equal to its +Inf bucket.
func TestConcurrent(t *testing.T) {
	r := NewRegistry()
	c := NewCounter(CounterOpts{Name: "c_total", Help: "c"})
	g := NewGauge(GaugeOpts{Name: "g", Help: "g"})
	v := NewCounterVec(CounterOpts{Name: "v_total", Help: "v"}, []string{"k"})
	h := NewHistogramVec(HistogramOpts{Name: "h_seconds", Help: "h", Buckets: ExponentialBuckets(0.01, 2, 5)}, []string{"k"})
	r.MustRegister(c, g, v, h)
	const workers, n = 8, 2000
	keys := []string{"a", "b", "c"}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	scraped := make(chan error, 1)
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var b strings.Builder
			if err := r.WriteText(&b); err != nil {
				scraped <- err
				return
			}
			parse(t, b.String())
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for i := range n {
				k := keys[(w+i)%len(keys)]
				c.Inc()
				g.Inc()
				g.Dec()
				v.WithLabelValues(k).Add(2)
				h.WithLabelValues(k).Observe(float64(i%7) / 100)
			}
		})
	}
	wg.Wait()
	close(stop)
	if err := <-scraped; err != nil {
		t.Fatal(err)
	}
	if got := c.Value(); got != workers*n {
		t.Errorf("counter %v, want %v", got, workers*n)
	}
	if got := g.Value(); got != 0 {
		t.Errorf("gauge %v, want 0", got)
	}
	var total float64
	for _, k := range keys {
		total += v.WithLabelValues(k).Value()
	}
	if total != 2*workers*n {
		t.Errorf("vector total %v, want %v", total, 2*workers*n)
	}
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	var count float64
	for _, s := range parse(t, b.String()).family("h_seconds").samples {
		if s.name == "h_seconds_count" {
			count += s.value
		}
	}
	if count != workers*n {
		t.Errorf("histogram count %v, want %v", count, workers*n)
	}
}

// TestRegister: a name registers once; Unregister frees it.
func TestRegister(t *testing.T) {
	r := NewRegistry()
	a := NewCounter(CounterOpts{Name: "x_total", Help: "x"})
	if err := r.Register(a); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(NewCounterVec(CounterOpts{Name: "x_total", Help: "x"}, []string{"k"})); err == nil {
		t.Error("a second x_total registered")
	}
	if err := r.Register(NewGoCollector()); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(NewGoCollector()); err == nil {
		t.Error("a second Go collector registered")
	}
	if !r.Unregister(a) || r.Unregister(a) {
		t.Error("Unregister: want true once, then false")
	}
	if err := r.Register(NewCounter(CounterOpts{Name: "x_total", Help: "x"})); err != nil {
		t.Errorf("x_total after Unregister: %v", err)
	}
}

// TestInvalid: invalid names, labels and buckets are programming errors
// and panic when the instrument is made, not at the first scrape.
func TestInvalid(t *testing.T) {
	for name, f := range map[string]func(){
		"metric name":        func() { NewCounter(CounterOpts{Name: "a-b"}) },
		"empty name":         func() { NewGauge(GaugeOpts{}) },
		"label name":         func() { NewCounterVec(CounterOpts{Name: "a"}, []string{"a b"}) },
		"reserved label":     func() { NewHistogramVec(HistogramOpts{Name: "a"}, []string{"le"}) },
		"decreasing buckets": func() { NewHistogram(HistogramOpts{Name: "a", Buckets: []float64{1, 0.5}}) },
		"label count":        func() { NewCounterVec(CounterOpts{Name: "a"}, []string{"k"}).WithLabelValues("1", "2") },
		"negative add":       func() { NewCounter(CounterOpts{Name: "a"}).Add(-1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// FuzzLabelValue: any label value comes out as one line that unescapes to
// the value (invalid UTF-8 replaced).
func FuzzLabelValue(f *testing.F) {
	for _, s := range []string{"", "plain", `a\b`, "q\"uote", "new\nline", "\\n", "bad\xff", `\"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := NewRegistry()
		v := NewCounterVec(CounterOpts{Name: "f_total", Help: s}, []string{"k"})
		r.MustRegister(v)
		v.WithLabelValues(s).Inc()
		var b strings.Builder
		if err := r.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		fams := parse(t, b.String())
		fam := fams.family("f_total")
		want := strings.ToValidUTF8(s, "\uFFFD")
		if fam == nil || len(fam.samples) != 1 || fam.samples[0].labels["k"] != want || fam.help != want {
			t.Fatalf("value %q: exposition\n%s", s, b.String())
		}
	})
}

// The test's own parser of the text format: strict about what this
// package writes.

type parsedSample struct {
	name   string
	labels map[string]string
	value  float64
}

type parsedFamily struct {
	name, typ, help string
	samples         []parsedSample
}

type parsed []*parsedFamily

func (p parsed) family(name string) *parsedFamily {
	for _, f := range p {
		if f.name == name {
			return f
		}
	}
	return nil
}

func (p parsed) value(name string) float64 {
	if f := p.family(name); f != nil && len(f.samples) == 1 {
		return f.samples[0].value
	}
	return math.NaN()
}

// parse reads an exposition: every family a HELP then a TYPE line then its
// samples, names sorted, each sample's name the family's (with the suffix
// its type allows), histogram buckets cumulative and ending in +Inf equal
// to the count.
func parse(t testing.TB, text string) parsed {
	t.Helper()
	if !strings.HasSuffix(text, "\n") && text != "" {
		t.Fatalf("exposition does not end in a newline: %q", text)
	}
	var fams parsed
	var cur *parsedFamily
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if !utf8.ValidString(line) {
			t.Fatalf("invalid UTF-8: %q", line)
		}
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "# TYPE "+name+" ") {
				t.Fatalf("HELP %s not followed by its TYPE", name)
			}
			typ := strings.TrimPrefix(lines[i+1], "# TYPE "+name+" ")
			i++
			if cur != nil && name <= cur.name {
				t.Fatalf("families not sorted: %s after %s", name, cur.name)
			}
			cur = &parsedFamily{name: name, typ: typ, help: unescape(t, help, false)}
			fams = append(fams, cur)
			continue
		}
		if cur == nil {
			t.Fatalf("sample before any family: %q", line)
		}
		cur.samples = append(cur.samples, parseSample(t, line))
	}
	for _, f := range fams {
		checkFamily(t, f)
	}
	return fams
}

func parseSample(t testing.TB, line string) parsedSample {
	t.Helper()
	s := parsedSample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		t.Fatalf("bad sample line %q", line)
	}
	s.name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			eq := strings.Index(line, `="`)
			if eq <= 0 {
				t.Fatalf("bad labels in %q", line)
			}
			name := line[:eq]
			line = line[eq+2:]
			end := -1
			for j := 0; j < len(line); j++ {
				if line[j] == '\\' {
					j++
					continue
				}
				if line[j] == '"' {
					end = j
					break
				}
			}
			if end < 0 {
				t.Fatalf("unterminated label value in %q", line)
			}
			if _, dup := s.labels[name]; dup {
				t.Fatalf("label %s twice", name)
			}
			s.labels[name] = unescape(t, line[:end], true)
			line = line[end+1:]
			if strings.HasPrefix(line, ",") {
				line = line[1:]
				continue
			}
			if !strings.HasPrefix(line, "}") {
				t.Fatalf("bad label list end %q", line)
			}
			line = line[1:]
			break
		}
	}
	v, ok := strings.CutPrefix(line, " ")
	if !ok {
		t.Fatalf("no value in %q", line)
	}
	s.value = parseFloat(t, v)
	return s
}

func parseFloat(t testing.TB, v string) float64 {
	t.Helper()
	switch v {
	case "+Inf":
		return math.Inf(1)
	case "-Inf":
		return math.Inf(-1)
	case "NaN":
		return math.NaN()
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("bad value %q", v)
	}
	return f
}

func unescape(t testing.TB, s string, quoted bool) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '\n' || quoted && c == '"' {
			t.Fatalf("unescaped %q in %q", c, s)
		}
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i == len(s) {
			t.Fatalf("trailing backslash in %q", s)
		}
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case '"':
			if !quoted {
				t.Fatalf(`\" in a HELP: %q`, s)
			}
			b.WriteByte('"')
		default:
			t.Fatalf("bad escape in %q", s)
		}
	}
	return b.String()
}

// checkFamily checks each sample's name against the family's type, and a
// histogram's buckets.
func checkFamily(t testing.TB, f *parsedFamily) {
	t.Helper()
	suffixes := map[string][]string{
		"counter": {""}, "gauge": {""}, "summary": {"", "_sum", "_count"}, "histogram": {"_bucket", "_sum", "_count"},
	}[f.typ]
	if suffixes == nil {
		t.Fatalf("%s: unknown type %q", f.name, f.typ)
	}
	if len(f.samples) == 0 {
		t.Fatalf("%s: a family without samples", f.name)
	}
	prevLE, cum := math.Inf(-1), -1.0
	for _, s := range f.samples {
		ok := false
		for _, suf := range suffixes {
			ok = ok || s.name == f.name+suf
		}
		if !ok {
			t.Fatalf("%s: sample %s", f.name, s.name)
		}
		if f.typ != "histogram" {
			continue
		}
		switch s.name {
		case f.name + "_bucket":
			le := parseFloat(t, s.labels["le"])
			if le <= prevLE || s.value < cum {
				t.Fatalf("%s: buckets not increasing at le=%v", f.name, le)
			}
			prevLE, cum = le, s.value
		case f.name + "_count":
			if !math.IsInf(prevLE, 1) || s.value != cum {
				t.Fatalf("%s: count %v, +Inf bucket %v (last le %v)", f.name, s.value, cum, prevLE)
			}
			prevLE, cum = math.Inf(-1), -1
		}
	}
}
