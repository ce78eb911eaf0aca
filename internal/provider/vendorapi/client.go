package vendorapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/agentbox/agentbox/internal/provider"
)

// Client makes a vendor's HTTP requests: its base URL, the headers and
// query every request carries (the credential), the bound of each request,
// the bound of a sandbox's start, and the mapping of an error answer to the
// contract's sentinels (StatusError).
type Client struct {
	// Vendor names the API in errors ("e2b answered 429: …").
	Vendor string
	// BaseURL is what a Request's Path is below, without a trailing slash.
	BaseURL string
	// Header and Query are set on every request (the credential, Accept,
	// a scope).
	Header http.Header
	Query  map[string]string
	// HTTP makes every request.
	HTTP *http.Client
	// RequestTimeout bounds each request.
	RequestTimeout time.Duration
	// StartTimeout bounds the wait for a new sandbox's inner daemon
	// (WaitHealthy), and whatever a vendor's start puts under it.
	StartTimeout time.Duration
	// EmptyAnswer: a success answer with an empty body decodes as nothing
	// (rather than as JSON that is not the document's).
	EmptyAnswer bool
}

// Settings are the settings every vendor's Config has, and the vendor's
// defaults for them.
type Settings struct {
	// APIURL is the vendor's API; DefaultAPIURL when empty (BaseURL).
	APIURL, DefaultAPIURL string
	// HTTPClient makes every request; a plain client when nil.
	HTTPClient *http.Client
	// RequestTimeout bounds each request; 30 s when zero.
	RequestTimeout time.Duration
	// StartTimeout is Client.StartTimeout; DefaultStartTimeout when zero.
	StartTimeout, DefaultStartTimeout time.Duration
}

// DefaultRequestTimeout bounds a request when the Config sets no bound.
const DefaultRequestTimeout = 30 * time.Second

// NewClient is vendor's client for s, with header on every request: the
// API URL checked (BaseURL), the defaults filled in.
func NewClient(vendor string, s Settings, header http.Header) (*Client, error) {
	base, err := BaseURL(vendor, s.APIURL, s.DefaultAPIURL)
	if err != nil {
		return nil, err
	}
	c := &Client{Vendor: vendor, BaseURL: base, Header: header, HTTP: s.HTTPClient, RequestTimeout: s.RequestTimeout, StartTimeout: s.StartTimeout}
	if c.HTTP == nil {
		c.HTTP = &http.Client{}
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = s.DefaultStartTimeout
	}
	return c, nil
}

// Endpoint is a client of another API (a service in a sandbox) with c's
// HTTP client and bounds, and nothing else of c's: vendor, base and header
// (its credential) are its own.
func (c *Client) Endpoint(vendor, base string, header http.Header) *Client {
	return &Client{Vendor: vendor, BaseURL: strings.TrimRight(base, "/"), Header: header, HTTP: c.HTTP,
		RequestTimeout: c.RequestTimeout, StartTimeout: c.StartTimeout, EmptyAnswer: c.EmptyAnswer}
}

// Setting is a required setting: the environment variable it comes from,
// and its value.
type Setting struct{ Name, Value string }

// Require is ErrCredentials naming each setting whose value is empty, or
// nil when none is.
func Require(settings ...Setting) error {
	var missing []string
	for _, s := range settings {
		if s.Value == "" {
			missing = append(missing, s.Name)
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s is not set", provider.ErrCredentials, missing[0])
	}
	return fmt.Errorf("%w: %s are not set", provider.ErrCredentials, strings.Join(missing, ", "))
}

// FromEnv is the configuration read makes from the environment (getenv,
// os.Getenv when nil), if check accepts it.
func FromEnv[C any](getenv func(string) string, read func(getenv func(string) string) C, check func(C) error) (C, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	cfg := read(getenv)
	if err := check(cfg); err != nil {
		var none C
		return none, err
	}
	return cfg, nil
}

// Request is one call of a vendor's API.
type Request struct {
	Method string
	// Path is below the client's BaseURL.
	Path string
	// Query is the call's query (the client's is added).
	Query map[string]string
	// Header is set on the request (e.g. a body's Content-Type).
	Header http.Header
	// JSON, when not nil, is the body, as application/json; else Body.
	JSON any
	Body io.Reader
	// Want is the status of success; any 2xx when zero.
	Want int
	// Out, when not nil, is what the answer's JSON is decoded into.
	Out any
	// OutHeader, when not nil, receives the answer's header.
	OutHeader *http.Header
}

// Do makes one request within the client's RequestTimeout: the answer is
// read bounded (MaxAnswer), an error answer is StatusError, no answer is
// TransportError, and a success answer is decoded into r.Out.
func (c *Client) Do(ctx context.Context, r Request) error {
	ctx, cancel := context.WithTimeout(ctx, c.RequestTimeout)
	defer cancel()
	body, hdr := r.Body, r.Header.Clone()
	if r.JSON != nil {
		b, err := json.Marshal(r.JSON)
		if err != nil {
			return err
		}
		if hdr == nil {
			hdr = http.Header{}
		}
		body = bytes.NewReader(b)
		hdr.Set("Content-Type", "application/json")
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, c.BaseURL+r.Path, body)
	if err != nil {
		return err
	}
	q := req.URL.Query()
	for k, v := range r.Query {
		q.Set(k, v)
	}
	for k, v := range c.Query {
		q.Set(k, v)
	}
	req.URL.RawQuery = q.Encode()
	for _, h := range []http.Header{hdr, c.Header} {
		for k, v := range h {
			req.Header[http.CanonicalHeaderKey(k)] = v
		}
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return TransportError(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswer+1))
	if err != nil {
		return TransportError(err)
	}
	if len(b) > MaxAnswer {
		return fmt.Errorf("%w: answer larger than %d bytes", provider.ErrUnavailable, MaxAnswer)
	}
	if ok := resp.StatusCode == r.Want || (r.Want == 0 && resp.StatusCode >= 200 && resp.StatusCode <= 299); !ok {
		return StatusError(c.Vendor, resp.StatusCode, b)
	}
	if r.OutHeader != nil {
		*r.OutHeader = resp.Header
	}
	if r.Out == nil || (c.EmptyAnswer && len(bytes.TrimSpace(b)) == 0) {
		return nil
	}
	if err := json.Unmarshal(b, r.Out); err != nil {
		return fmt.Errorf("%w: an answer that is not the documented JSON: %w", provider.ErrUnavailable, err)
	}
	return nil
}
