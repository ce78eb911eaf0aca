package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The operations of the API are defined once, in the table `operations`
// (routes.go): method, path, documentation, limits, input and output Go
// types, handler. The daemon serves each with the adapter below; the
// OpenAPI document (api/openapi.json) is generated from the same table by a
// test that hands it to huma (openapi_gen_test.go), so the document cannot
// drift from the routes, and the validator enforces what the document
// declares (validate.go).
//
// An input type is a struct of parameters (fields tagged path:, query: or
// header:, also in embedded structs) and an optional Body (JSON) or RawBody
// ([]byte of the media type its contentType tag names); an output type is
// a struct with an optional Body and header fields (header:"Location"), or
// streamOutput. A handler is a method of *server.

// bodyLimit names the configured limit that bounds an operation's body.
type bodyLimit uint8

const (
	limitBody    bodyLimit = iota // Config.MaxBodyBytes
	limitMessage                  // Config.MaxMessageBytes
	limitFile                     // Config.MaxFileBytes (a file's raw content)
	limitArchive                  // Config.MaxArchiveBytes (a tar stream)
)

// streamKind names the documented Server-Sent Events answer of a streaming
// operation.
type streamKind uint8

const (
	notStream     streamKind = iota
	streamEvents             // a session's events
	streamExec               // an execution's start, output and result
	streamProcess            // a process's output and exit
	streamFile               // a file's bytes, application/octet-stream
	streamArchive            // a tar stream, application/x-tar
	streamChanges            // a workspace's changes
)

// defaultBodyReadTimeout bounds the reading of a request body when the
// operation sets no other bound.
const defaultBodyReadTimeout = 5 * time.Second

// opSpec is what an operation is, apart from its Go types.
type opSpec struct {
	ID, Method, Path, Tag string
	Summary, Description  string
	// Status is the answer's status on success; 0 means 200 with a body,
	// 204 without.
	Status int
	// Limit bounds the request body (operations whose input has a Body).
	Limit bodyLimit
	// ReadTimeout bounds the reading of the request body; 0 means
	// defaultBodyReadTimeout.
	ReadTimeout time.Duration
	// Errors are the statuses the operation documents besides the common
	// ones.
	Errors []int
	// Public operations need no token.
	Public bool
	Stream streamKind
}

// route is an operation of the table, whatever its types.
type route interface {
	spec() *opSpec
	handler(s *server) http.Handler
}

// op is an operation with its input type I, output type O and handler.
type op[I, O any] struct {
	opSpec
	h func(*server, context.Context, *I) (*O, error)

	once sync.Once
	plan *inputPlan
	err  error
}

func (o *op[I, O]) spec() *opSpec { return &o.opSpec }

// streamOutput is the output of an operation that answers with a stream:
// Body writes the whole answer, headers included.
type streamOutput struct {
	Body func(w http.ResponseWriter)
}

// checker is an input that checks what its schema cannot express (one of
// two fields, a policy's shape), after the schema's validation; it may set
// derived fields.
type checker interface {
	check() []error
}

// paramField is one parameter of an input type.
type paramField struct {
	index    []int
	name, in string // in: path, query or header
	kind     reflect.Kind
	def      string // the default tag
	required bool
	schema   *schema
}

// inputPlan is how the adapter fills an input type.
type inputPlan struct {
	params []paramField
	query  map[string]bool // the query parameters known
	// body is the index of the Body field, nil without one.
	body []int
	// raw is the index of the RawBody field, nil without one; rawType is
	// the media type it takes.
	raw          []int
	rawType      string
	bodyRequired bool
	bodySchema   *schema
	contract     *contract
}

// bodyLimit is the limit of the request bodies an operation takes, plus one:
// a body of exactly the limit is accepted.
func (s *server) bodyLimit(l bodyLimit) int64 {
	switch l {
	case limitMessage:
		return s.cfg.MaxMessageBytes + 1
	case limitFile:
		return s.cfg.MaxFileBytes + 1
	case limitArchive:
		return s.cfg.MaxArchiveBytes + 1
	}
	return s.cfg.MaxBodyBytes + 1
}

// planInput reads the parameters and the body of an input type, with their
// schemas from the contract.
func planInput(t reflect.Type, method, path string, c *contract) (*inputPlan, error) {
	sop, err := c.operation(method, path)
	if err != nil {
		return nil, err
	}
	p := &inputPlan{query: map[string]bool{}, contract: c}
	var walk func(t reflect.Type, prefix []int) error
	walk = func(t reflect.Type, prefix []int) error {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			index := append(append([]int{}, prefix...), i)
			if !f.IsExported() {
				continue
			}
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				if err := walk(f.Type, index); err != nil {
					return err
				}
				continue
			}
			if f.Name == "Body" && len(prefix) == 0 {
				p.body = index
				continue
			}
			if f.Name == "RawBody" && len(prefix) == 0 {
				if f.Type != reflect.TypeFor[[]byte]() || f.Tag.Get("contentType") == "" {
					return errors.New("httpapi: " + method + " " + path + ": RawBody must be a []byte with a contentType tag")
				}
				p.raw, p.rawType = index, f.Tag.Get("contentType")
				continue
			}
			pf := paramField{index: index, kind: f.Type.Kind(), def: f.Tag.Get("default")}
			for _, in := range []string{"path", "query", "header"} {
				if name := f.Tag.Get(in); name != "" {
					pf.in, pf.name = in, name
				}
			}
			if pf.in == "" {
				continue
			}
			switch pf.kind {
			case reflect.String, reflect.Int, reflect.Int64, reflect.Bool:
			default:
				return errors.New("httpapi: parameter " + pf.name + ": unsupported type " + f.Type.String())
			}
			for _, sp := range sop.Parameters {
				if sp.In == pf.in && sp.Name == pf.name {
					pf.schema, pf.required = sp.Schema, sp.Required
				}
			}
			if pf.schema == nil {
				return errors.New("httpapi: " + method + " " + path + ": parameter " + pf.name + " is not in the OpenAPI document")
			}
			if pf.in == "query" {
				p.query[pf.name] = true
			}
			p.params = append(p.params, pf)
		}
		return nil
	}
	if err := walk(t, nil); err != nil {
		return nil, err
	}
	if p.body != nil {
		rb := sop.RequestBody
		if rb == nil || rb.Content["application/json"].Schema == nil {
			return nil, errors.New("httpapi: " + method + " " + path + ": the request body is not in the OpenAPI document")
		}
		p.bodyRequired, p.bodySchema = rb.Required, rb.Content["application/json"].Schema
	}
	if p.raw != nil {
		rb := sop.RequestBody
		if rb == nil || rb.Content[p.rawType].Schema == nil {
			return nil, errors.New("httpapi: " + method + " " + path + ": the " + p.rawType + " request body is not in the OpenAPI document")
		}
	}
	return p, nil
}

// handler is the adapter: it decodes and validates the request into an I,
// calls the handler and writes its O, or the problem. Only the two small
// functions given to serveOp depend on I and O: the adapter itself is one
// function for every operation rather than a copy per instantiation (53 of
// them, 140 KB of the binary).
func (o *op[I, O]) handler(s *server) http.Handler {
	return newAdapter(s, &o.opSpec, &o.once, &o.plan, &o.err, reflect.TypeFor[I](), reflect.TypeFor[O](),
		func() any { return new(I) },
		func(ctx context.Context, in any) (any, error) {
			out, err := o.h(s, ctx, in.(*I))
			if err != nil || out == nil {
				return nil, err
			}
			return out, nil
		})
}

// newAdapter makes the adapter of an operation whose input and output
// types are in and out.
func newAdapter(s *server, spec *opSpec, once *sync.Once, plan **inputPlan, err *error, in, out reflect.Type,
	newIn func() any, call func(context.Context, any) (any, error)) *adapter {
	a := &adapter{
		spec: spec, s: s, limit: s.bodyLimit(spec.Limit), status: spec.Status, outPlan: planOutput(out),
		timeout: spec.ReadTimeout, once: once, plan: plan, err: err, inType: in, newIn: newIn, call: call,
	}
	if a.status == 0 {
		a.status = http.StatusOK
		if _, ok := out.FieldByName("Body"); !ok {
			a.status = http.StatusNoContent
		}
	}
	if a.timeout == 0 {
		a.timeout = defaultBodyReadTimeout
	}
	return a
}

// adapter serves one operation: what handler made of its op, with its
// types reduced to newIn (a new *I) and call (the op's handler on it,
// returning its *O, nil for none).
type adapter struct {
	spec    *opSpec
	s       *server
	limit   int64
	status  int
	outPlan outputPlan
	timeout time.Duration
	// The op's input plan, shared by every server of the op.
	once   *sync.Once
	plan   **inputPlan
	err    *error
	inType reflect.Type
	newIn  func() any
	call   func(context.Context, any) (any, error)
}

func (a *adapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The plan needs the contract: made on the first request, not at
	// start.
	a.once.Do(func() { *a.plan, *a.err = planInput(a.inType, a.spec.Method, a.spec.Path, theContract()) })
	if *a.err != nil {
		panic(*a.err)
	}
	if isUpload(a.spec.Limit) {
		n := uploadSize(r, a.limit)
		if !a.s.uploads.take(n) {
			writeProblem(w, errUploadsBusy)
			return
		}
		defer a.s.uploads.give(n)
	}
	in := a.newIn()
	if p := (*a.plan).decode(w, r, in, a.limit, a.timeout); p != nil {
		writeAPIProblem(w, p)
		return
	}
	out, err := a.call(r.Context(), in)
	if err != nil {
		p := errorProblem(r.Context(), err)
		for k, vs := range p.headers {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		writeAPIProblem(w, p)
		return
	}
	if out == nil {
		w.WriteHeader(a.status)
		return
	}
	if so, ok := out.(*streamOutput); ok {
		so.Body(w)
		return
	}
	a.outPlan.write(w, a.status, out)
}

// decode fills in from r, as the operation's schema says, or returns the
// problem to answer. The order of the checks, and so which problem a
// request with several faults gets, is part of the API's behaviour.
func (p *inputPlan) decode(w http.ResponseWriter, r *http.Request, in any, limit int64, timeout time.Duration) *problem {
	if p.body != nil && r.ContentLength != 0 && !isJSON(r.Header.Get("Content-Type")) {
		return newProblem(http.StatusUnsupportedMediaType, typeForStatus(http.StatusUnsupportedMediaType),
			"Request bodies must be application/json; got "+strconv.Quote(r.Header.Get("Content-Type"))+".")
	}
	if p.raw != nil && r.ContentLength != 0 && !isMediaType(r.Header.Get("Content-Type"), p.rawType) {
		return newProblem(http.StatusUnsupportedMediaType, typeForStatus(http.StatusUnsupportedMediaType),
			"The request body must be "+p.rawType+"; got "+strconv.Quote(r.Header.Get("Content-Type"))+".")
	}
	v := validation{c: p.contract}
	if r.URL.RawQuery != "" {
		// In order, so that the answer does not depend on map order.
		for _, key := range slices.Sorted(maps.Keys(r.URL.Query())) {
			if !p.query[key] {
				v.errs = append(v.errs, &fieldError{Location: "query." + key, Message: "unknown query parameter", Value: ""})
			}
		}
		if len(v.errs) > 0 {
			return validationProblem(r.Context(), http.StatusUnprocessableEntity, msgValidationFailed, v.errs)
		}
	}
	rv := reflect.ValueOf(in).Elem()
	for i := range p.params {
		pf := &p.params[i]
		v.loc.buf = v.loc.buf[:0]
		v.loc.push(pf.in)
		v.loc.push(pf.name)
		var value string
		switch pf.in {
		case "path":
			value = r.PathValue(pf.name)
		case "query":
			value = queryValue(r.URL.RawQuery, pf.name)
		case "header":
			value = r.Header.Get(pf.name)
		}
		if value == "" {
			value = pf.def
		}
		if value == "" {
			if pf.required {
				v.add("", "required "+pf.in+" parameter is missing")
			}
			continue
		}
		f := rv.FieldByIndex(pf.index)
		var pv any
		switch pf.kind {
		case reflect.String:
			f.SetString(value)
			pv = value
		case reflect.Int, reflect.Int64:
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				v.add(value, "invalid integer")
				continue
			}
			f.SetInt(n)
			pv = n
		case reflect.Bool:
			b, err := strconv.ParseBool(value)
			if err != nil {
				v.add(value, "invalid boolean")
				continue
			}
			f.SetBool(b)
			pv = b
		}
		v.validate(pf.schema, pv)
	}
	status := http.StatusUnprocessableEntity
	if p.body != nil {
		// Large bodies may come slowly, but not forever.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		body, prob := readBody(r, limit, v.errs)
		if prob != nil {
			return prob
		}
		if len(body) == 0 {
			if p.bodyRequired {
				return validationProblem(r.Context(), http.StatusBadRequest, "request body is required", v.errs)
			}
		} else if st := v.decodeBody(r.Header.Get("Content-Type"), body, rv.FieldByIndex(p.body), p.bodySchema); st > 0 {
			status = st
		}
	}
	if p.raw != nil {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		body, prob := readBody(r, limit, v.errs)
		if prob != nil {
			return prob
		}
		rv.FieldByIndex(p.raw).SetBytes(body)
	}
	if c, ok := in.(checker); ok {
		v.errs = append(v.errs, c.check()...)
	}
	if len(v.errs) > 0 {
		return validationProblem(r.Context(), status, msgValidationFailed, v.errs)
	}
	return nil
}

// readBody reads the whole body, up to limit bytes: a body that reaches
// the limit is too large. errs are the parameters' errors so far, which
// the problem carries.
func readBody(r *http.Request, limit int64, errs []error) ([]byte, *problem) {
	if r.Body == nil {
		return nil, nil
	}
	defer r.Body.Close()
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r.Body, limit))
	if n == limit {
		return nil, validationProblem(r.Context(), http.StatusRequestEntityTooLarge,
			"request body is too large limit="+strconv.FormatInt(limit, 10)+" bytes", errs)
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, validationProblem(r.Context(), http.StatusRequestTimeout, "request body read timeout", errs)
		}
		// A body the client broke (requestBody's bodyError) is answered as
		// such; anything else is ours.
		return nil, validationProblem(r.Context(), http.StatusInternalServerError, "cannot read request body", []error{err})
	}
	return buf.Bytes(), nil
}

// decodeBody validates the JSON body against s, then decodes it into
// field. It returns the status that the errors it found call for, or -1.
func (v *validation) decodeBody(ct string, body []byte, field reflect.Value, s *schema) int {
	status := -1
	if ct == "" {
		ct = "application/json"
	}
	if err := checkBodyType(ct); err != nil {
		v.errs = append(v.errs, &fieldError{Location: "body", Message: err.Error(), Value: string(body)})
		return http.StatusUnsupportedMediaType
	}
	var parsed any
	if err := json.Unmarshal(body, &parsed); err != nil {
		status = http.StatusBadRequest
		v.errs = append(v.errs, &fieldError{Location: "body", Message: err.Error(), Value: string(body)})
	} else {
		n := len(v.errs)
		v.loc.buf = v.loc.buf[:0]
		v.loc.push("body")
		v.validate(s, parsed)
		if len(v.errs) > n {
			status = http.StatusUnprocessableEntity
		}
	}
	// Decoded even when invalid: the checks (checker) that run next see
	// what encoding/json makes of it, and add their errors to the answer.
	// What the schema accepts the Go type should too; if not (a number
	// beyond int64), that is an error of the request as well.
	if err := json.Unmarshal(body, field.Addr().Interface()); err != nil && status < 0 {
		v.errs = append(v.errs, &fieldError{Location: "body", Message: err.Error(), Value: string(body)})
	}
	return status
}

// isMediaType reports whether the Content-Type ct names the media type
// want (parameters aside, case aside); an empty ct is taken as want (curl
// -T sends none).
func isMediaType(ct, want string) bool {
	if ct == "" {
		return true
	}
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), want)
}

// checkBodyType accepts the media types that name JSON: application/json
// and any type with a +json suffix, with parameters. The part compared is
// what comes after the first "+" (or all) up to the first ";", exactly as
// written: isJSON has already refused other types, and this refuses a
// spelling it let through (upper case, a space before the ";", a second
// "+").
func checkBodyType(ct string) error {
	start := strings.IndexByte(ct, '+') + 1
	end := strings.IndexByte(ct, ';')
	if end == -1 {
		end = len(ct)
	}
	if end < start {
		return errors.New("unknown content type: " + ct)
	}
	switch ct[start:end] {
	case "application/json", "json":
		return nil
	}
	return errors.New("unknown content type: " + ct)
}

// queryValue is the first value of the query parameter name in raw, or ""
// (a parameter without "=" is "true"). An undecodable escape makes a value
// (or a name) empty.
func queryValue(raw, name string) string {
	pos := 0
	for pos < len(raw) {
		end := strings.IndexByte(raw[pos:], '=')
		if end == -1 {
			end = strings.IndexByte(raw[pos:], '&')
		}
		if end == -1 {
			end = len(raw)
		} else {
			end += pos
		}
		key, _ := url.QueryUnescape(raw[pos:end])
		if key == name {
			if end == len(raw) || raw[end] == '&' {
				return "true"
			}
			pos = end + 1
			end = strings.IndexByte(raw[pos:], '&')
			if end == -1 {
				end = len(raw)
			} else {
				end += pos
			}
			value, _ := url.QueryUnescape(raw[pos:end])
			return value
		}
		tmp := pos
		pos = strings.IndexByte(raw[pos:], '&')
		if pos == -1 {
			break
		}
		pos += tmp + 1
	}
	return ""
}

// outputPlan is how the adapter writes an output type.
type outputPlan struct {
	headers []outputHeader
	body    []int // nil without a Body
}

type outputHeader struct {
	index []int
	name  string
}

func planOutput(t reflect.Type) outputPlan {
	var p outputPlan
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		switch {
		case f.Name == "Body":
			p.body = f.Index
		case f.Tag.Get("header") != "":
			if f.Type.Kind() != reflect.String {
				panic("httpapi: output header " + f.Name + ": not a string")
			}
			p.headers = append(p.headers, outputHeader{index: f.Index, name: f.Tag.Get("header")})
		}
	}
	return p
}

// write writes out (a pointer to the output struct) with status.
func (p *outputPlan) write(w http.ResponseWriter, status int, out any) {
	v := reflect.ValueOf(out).Elem()
	for _, h := range p.headers {
		if s := v.FieldByIndex(h.index).String(); s != "" {
			w.Header().Set(h.name, s)
		}
	}
	if p.body == nil {
		w.WriteHeader(status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	writeJSON(w, status, v.FieldByIndex(p.body).Interface())
}

// writeJSON writes v as the API writes every JSON document: no HTML
// escaping, a final newline; no body for 204 and 304.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.WriteHeader(status)
	if status == http.StatusNoContent || status == http.StatusNotModified {
		return
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeAPIProblem writes the problem of an operation (decoding, validation,
// the handler's error).
func writeAPIProblem(w http.ResponseWriter, p *problem) {
	w.Header().Set("Content-Type", problemContentType)
	writeJSON(w, p.Status, p)
}
