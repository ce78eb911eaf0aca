package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/event"
)

// DefaultUserAgent is sent when WithUserAgent is not used.
const DefaultUserAgent = "agentbox-go-client"

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 1 << 20

// unixHost is the Host of requests sent over a unix socket.
const unixHost = "agentbox"

// Client calls one agentbox daemon. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[/prefix], without a trailing slash
	hc        *http.Client
	token     string
	userAgent string
	limits    Limits
}

// Option configures a Client.
type Option func(*config)

type config struct {
	hc        *http.Client
	token     string
	userAgent string
	limits    Limits
	// localEnv, set by WithLocalToken, is the environment LocalToken reads.
	localEnv func(string) string
}

// WithToken sends "Authorization: Bearer token" with every request.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithHTTPClient uses hc for every request instead of a client over
// http.DefaultTransport. A Timeout on hc also cuts event streams, which then
// reconnect; prefer contexts for deadlines. With a unix:// base URL, hc's
// transport must be nil or an *http.Transport, which is cloned to dial the
// socket.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.hc = hc } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *config) { c.userAgent = ua } }

// Limits bound what a Client reads from a daemon it does not trust (an
// agentbox daemon inside a sandbox, say). A zero field keeps the default.
type Limits struct {
	// Event bounds one event as the daemon encodes it: the data of one
	// server-sent event and any one line of the stream, and each event of
	// a page of Events (default 64 MiB).
	Event int64
	// Answer bounds any JSON answer but a page of events, which may hold
	// Answer plus one Event per event asked for (default: unbounded).
	// Backfilling a stream's gap then asks for pages of at most
	// max(1, Answer/Event) events.
	Answer int64
	// Problem bounds an error answer (default 1 MiB).
	Problem int64
}

// WithLimits bounds what the client reads (see Limits).
func WithLimits(l Limits) Option { return func(c *config) { c.limits = l } }

// ErrTooLarge is returned (wrapped) when an answer or an event is larger
// than the client's Limits.
var ErrTooLarge = errors.New("larger than the client accepts")

// eventLimit is the bound of one event.
func (c *Client) eventLimit() int64 {
	if c.limits.Event > 0 {
		return c.limits.Event
	}
	return sseMaxData
}

// problemLimit is the bound of an error answer.
func (c *Client) problemLimit() int64 {
	if c.limits.Problem > 0 {
		return c.limits.Problem
	}
	return maxErrorBody
}

// pageLimit is the bound of a page of n events (0: unbounded).
func (c *Client) pageLimit(n int) int64 {
	if c.limits.Answer <= 0 {
		return 0
	}
	return c.limits.Answer + int64(max(n, 1))*c.eventLimit()
}

// backfillPage is how many events a page of a stream's backfill asks for.
func (c *Client) backfillPage() int {
	if c.limits.Answer <= 0 {
		return lastSeqPage
	}
	return int(max(1, min(int64(lastSeqPage), c.limits.Answer/c.eventLimit())))
}

// New returns a client for the daemon at baseURL: "http://host:port",
// "https://host/prefix", or "unix:///path/to.sock" for a daemon listening on
// a unix socket.
func New(baseURL string, opts ...Option) (*Client, error) {
	cfg := config{userAgent: DefaultUserAgent}
	for _, o := range opts {
		o(&cfg)
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: base URL: %w", err)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("client: base URL %q: no query, fragment or credentials allowed", baseURL)
	}
	fromFile := false
	if cfg.localEnv != nil && cfg.token == "" {
		tok, err := LocalToken(baseURL, cfg.localEnv)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		cfg.token, fromFile = tok, tok != ""
	}
	c := &Client{token: cfg.token, userAgent: cfg.userAgent, hc: cfg.hc, limits: cfg.limits}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("client: base URL %q has no host", baseURL)
		}
		c.base = u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/")
		if fromFile {
			hc, err := tcpOwnerChecked(cfg.hc)
			if err != nil {
				return nil, err
			}
			c.hc = hc
		}
		if c.hc == nil {
			c.hc = &http.Client{}
		}
	case "unix":
		sock := u.Path
		if sock == "" {
			sock = u.Opaque
		}
		if u.Host != "" || sock == "" {
			return nil, fmt.Errorf("client: base URL %q: want unix:///absolute/path.sock", baseURL)
		}
		hc, err := unixClient(cfg.hc, sock, fromFile)
		if err != nil {
			return nil, err
		}
		c.hc, c.base = hc, "http://"+unixHost
	default:
		return nil, fmt.Errorf("client: base URL %q: scheme must be http, https or unix", baseURL)
	}
	return c, nil
}

// unixClient returns a copy of hc (or a new client) whose transport dials
// the unix socket at path whatever the request's host; with checkOwner,
// only a socket of this user or root (see ownerChecked).
func unixClient(hc *http.Client, path string, checkOwner bool) (*http.Client, error) {
	return withDial(hc, "a unix socket", func(dialFunc) dialFunc {
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		if checkOwner {
			return ownerChecked(dial)
		}
		return dial
	})
}

// tcpOwnerChecked returns a copy of hc (or a new client) that sends
// requests only to a daemon of this user or root (see ownerChecked), and
// never through a proxy: for a token read from the data directory.
func tcpOwnerChecked(hc *http.Client) (*http.Client, error) {
	return withDial(hc, "a token from the data directory", func(dial dialFunc) dialFunc {
		if dial == nil {
			dial = (&net.Dialer{}).DialContext
		}
		return ownerChecked(dial)
	})
}

// withDial returns a copy of hc (or a new client) whose transport, a clone
// of hc's (http.DefaultTransport's if it has none), dials with wrap of its
// dial function and goes through no proxy. what names the need, for the
// error when hc's transport is not an *http.Transport.
func withDial(hc *http.Client, what string, wrap func(dialFunc) dialFunc) (*http.Client, error) {
	var t *http.Transport
	switch {
	case hc == nil || hc.Transport == nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	default:
		ht, ok := hc.Transport.(*http.Transport)
		if !ok {
			return nil, fmt.Errorf("client: %s needs an *http.Transport, not %T", what, hc.Transport)
		}
		t = ht.Clone()
	}
	t.Proxy = nil
	t.DialContext = wrap(t.DialContext)
	out := &http.Client{}
	if hc != nil {
		*out = *hc
	}
	out.Transport = t
	return out, nil
}

// CloseIdleConnections closes idle keep-alive connections of the client's
// transport.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Health reports the daemon's status and version.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var out Health
	err := c.do(ctx, http.MethodGet, "/v1/health", nil, nil, &out)
	return out, err
}

// Agents lists the agents the daemon knows and whether each can run.
func (c *Client) Agents(ctx context.Context) (AgentList, error) {
	var out AgentList
	err := c.do(ctx, http.MethodGet, "/v1/agents", nil, nil, &out)
	return out, err
}

// Agent describes one agent with the models and modes it offers.
func (c *Client) Agent(ctx context.Context, name string) (AgentDetail, error) {
	var out AgentDetail
	err := c.do(ctx, http.MethodGet, "/v1/agents/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

// UpdateSession changes a session's model and/or mode between turns. It
// fails with a Problem of type ProblemBusy during a turn, ProblemUnknownModel
// or ProblemUnknownMode for a choice the agent does not offer, and
// ProblemSwitchUnsupported when the agent cannot make the change.
func (c *Client) UpdateSession(ctx context.Context, id string, req UpdateSession) (Session, error) {
	p, err := sessionPath(id)
	if err != nil {
		return Session{}, err
	}
	var out Session
	err = c.do(ctx, http.MethodPatch, p, nil, req, &out)
	return out, err
}

// CreateSession starts a session; it returns once the agent is ready.
func (c *Client) CreateSession(ctx context.Context, req CreateSession) (Session, error) {
	var out Session
	err := c.do(ctx, http.MethodPost, "/v1/sessions", nil, req, &out)
	return out, err
}

// ListOptions filters and pages ListSessions. Sessions come newest first.
type ListOptions struct {
	// Status keeps only sessions in that state (StatusIdle, ...); empty: any.
	Status string
	// Limit caps the page size; 0 lets the server choose.
	Limit int
	// Before continues a listing: pass the previous page's NextBefore.
	Before string
}

// ListSessions returns one page of sessions.
func (c *Client) ListSessions(ctx context.Context, opts ListOptions) (SessionList, error) {
	q := url.Values{}
	if opts.Status != "" {
		q.Set("status", opts.Status)
	}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Before != "" {
		q.Set("before", opts.Before)
	}
	var out SessionList
	err := c.do(ctx, http.MethodGet, "/v1/sessions", q, nil, &out)
	return out, err
}

// GetSession returns one session.
func (c *Client) GetSession(ctx context.Context, id string) (Session, error) {
	p, err := sessionPath(id)
	if err != nil {
		return Session{}, err
	}
	var out Session
	err = c.do(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// DeleteSession terminates a session; with purge its log is removed too.
func (c *Client) DeleteSession(ctx context.Context, id string, purge bool) error {
	p, err := sessionPath(id)
	if err != nil {
		return err
	}
	q := url.Values{"purge": {strconv.FormatBool(purge)}}
	return c.do(ctx, http.MethodDelete, p, q, nil, nil)
}

// SendMessage starts a turn and returns its id at once; follow the turn with
// Stream or WaitTurn.
func (c *Client) SendMessage(ctx context.Context, id string, msg SendMessage) (Turn, error) {
	p, err := sessionPath(id, "messages")
	if err != nil {
		return Turn{}, err
	}
	var out Turn
	err = c.do(ctx, http.MethodPost, p, nil, msg, &out)
	return out, err
}

// Send is SendMessage with a text message.
func (c *Client) Send(ctx context.Context, id, text string) (Turn, error) {
	return c.SendMessage(ctx, id, SendMessage{Text: text})
}

// Interrupt cancels the running turn and returns its id.
func (c *Client) Interrupt(ctx context.Context, id string) (Turn, error) {
	p, err := sessionPath(id, "interrupt")
	if err != nil {
		return Turn{}, err
	}
	var out Turn
	err = c.do(ctx, http.MethodPost, p, nil, struct{}{}, &out)
	return out, err
}

// Pause pauses a live session on a provider whose sandboxes pause: its
// sandbox is frozen and its status becomes paused; its next message (or
// Resume) resumes it. Pausing a paused session returns it.
func (c *Client) Pause(ctx context.Context, id string) (Session, error) {
	p, err := sessionPath(id, "pause")
	if err != nil {
		return Session{}, err
	}
	var out Session
	err = c.do(ctx, http.MethodPost, p, nil, struct{}{}, &out)
	return out, err
}

// Resume starts a new agent process for a session that is not live
// (interrupted by a daemon restart, ended or failed), continuing the agent's
// own conversation. req may be the zero value.
func (c *Client) Resume(ctx context.Context, id string, req ResumeSession) (Session, error) {
	p, err := sessionPath(id, "resume")
	if err != nil {
		return Session{}, err
	}
	var out Session
	err = c.do(ctx, http.MethodPost, p, nil, req, &out)
	return out, err
}

// AnswerPermission allows or denies one permission request.
func (c *Client) AnswerPermission(ctx context.Context, id, permissionID string, ans PermissionAnswer) (Resolved, error) {
	p, err := sessionPath(id, "permissions", permissionID)
	if err != nil {
		return Resolved{}, err
	}
	var out Resolved
	err = c.do(ctx, http.MethodPost, p, nil, ans, &out)
	return out, err
}

// AnswerQuestion answers (or, with Cancel, declines) one question.
func (c *Client) AnswerQuestion(ctx context.Context, id, questionID string, ans QuestionAnswer) (Resolved, error) {
	p, err := sessionPath(id, "questions", questionID)
	if err != nil {
		return Resolved{}, err
	}
	var out Resolved
	err = c.do(ctx, http.MethodPost, p, nil, ans, &out)
	return out, err
}

// Request states accepted by Requests.
const (
	RequestsPending  = "pending"
	RequestsResolved = "resolved"
)

// Requests lists a session's permission and question requests in the given
// state (RequestsPending, RequestsResolved, or "" for both).
func (c *Client) Requests(ctx context.Context, id, state string) (RequestList, error) {
	p, err := sessionPath(id, "requests")
	if err != nil {
		return RequestList{}, err
	}
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	var out RequestList
	err = c.do(ctx, http.MethodGet, p, q, nil, &out)
	return out, err
}

// Events reads one page of a session's log: up to limit events with seq
// greater than after (limit 0 lets the server choose).
func (c *Client) Events(ctx context.Context, id string, after int64, limit int) (EventPage, error) {
	p, err := sessionPath(id, "events")
	if err != nil {
		return EventPage{}, err
	}
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out EventPage
	err = c.doLimited(ctx, http.MethodGet, p, q, nil, &out, c.pageLimit(cmpOr(limit, lastSeqPage)))
	return out, err
}

// EventsAll calls fn for every event after the given seq, reading the log
// page by page until its end. It stops early when fn returns an error.
func (c *Client) EventsAll(ctx context.Context, id string, after int64, fn func(event.Event) error) error {
	for {
		page, err := c.Events(ctx, id, after, lastSeqPage)
		if err != nil {
			return err
		}
		for _, ev := range page.Events {
			if ev.Seq <= after {
				continue
			}
			if err := fn(ev); err != nil {
				return err
			}
			after = ev.Seq
		}
		if !page.HasMore || len(page.Events) == 0 {
			return nil
		}
		after = max(after, page.NextAfter)
	}
}

// lastSeqPage is the page size LastSeq and EventsAll ask for; the server may
// answer with less.
const lastSeqPage = 1000

// LastSeq returns the seq of the last event of a session's log (0 when it is
// empty). Pass it as after to Stream or WaitTurn before sending a message to
// an existing session, so that only what follows is seen. It reads the log
// to its end, one page at a time.
func (c *Client) LastSeq(ctx context.Context, id string) (int64, error) {
	var last int64
	err := c.EventsAll(ctx, id, 0, func(ev event.Event) error {
		last = ev.Seq
		return nil
	})
	return last, err
}

// sessionPath builds /v1/sessions/{id}[/more...] with each segment escaped.
func sessionPath(id string, more ...string) (string, error) {
	if id == "" {
		return "", errors.New("client: empty session id")
	}
	p := "/v1/sessions/" + url.PathEscape(id)
	for _, s := range more {
		if s == "" {
			return "", errors.New("client: empty request id")
		}
		p += "/" + url.PathEscape(s)
	}
	return p, nil
}

// newRequest builds a request to path (already escaped) with the client's
// headers.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	return req, nil
}

// do sends one JSON request and decodes a JSON answer into out (when not
// nil), bounded by Limits.Answer. Non-2xx answers become *APIError.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	return c.doLimited(ctx, method, path, q, in, out, c.limits.Answer)
}

func cmpOr(n, def int) int {
	if n > 0 {
		return n
	}
	return def
}

// doLimited is do with an answer of at most limit bytes (0: unbounded).
func (c *Client) doLimited(ctx context.Context, method, path string, q url.Values, in, out any, limit int64) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer drainClose(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.readAPIError(resp, method, path)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return decodeAnswer(resp.Body, method, path, out, limit)
}

// decodeAnswer decodes a JSON answer of at most limit bytes (0:
// unbounded) into out.
func decodeAnswer(body io.Reader, method, path string, out any, limit int64) error {
	if limit <= 0 {
		if err := json.NewDecoder(body).Decode(out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if int64(len(b)) > limit {
		return fmt.Errorf("%s %s: answer of more than %d bytes: %w", method, path, limit, ErrTooLarge)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// readAPIError turns a non-2xx answer into an *APIError, reading at most
// Limits.Problem bytes of it.
func (c *Client) readAPIError(resp *http.Response, method, path string) error {
	e := &APIError{Method: method, Path: path}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, c.problemLimit()))
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt == "application/problem+json" || mt == "application/json" {
		_ = json.Unmarshal(b, &e.Problem) // a broken body still yields the status below
	}
	if e.Type == "about:blank" {
		e.Type = ""
	}
	e.Status = resp.StatusCode // the status line is authoritative
	if e.Title == "" {
		e.Title = http.StatusText(resp.StatusCode)
	}
	if e.Detail == "" && mt == "text/plain" {
		e.Detail = strings.TrimSpace(string(b[:min(len(b), 512)]))
	}
	return e
}

// drainClose reads a little of what is left of resp's body so the
// connection can be reused, then closes the body. It takes the response, not
// the body, so that bodyclose sees the body closed.
func drainClose(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}
