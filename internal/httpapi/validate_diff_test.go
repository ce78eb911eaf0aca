package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The differential test: the same requests go to the daemon as it serves
// the operations (the adapter, operation.go, and the validator,
// validate.go) and to the same operations served by huma (humaAPI), the
// oracle, which the API was served with until the adapter replaced it at
// run time. Every answer must be the same: status, media type, headers that
// matter, and body, with a problem's errors[] compared as a set (huma lists
// some in map order). The requests are derived from the OpenAPI document:
// for every parameter and every property of every request body, values at
// and beyond each constraint it declares, of every JSON type; plus broken
// bodies, media types, sizes and query strings.

// diffPair is the daemon served both ways, with the same configuration and
// engines in the same state.
type diffPair struct {
	ours, oracle http.Handler
}

const diffMaxBody = 512 // small, to reach the limits cheaply

func newDiffPair(t testing.TB) *diffPair {
	cfg := diffConfig()
	cfg.Token, cfg.Version, cfg.Started = testToken, "diff", time.Unix(0, 0)
	ours := newServer(cfg, newFakeEngine(), nil, nil)
	oracle := newServer(cfg, newFakeEngine(), nil, nil)
	oracle.mux = http.NewServeMux()
	humaAPI(oracle, oracle.mux)
	return &diffPair{ours: ours, oracle: oracle}
}

// diffConfig is the limits of both servers of the differential test.
func diffConfig() Config {
	return Config{MaxBodyBytes: diffMaxBody, MaxMessageBytes: 2 * diffMaxBody, MaxFileBytes: 3 * diffMaxBody, MaxArchiveBytes: 4 * diffMaxBody}
}

// diffRequest is one request; contentLength -1 sends the body chunked.
type diffRequest struct {
	method, path, query string
	header              map[string]string
	body                []byte
	chunked             bool
}

func (d diffRequest) String() string {
	b := string(d.body)
	if len(b) > 200 {
		b = b[:200] + "…"
	}
	return fmt.Sprintf("%s %s?%s %v chunked=%v body=%q", d.method, d.path, d.query, d.header, d.chunked, b)
}

func (d diffRequest) build() *http.Request {
	var rd io.Reader
	if d.body != nil {
		rd = bytes.NewReader(d.body)
	}
	target := "http://127.0.0.1" + d.path
	if d.query != "" {
		target += "?" + d.query
	}
	r := httptest.NewRequest(d.method, target, rd)
	r.Header.Set("Authorization", "Bearer "+testToken)
	r.Header.Set("X-Request-Id", "diff")
	if d.body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range d.header {
		if v == "" {
			r.Header.Del(k)
		} else {
			r.Header.Set(k, v)
		}
	}
	if d.chunked {
		r.ContentLength = -1
	}
	return r
}

// answer is what a client can tell of a response.
type answer struct {
	Status      int
	ContentType string
	Location    string
	RetryAfter  string
	Body        any
}

var uptimeRE = regexp.MustCompile(`"uptime_ms":[0-9]+`)

func serveDiff(h http.Handler, d diffRequest) answer {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, d.build())
	a := answer{Status: w.Code, ContentType: w.Header().Get("Content-Type"),
		Location: w.Header().Get("Location"), RetryAfter: w.Header().Get("Retry-After")}
	raw := uptimeRE.ReplaceAll(w.Body.Bytes(), []byte(`"uptime_ms":0`))
	var v any
	if json.Unmarshal(raw, &v) != nil {
		a.Body = string(raw)
		return a
	}
	if m, ok := v.(map[string]any); ok {
		if errs, ok := m["errors"].([]any); ok {
			// A set: huma lists unknown query parameters and properties in
			// map order.
			slices.SortFunc(errs, func(x, y any) int {
				bx, _ := json.Marshal(x)
				by, _ := json.Marshal(y)
				return bytes.Compare(bx, by)
			})
		}
	}
	a.Body = v
	return a
}

// check sends d both ways and reports a difference.
func (p *diffPair) check(t testing.TB, d diffRequest) (answer, bool) {
	t.Helper()
	ours, oracle := serveDiff(p.ours, d), serveDiff(p.oracle, d)
	bo, _ := json.Marshal(ours)
	bh, _ := json.Marshal(oracle)
	if !bytes.Equal(bo, bh) {
		t.Errorf("%s\n  ours: %s\n  huma: %s", d, bo, bh)
		return ours, false
	}
	return ours, true
}

// foldCollision reports whether a JSON object in v has two keys equal under
// case folding: huma then picks one in map order, so its answer is not a
// function of the request.
func foldCollision(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k, x := range v {
			for _, o := range keys {
				if strings.EqualFold(o, k) {
					return true
				}
			}
			keys = append(keys, k)
			if foldCollision(x) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if foldCollision(x) {
				return true
			}
		}
	}
	return false
}

// concrete fills an operation path's parameters with valid values.
func concrete(path string) string {
	return strings.NewReplacer("{id}", "s1", "{name}", "mock", "{pid}", "p1", "{qid}", "q1").Replace(path)
}

// validValue is a value that s accepts, as small as it can be.
func validValue(c *contract, s *schema, depth int) any {
	s = c.resolve(s)
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	switch s.typ {
	case "boolean":
		return true
	case "integer", "number":
		if s.Minimum != nil {
			return *s.Minimum
		}
		return 0.0
	case "string":
		n := 1
		if s.MinLength != nil {
			n = max(*s.MinLength, 1)
		}
		return strings.Repeat("a", n)
	case "array":
		n := 0
		if s.MinItems != nil {
			n = *s.MinItems
		}
		arr := []any{}
		for range n {
			arr = append(arr, validValue(c, s.Items, depth+1))
		}
		return arr
	case "object":
		m := map[string]any{}
		for _, k := range s.props {
			if s.required[k] && depth < 4 {
				m[k] = validValue(c, s.Properties[k], depth+1)
			}
		}
		return m
	}
	return "preset"
}

// mutations are values at and beyond what s declares, and of other types.
func mutations(c *contract, s *schema) []any {
	s = c.resolve(s)
	out := []any{nil, true, false, 0.0, 1.5, -1.0, 1e20, "x", "", []any{}, []any{"x"}, map[string]any{}, map[string]any{"x": "y"}}
	if s.MinLength != nil {
		out = append(out, strings.Repeat("é", *s.MinLength), strings.Repeat("é", max(*s.MinLength-1, 0)))
	}
	if s.MaxLength != nil && *s.MaxLength <= 4096 {
		out = append(out, strings.Repeat("é", *s.MaxLength), strings.Repeat("é", *s.MaxLength+1), strings.Repeat("a", *s.MaxLength+1))
	}
	if s.Minimum != nil {
		out = append(out, *s.Minimum, *s.Minimum-1, *s.Minimum-0.5)
	}
	if s.Maximum != nil {
		out = append(out, *s.Maximum, *s.Maximum+1)
	}
	for _, e := range s.Enum {
		out = append(out, e, strings.ToUpper(e.(string)), e.(string)+" ")
	}
	if s.Pattern != "" {
		out = append(out, "-a", "a-", "a b", "a_b", "é")
	}
	if s.typ == "array" && s.Items != nil {
		item := validValue(c, s.Items, 1)
		for _, n := range []int{0, 1, 2} {
			out = append(out, slices.Repeat([]any{item}, n))
		}
		if s.MaxItems != nil && *s.MaxItems <= 64 {
			out = append(out, slices.Repeat([]any{item}, *s.MaxItems), slices.Repeat([]any{item}, *s.MaxItems+1))
		}
		for _, m := range mutations(c, s.Items) {
			out = append(out, []any{m})
		}
	}
	if s.addl != nil {
		for _, m := range []any{nil, 1.0, "v", true, []any{}} {
			out = append(out, map[string]any{"K": m})
		}
	}
	return out
}

// bodyCases derives request bodies from the body schema s: the valid
// minimum, then each property set to each of its mutations, removed, and
// named in another case; an unknown property; and for nested objects, the
// same one level down.
func bodyCases(c *contract, s *schema) [][]byte {
	base, _ := validValue(c, s, 0).(map[string]any)
	var out [][]byte
	add := func(v any) {
		b, err := json.Marshal(v)
		if err == nil {
			out = append(out, b)
		}
	}
	add(base)
	s = c.resolve(s)
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for x, y := range base {
			m[x] = y
		}
		m[k] = v
		return m
	}
	for _, k := range s.props {
		ps := c.resolve(s.Properties[k])
		for _, m := range mutations(c, ps) {
			add(with(k, m))
		}
		without := with(k, nil)
		delete(without, k)
		add(without)
		upper := with(strings.ToUpper(k), validValue(c, ps, 1))
		delete(upper, k)
		add(upper)
		if ps.typ == "object" && len(ps.props) > 0 {
			for _, sub := range bodyCases(c, ps) {
				add(with(k, json.RawMessage(sub)))
			}
		}
		if ps.typ == "array" && ps.Items != nil && c.resolve(ps.Items).typ == "object" {
			for _, sub := range bodyCases(c, ps.Items) {
				add(with(k, []any{json.RawMessage(sub)}))
			}
		}
	}
	add(with("unknown_field", "x"))
	add(with("zz", 1.0))
	return out
}

// rawBodies are bodies that are not valid JSON documents of the schema's
// kind.
var rawBodies = []string{
	``, ` `, `{`, `}`, `[]`, `null`, `"x"`, `1`, `{"a":1}{}`, `{} x`, `{"a":}`, `{"a"`,
	"{\"text\":\"\xff\"}", `{"text":"\ud800"}`, `{"text":"\ud800\udc00"}`, `{"text":"\u0000"}`,
	`{"timeout_ms":1e400}`, `{"timeout_ms":9223372036854775808}`, `{"timeout_ms":-0}`, `{"argv":["a"],"argv":"b"}`,
	"\xef\xbb\xbf{}", `{"Text":"a","text":"b"}`,
}

var contentTypes = []string{
	"", "application/json", "application/json; charset=utf-8", "Application/JSON", "application/json ;x",
	"application/merge-patch+json", "application/a+b+json", "text/plain", "text/plain+json", "application/jsonx",
	"application/json+", "application/+json", "multipart/form-data",
}

// queryCases derives query strings from the operation's parameters.
func queryCases(c *contract, sop *specOperation) []string {
	out := []string{"", "unknown=1", "a=1&b=2", "%zz=1", "a;b=1", "&", "=", "x"}
	for _, p := range sop.Parameters {
		if p.In != "query" {
			continue
		}
		name := p.Name
		out = append(out, name, name+"=", name+"=%zz", name+"=1&"+name+"=x", name+"=1&other=2")
		for _, m := range mutations(c, p.Schema) {
			switch m := m.(type) {
			case string:
				out = append(out, name+"="+urlEscape(m))
			case float64:
				out = append(out, name+"="+strconv.FormatFloat(m, 'f', -1, 64))
			case bool:
				out = append(out, name+"="+strconv.FormatBool(m))
			}
		}
		out = append(out, name+"=true", name+"=T", name+"=maybe", name+"=99999999999999999999", name+"=0x10", name+"=+5")
	}
	return out
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, r := range []byte(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteByte(r)
		} else {
			fmt.Fprintf(&b, "%%%02X", r)
		}
	}
	return b.String()
}

// diffCases are the requests of the differential test, for every operation
// of the table.
func diffCases(t testing.TB) []diffRequest {
	c := theContract()
	var out []diffRequest
	for _, o := range operations() {
		sp := o.spec()
		sop, err := c.operation(sp.Method, sp.Path)
		if err != nil {
			t.Fatal(err)
		}
		path := concrete(sp.Path)
		req := func(d diffRequest) { d.method, d.path = sp.Method, path; out = append(out, d) }
		for _, q := range queryCases(c, sop) {
			req(diffRequest{query: q})
		}
		for _, p := range sop.Parameters {
			switch p.In {
			case "path":
				for _, m := range mutations(c, p.Schema) {
					if s, ok := m.(string); ok && s != "" && utf8.ValidString(s) {
						out = append(out, diffRequest{method: sp.Method,
							path: strings.Replace(sp.Path, "{"+p.Name+"}", urlEscape(s), 1)})
					}
				}
			case "header":
				for _, v := range []string{"0", "1", "-1", "x", strings.Repeat("9", 32), strings.Repeat("9", 33), "9223372036854775808"} {
					req(diffRequest{header: map[string]string{p.Name: v}})
					req(diffRequest{header: map[string]string{p.Name: v}, query: "after=5"})
				}
			}
		}
		if sop.RequestBody == nil {
			req(diffRequest{body: []byte(`{}`)})
			continue
		}
		limit := int(newServer(diffConfig(), nil, nil, nil).bodyLimit(sp.Limit)) - 1
		if sop.RequestBody.Content["application/json"].Schema == nil {
			// A raw body: its media type and others, empty, and sizes
			// about its limit.
			for mt := range sop.RequestBody.Content {
				for _, ct := range append([]string{mt, strings.ToUpper(mt) + "; x=1", mt + "x"}, contentTypes...) {
					req(diffRequest{body: []byte("raw\x00\xffbytes"), header: map[string]string{"Content-Type": ct}})
					req(diffRequest{body: []byte{}, header: map[string]string{"Content-Type": ct}})
					req(diffRequest{body: []byte("raw"), header: map[string]string{"Content-Type": ct}, chunked: true})
				}
				for _, n := range []int{limit - 1, limit, limit + 1, 4 * limit} {
					req(diffRequest{body: bytes.Repeat([]byte{0}, n), header: map[string]string{"Content-Type": mt}})
					req(diffRequest{body: bytes.Repeat([]byte{0}, n), header: map[string]string{"Content-Type": mt}, chunked: true})
				}
			}
			req(diffRequest{})
			continue
		}
		bs := sop.RequestBody.Content["application/json"].Schema
		for _, b := range bodyCases(c, bs) {
			req(diffRequest{body: b})
			req(diffRequest{body: b, query: "unknown=1"})
		}
		for _, b := range rawBodies {
			req(diffRequest{body: []byte(b)})
			req(diffRequest{body: []byte(b), chunked: true})
		}
		valid, _ := json.Marshal(validValue(c, bs, 0))
		for _, ct := range contentTypes {
			req(diffRequest{body: valid, header: map[string]string{"Content-Type": ct}})
			req(diffRequest{body: []byte{}, header: map[string]string{"Content-Type": ct}})
			req(diffRequest{body: valid, header: map[string]string{"Content-Type": ct}, chunked: true})
		}
		req(diffRequest{})
		for _, n := range []int{limit - 1, limit, limit + 1, limit + 2, 4 * limit} {
			pad := max(n-len(`{"zz":""}`), 0)
			req(diffRequest{body: []byte(`{"zz":"` + strings.Repeat("a", pad) + `"}`)})
			req(diffRequest{body: []byte(`{"zz":"` + strings.Repeat("a", pad) + `"}`), chunked: true})
		}
	}
	// Requests the fake engine accepts, and those that then reach a
	// session: created in the same order both ways, the sessions have the
	// same IDs.
	for _, b := range []string{`{"agent":"mock"}`, `{"agent":"mock","mode":"x","metadata":{"k":"v"},"permission_mode":"plan"}`,
		`{"AGENT":"mock"}`, `{"agent":"mock","policy":"x","policy_source":{"name":"a","text":"b"}}`} {
		out = append(out, diffRequest{method: "POST", path: "/v1/sessions", body: []byte(b)})
	}
	for _, b := range []string{`{"text":"hi"}`, `{"content":[{"type":"text","text":"hi"}]}`, `{"content":[{"type":"image"}]}`, `{"text":"hi","content":[]}`} {
		out = append(out, diffRequest{method: "POST", path: "/v1/sessions/ses_0001/messages", body: []byte(b)})
	}
	for _, q := range []string{"limit=1", "after=1&limit=1000", "after=-1", "limit=1001"} {
		out = append(out, diffRequest{method: "GET", path: "/v1/sessions/ses_0001/events", query: q})
	}
	for _, b := range []string{`{"model":"m"}`, `{"mode":"` + strings.Repeat("é", 65) + `"}`} {
		out = append(out, diffRequest{method: "PATCH", path: "/v1/sessions/ses_0002", body: []byte(b)})
	}
	return out
}

// TestValidatorMatchesHuma is the differential test.
func TestValidatorMatchesHuma(t *testing.T) {
	p := newDiffPair(t)
	cases := diffCases(t)
	statuses := map[int]int{}
	failed := 0
	for _, d := range cases {
		a, ok := p.check(t, d)
		statuses[a.Status]++
		if !ok {
			if failed++; failed > 20 {
				t.Fatal("too many differences")
			}
		}
	}
	t.Logf("%d requests; answers by status: %v", len(cases), statuses)
	// A test that cannot fail: if nothing were refused or nothing accepted,
	// the requests would not reach the validator.
	for _, st := range []int{200, 201, 400, 413, 415, 422} {
		if statuses[st] == 0 {
			t.Errorf("no request answered %d: the cases miss a kind", st)
		}
	}
}

// FuzzValidatorMatchesHuma sends arbitrary queries and bodies to an
// operation chosen by index, both ways.
func FuzzValidatorMatchesHuma(f *testing.F) {
	for i, o := range operations() {
		if o.spec().Method == http.MethodPost || o.spec().Method == http.MethodPut || o.spec().Method == http.MethodPatch {
			f.Add(uint8(i), "", []byte(`{}`), "application/json")
		}
	}
	f.Add(uint8(3), "limit=5", []byte(`{"agent":"mock","mcp_servers":[{"name":"a-b"}]}`), "application/json")
	f.Add(uint8(0), "status=idle&limit=1000", []byte(nil), "")
	p := newDiffPair(f)
	f.Fuzz(func(t *testing.T, i uint8, query string, body []byte, ct string) {
		o := operations()[int(i)%len(operations())].spec()
		var v any
		if json.Unmarshal(body, &v) == nil && foldCollision(v) {
			t.Skip("keys equal under case folding: huma picks one in map order")
		}
		if strings.ContainsFunc(query, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '#' }) ||
			strings.ContainsFunc(ct, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Skip("not a request line or header")
		}
		d := diffRequest{method: o.Method, path: concrete(o.Path), query: query, body: body,
			header: map[string]string{"Content-Type": ct}}
		p.check(t, d)
	})
}
