package fakellm

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrClosed is returned by Wait once the server is closed.
var ErrClosed = errors.New("fakellm: server closed")

// Limits.
const (
	maxBody     = 64 << 20 // request body, after decompression
	maxBodyText = 64 << 10 // a non-JSON body kept in the log
)

// Options configure a Server. The zero value serves the "text" scenario
// on a random loopback port.
type Options struct {
	// Addr is the listen address; it must be a loopback address.
	// Default "127.0.0.1:0".
	Addr string
	// Default names the scenario of requests without a /s/<name> prefix:
	// a key of Scenarios or a built-in name. Default "text".
	Default string
	// Scenarios adds (or replaces built-in) scenarios by name. They are
	// copied by Start.
	Scenarios map[string]*Scenario
	// Workdir makes relative paths absolute when neither the scenario nor
	// the agent's prompt states a working directory.
	Workdir string
	// LogFile, if set, receives every Request as one JSON line (appended,
	// created with mode 0600).
	LogFile string
	// OnRequest, if set, is called once per request, one call at a time
	// and in Seq order, after the answer is chosen and before it is
	// written. It must not call Close.
	OnRequest func(Request)
	// RequireKey, if set, is the only API key model calls are answered
	// for: every request the server recognises as a model API call
	// (Anthropic Messages and count_tokens, OpenAI Responses and Chat
	// Completions, Gemini generateContent, streamGenerateContent and
	// countTokens) must carry exactly this key, where Request.KeySHA256
	// finds it. A call without it is answered 401 in its API's error
	// shape, recorded like any request (Status 401, Reply naming the
	// problem, never a key) and counted by Server.KeyMismatches. Health
	// checks, HEAD, telemetry, model lists and unknown routes (404) need
	// no key.
	RequireKey string
	// Credentials, if set, are the only credentials model calls are
	// answered for (the calls RequireKey guards, and with it set both
	// rules apply): a call must carry one of them, with the headers it
	// Requires, and every credential it carries — in Authorization,
	// x-api-key, x-goog-api-key, api-key or ?key= — must be one of them,
	// in its own header. So a test can prove which credential reached the
	// model, and in which header. Refusals are answered and counted as
	// for RequireKey, with a reason that names headers, never values.
	Credentials []Credential
	// TLS serves HTTPS instead of HTTP (HTTP/1.1 and HTTP/2 by ALPN),
	// with a certificate for 127.0.0.1, ::1 and localhost made by Start
	// and signed by a CA made with it, valid for 7 days. Clients trust it
	// through Server.CertPool or Server.CertPEM.
	TLS bool
}

// Server is a running fake LLM server.
type Server struct {
	opts      Options
	url       string
	certs     *certs // nil without Options.TLS
	scenarios map[string]*Scenario
	hs        *http.Server
	served    chan struct{}
	ctx       context.Context // cancelled by Close: ends streams and sleeps
	cancel    context.CancelFunc
	closeOnce sync.Once
	closeErr  error

	logMu sync.Mutex // serialises the log file and OnRequest, in Seq order
	logf  *os.File

	mu      sync.Mutex
	reqs    []Request
	changed chan struct{} // closed and replaced on each new request
	closed  bool
	active  int        // running handlers
	idle    *sync.Cond // on mu: active reached 0
	badKeys int        // requests refused by Options.RequireKey
}

// Start starts a server. It stops when ctx is done or Close is called.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	if opts.Default == "" {
		opts.Default = ScenarioText
	}
	if err := loopbackOnly(opts.Addr); err != nil {
		return nil, err
	}
	scenarios := builtins()
	for name, sc := range opts.Scenarios {
		if name == "" || strings.Contains(name, "/") || sc == nil {
			return nil, fmt.Errorf("fakellm: bad scenario name %q or nil scenario", name)
		}
		if err := sc.Validate(); err != nil {
			return nil, fmt.Errorf("fakellm: scenario %q: %w", name, err)
		}
		scenarios[name] = sc.clone()
	}
	for name, sc := range scenarios {
		if sc.Name == "" {
			sc.Name = name
		}
	}
	if scenarios[opts.Default] == nil {
		return nil, fmt.Errorf("fakellm: unknown default scenario %q", opts.Default)
	}
	s := &Server{opts: opts, scenarios: scenarios, served: make(chan struct{}), changed: make(chan struct{})}
	s.idle = sync.NewCond(&s.mu)
	if opts.TLS {
		c, err := newCerts(time.Now())
		if err != nil {
			return nil, err
		}
		s.certs = c
	}
	if opts.LogFile != "" {
		f, err := os.OpenFile(opts.LogFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("fakellm: log file: %w", err)
		}
		s.logf = f
	}
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", opts.Addr)
	if err != nil {
		if s.logf != nil {
			_ = s.logf.Close()
		}
		return nil, fmt.Errorf("fakellm: %w", err)
	}
	s.url = "http://" + ln.Addr().String()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hs = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	if s.certs != nil {
		s.url = "https://" + ln.Addr().String()
		// ServeTLS adds "h2" and "http/1.1" to NextProtos for these
		// protocols; streams flush through http.ResponseController over
		// either.
		s.hs.Protocols = new(http.Protocols)
		s.hs.Protocols.SetHTTP1(true)
		s.hs.Protocols.SetHTTP2(true)
		s.hs.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{s.certs.cert}}
	}
	go func() {
		defer close(s.served)
		if s.certs != nil {
			_ = s.hs.ServeTLS(ln, "", "")
			return
		}
		_ = s.hs.Serve(ln)
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Close()
		case <-s.ctx.Done():
		}
	}()
	return s, nil
}

func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("fakellm: address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("fakellm: address %q: only loopback addresses are allowed", addr)
}

// URL returns the base URL, "http://127.0.0.1:PORT" ("https://…" with
// Options.TLS), without a slash. The host is the listen address's.
func (s *Server) URL() string { return s.url }

// KeyMismatches returns how many requests Options.RequireKey has refused
// so far (no key, or another key). A request is counted before it is
// recorded, so after Wait returns a refused request the count includes it.
func (s *Server) KeyMismatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.badKeys
}

// ScenarioURL returns the base URL that selects scenario name:
// URL() + "/s/" + name.
func (s *Server) ScenarioURL(name string) string {
	return s.url + "/s/" + url.PathEscape(name)
}

// Requests returns a copy of the requests recorded so far, in Seq order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// Wait returns the first recorded request (earlier ones included) for
// which match returns true (a nil match takes any), waiting for it until
// ctx is done or the server closes.
func (s *Server) Wait(ctx context.Context, match func(Request) bool) (Request, error) {
	next := 0
	for {
		s.mu.Lock()
		reqs, ch, closed := s.reqs[next:], s.changed, s.closed
		s.mu.Unlock()
		for _, r := range reqs {
			if match == nil || match(r) {
				return r, nil
			}
		}
		next += len(reqs)
		if closed {
			return Request{}, ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Request{}, ctx.Err()
		}
	}
}

// Close stops the server: it closes every connection (streams in progress
// end at once), waits for the handlers and closes the log file. It is safe
// to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		s.cancel()
		s.closeErr = s.hs.Close()
		<-s.served
		s.mu.Lock()
		for s.active > 0 {
			s.idle.Wait()
		}
		s.mu.Unlock()
		if s.logf != nil {
			if err := s.logf.Close(); err != nil && s.closeErr == nil {
				s.closeErr = err
			}
		}
	})
	return s.closeErr
}

func (s *Server) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.active++
	return true
}

func (s *Server) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	if s.active == 0 {
		s.idle.Broadcast()
	}
}

// record stores a request, then writes it to the log file and calls
// OnRequest.
func (s *Server) record(r Request) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.mu.Lock()
	r.Seq = len(s.reqs) + 1
	s.reqs = append(s.reqs, r)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	if s.logf != nil {
		_, _ = s.logf.Write(append(marshal(r), '\n'))
	}
	if s.opts.OnRequest != nil {
		s.opts.OnRequest(r)
	}
}

// splitScenario cuts a "/s/<name>" prefix off a path.
func splitScenario(p string) (name, rest string) {
	tail, ok := strings.CutPrefix(p, "/s/")
	if !ok {
		return "", p
	}
	name, rest, _ = strings.Cut(tail, "/")
	return name, "/" + rest
}

// route tells which API a path is. For Gemini it also returns the model
// and the method (generateContent, streamGenerateContent, countTokens).
func route(method, p string) (api, model, gmethod string) {
	if i := strings.LastIndex(p, "/models/"); i >= 0 {
		m, verb, ok := strings.Cut(p[i+len("/models/"):], ":")
		if ok && method == http.MethodPost && m != "" && !strings.Contains(m, "/") {
			switch verb {
			case "generateContent", "streamGenerateContent":
				return APIGemini, m, verb
			case "countTokens":
				return APIGeminiCountTokens, m, verb
			}
		}
	}
	switch method {
	case http.MethodPost:
		switch {
		case strings.HasSuffix(p, "/messages/count_tokens"):
			return APIAnthropicCountTokens, "", ""
		case strings.HasSuffix(p, "/messages"):
			return APIAnthropic, "", ""
		case strings.HasSuffix(p, "/responses"):
			return APIResponses, "", ""
		case strings.HasSuffix(p, "/chat/completions"):
			return APIChat, "", ""
		}
	case http.MethodGet:
		if strings.HasSuffix(p, "/models") {
			return APIModels, "", ""
		}
		if i := strings.LastIndex(p, "/models/"); i >= 0 && !strings.Contains(p[i+len("/models/"):], "/") {
			return APIModels, p[i+len("/models/"):], ""
		}
	}
	return APIOther, "", ""
}

// serveHTTP answers one request.
func (s *Server) serveHTTP(w http.ResponseWriter, hr *http.Request) {
	if !s.enter() {
		http.Error(w, "fakellm: closed", http.StatusServiceUnavailable)
		return
	}
	defer s.leave()
	ctx := hr.Context()
	rec := Request{
		Time:   time.Now().UTC(),
		Method: hr.Method,
		Path:   hr.URL.Path,
		Query:  redactQuery(hr.URL.RawQuery),
		Header: redactHeader(hr.Header),
		Step:   -1,
	}
	key := apiKey(hr)
	if key != "" {
		rec.KeySHA256 = keyHash(key)
	}
	name, p := splitScenario(hr.URL.Path)
	rec.Scenario = name
	if name == "" {
		rec.Scenario = s.opts.Default
	}
	raw, bodyErr := readBody(hr)
	switch {
	case bodyErr != nil:
		rec.BodyText = "fakellm: " + bodyErr.Error()
	case len(raw) == 0:
	case json.Valid(raw):
		var b bytes.Buffer
		_ = json.Compact(&b, raw)
		rec.Body = b.Bytes()
	default:
		rec.BodyText = cutUTF8(raw, maxBodyText)
	}
	api, model, gmethod := route(hr.Method, p)
	rec.API, rec.Model = api, model

	fail := func(status int, msg string) {
		e := &Error{Status: status, Message: msg}
		rec.Status, rec.Reply = status, "error: "+msg
		s.record(rec)
		writeError(w, api, e)
	}
	switch api {
	case APIOther:
		switch {
		case hr.Method == http.MethodHead:
			rec.Status = http.StatusOK
			s.record(rec)
			w.WriteHeader(http.StatusOK)
		case hr.Method == http.MethodGet && (p == "/" || p == "/health" || p == "/healthz"):
			rec.Status, rec.Reply = http.StatusOK, "health"
			s.record(rec)
			writeJSON(w, http.StatusOK, object{"ok": true, "scenario": rec.Scenario})
		case hr.Method == http.MethodPost && telemetry(p):
			rec.Status, rec.Reply = http.StatusOK, "telemetry (ignored)"
			s.record(rec)
			writeJSON(w, http.StatusOK, object{})
		default:
			fail(http.StatusNotFound, fmt.Sprintf("fakellm: no route for %s %s", hr.Method, p))
		}
		return
	case APIModels:
		rec.Status, rec.Reply = http.StatusOK, "model list"
		s.record(rec)
		writeModels(w, p, model)
		return
	}
	msg := s.checkKey(key)
	if msg == "" {
		msg = checkCredentials(s.opts.Credentials, hr)
	}
	if msg != "" {
		s.mu.Lock()
		s.badKeys++
		s.mu.Unlock()
		fail(http.StatusUnauthorized, msg)
		return
	}
	if bodyErr != nil {
		fail(http.StatusBadRequest, "fakellm: "+bodyErr.Error())
		return
	}
	switch api {
	case APIAnthropicCountTokens:
		rec.Status, rec.Reply = http.StatusOK, "count_tokens"
		s.record(rec)
		writeAnthropicCount(w, len(raw))
		return
	case APIGeminiCountTokens:
		rec.Status, rec.Reply = http.StatusOK, "countTokens"
		s.record(rec)
		writeGeminiCount(w, len(raw))
		return
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil || body == nil {
		fail(http.StatusBadRequest, "fakellm: the body is not a JSON object")
		return
	}
	sc := s.scenarios[rec.Scenario]
	if sc == nil {
		fail(http.StatusNotFound, fmt.Sprintf("fakellm: unknown scenario %q (known: %s)",
			rec.Scenario, strings.Join(slices.Sorted(maps.Keys(s.scenarios)), ", ")))
		return
	}
	var c *conversation
	switch api {
	case APIAnthropic:
		c = parseAnthropic(body)
	case APIChat:
		c = parseChat(body)
	case APIResponses:
		c = parseResponses(body)
	case APIGemini:
		c = parseGemini(body, model, gmethod == "streamGenerateContent")
	}
	c.size = len(raw)
	r := decide(sc, c, s.opts.Workdir)
	rec.Model, rec.Stream, rec.Parts = c.model, c.stream, c.parts
	rec.Prompt, rec.Turn, rec.Step, rec.Reply = r.prompt, r.turn, r.step, r.summary
	rec.Status = http.StatusOK
	if r.err != nil {
		rec.Status = r.err.Status
	}
	s.record(rec)
	if r.err != nil {
		writeError(w, api, r.err)
		return
	}
	switch api {
	case APIAnthropic:
		writeAnthropic(ctx, w, c, r)
	case APIChat:
		writeChat(ctx, w, c, r)
	case APIResponses:
		writeResponses(ctx, w, c, r)
	case APIGemini:
		writeGemini(ctx, w, c, r, hr.URL.Query().Get("alt") == "sse")
	}
}

// checkKey returns why key does not satisfy Options.RequireKey, "" if it
// does (or no key is required). The message never holds a key.
func (s *Server) checkKey(key string) string {
	want := s.opts.RequireKey
	switch {
	case want == "":
		return ""
	case key == "":
		return "fakellm: no API key (this server requires one)"
	case subtle.ConstantTimeCompare([]byte(key), []byte(want)) != 1:
		return "fakellm: wrong API key (not the one this server requires)"
	}
	return ""
}

// writeError writes an error in the shape of the API the request was for.
func writeError(w http.ResponseWriter, api string, e *Error) {
	switch api {
	case APIAnthropic, APIAnthropicCountTokens:
		writeAnthropicError(w, e)
	case APIGemini, APIGeminiCountTokens:
		writeGeminiError(w, e)
	case APIResponses, APIChat:
		writeOpenAIError(w, e)
	default:
		errorHeaders(w, e)
		writeJSON(w, e.Status, object{"error": object{"type": "not_found", "message": errorMessage(e)}})
	}
}

// telemetry reports whether a POST path is telemetry that is answered {}.
func telemetry(p string) bool {
	return strings.HasSuffix(p, "/event_logging/batch") || strings.Contains(p, "telemetry") ||
		strings.HasSuffix(p, "/log") || strings.HasSuffix(p, "/metrics")
}

// readBody reads the body, decoding gzip and deflate.
func readBody(r *http.Request) ([]byte, error) {
	var rd io.Reader = http.MaxBytesReader(nil, r.Body, maxBody)
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(rd)
		if err != nil {
			return nil, fmt.Errorf("gzip body: %w", err)
		}
		defer func() { _ = zr.Close() }() // a read error already surfaced
		rd = zr
	case "deflate":
		b, err := io.ReadAll(rd)
		if err != nil {
			return nil, err
		}
		if zr, err := zlib.NewReader(bytes.NewReader(b)); err == nil {
			defer zr.Close()
			rd = zr
		} else {
			rd = flate.NewReader(bytes.NewReader(b))
		}
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q", enc)
	}
	b, err := io.ReadAll(io.LimitReader(rd, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("reading the body: %w", err)
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("body larger than %d bytes", maxBody)
	}
	return b, nil
}

// cutUTF8 returns b as valid UTF-8 text of at most about n bytes.
func cutUTF8(b []byte, n int) string {
	if len(b) <= n {
		return strings.ToValidUTF8(string(b), "\uFFFD")
	}
	return strings.ToValidUTF8(string(b[:n]), "\uFFFD") + "…"
}

// writeModels answers GET …/models (a list) and …/models/<id> (one model).
func writeModels(w http.ResponseWriter, p, id string) {
	gemini := strings.Contains(p, "/v1beta/") || strings.Contains(p, "/v1alpha/")
	ids := []string{"fake-model", "claude-sonnet-4-5", "gpt-5.5", "gemini-2.5-pro"}
	if id != "" {
		ids = []string{id}
	}
	var list []any
	for _, m := range ids {
		if gemini {
			list = append(list, object{"name": "models/" + m, "displayName": m, "version": "fake",
				"inputTokenLimit": 1000000, "outputTokenLimit": 65536,
				"supportedGenerationMethods": []any{"generateContent", "streamGenerateContent", "countTokens"}})
		} else {
			list = append(list, object{"id": m, "object": "model", "type": "model", "display_name": m,
				"created": 1735689600, "created_at": "2025-01-01T00:00:00Z", "owned_by": "fakellm"})
		}
	}
	switch {
	case id != "":
		writeJSON(w, http.StatusOK, list[0])
	case gemini:
		writeJSON(w, http.StatusOK, object{"models": list})
	default:
		writeJSON(w, http.StatusOK, object{"object": "list", "data": list, "has_more": false,
			"first_id": ids[0], "last_id": ids[len(ids)-1]})
	}
}
