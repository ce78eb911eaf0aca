package docker

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The Engine API versions the client speaks: it uses the daemon's version
// (the API-Version header of GET /_ping), capped at apiMax, and refuses a
// daemon older than apiMin. Everything engine sends is in the API from
// apiMin on (testdata/engine-api.yaml is the document it follows).
const (
	apiMin = "1.41"
	apiMax = "1.47"
)

// Bounds on what engine reads from the daemon: a JSON answer, an error
// answer, and a build's whole progress stream.
const (
	maxAnswer      = 4 << 20
	maxErrorAnswer = 64 << 10
	maxBuildOutput = 64 << 20
)

// defaultHost is where the Docker daemon listens when neither Config.Host
// nor DOCKER_HOST names it.
const defaultHost = "unix:///var/run/docker.sock"

// engine is a client of the Docker Engine API, for the calls the provider
// makes, over the unix socket or TCP address the daemon listens on.
type engine struct {
	host string // the daemon's address, as configured (for errors)
	base string // scheme://authority of the requests' URLs
	http *http.Client

	mu      sync.Mutex
	version string // the negotiated API version; empty until negotiated
}

// newEngine is the client for host (empty: DOCKER_HOST, else the default
// socket). With DOCKER_TLS_VERIFY set, a tcp host is spoken to over TLS
// with DOCKER_CERT_PATH's ca.pem, cert.pem and key.pem (as docker does).
func newEngine(host string) (*engine, error) {
	if host == "" {
		host = os.Getenv("DOCKER_HOST")
	}
	if host == "" {
		host = defaultHost
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("docker host %q: %w", host, err)
	}
	tr := &http.Transport{
		MaxIdleConns:          8,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 0, // a build answers when it is done: ctx bounds it
	}
	e := &engine{host: host, http: &http.Client{Transport: tr}}
	switch u.Scheme {
	case "unix":
		sock := u.Path
		if sock == "" || !filepath.IsAbs(sock) {
			return nil, fmt.Errorf("docker host %q: want unix:///absolute/path", host)
		}
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
		e.base = "http://docker"
	case "tcp", "http", "https":
		if u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("docker host %q: want tcp://host:port", host)
		}
		e.base = "http://" + u.Host
		if u.Scheme == "https" || os.Getenv("DOCKER_TLS_VERIFY") != "" {
			cfg, err := tlsConfig(os.Getenv("DOCKER_CERT_PATH"))
			if err != nil {
				return nil, fmt.Errorf("docker host %q: %w", host, err)
			}
			tr.TLSClientConfig = cfg
			e.base = "https://" + u.Host
		}
	default:
		return nil, fmt.Errorf("docker host %q: the scheme %q is not supported (unix, tcp)", host, u.Scheme)
	}
	return e, nil
}

// tlsConfig verifies the daemon with dir/ca.pem and presents dir/cert.pem
// and dir/key.pem (dir empty: ~/.docker).
func tlsConfig(dir string) (*tls.Config, error) {
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, err
		}
		dir = filepath.Join(home, ".docker")
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("TLS: no certificate in %s", filepath.Join(dir, "ca.pem"))
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err != nil {
		return nil, fmt.Errorf("TLS: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

func (e *engine) close() { e.http.CloseIdleConnections() }

// Error kinds of the daemon's answers, from their HTTP status (the Engine
// API's convention); mapErr turns them into the contract's sentinels.
var (
	errNotFound     = errors.New("not found")
	errUnauthorized = errors.New("unauthorized")
	errForbidden    = errors.New("forbidden")
	errInvalid      = errors.New("invalid argument")
	errConflict     = errors.New("conflict")
	errExhausted    = errors.New("resource exhausted")
	errDaemon       = errors.New("daemon error")
)

// apiError is an error answer of the daemon: its status and message.
type apiError struct {
	status  int
	message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("Error response from daemon (%d): %s", e.status, e.message)
}

// Is matches the kind of the status.
func (e *apiError) Is(target error) bool { return statusKind(e.status) == target }

func statusKind(status int) error {
	switch status {
	case http.StatusNotFound:
		return errNotFound
	case http.StatusUnauthorized:
		return errUnauthorized
	case http.StatusForbidden:
		return errForbidden
	case http.StatusBadRequest:
		return errInvalid
	case http.StatusConflict:
		return errConflict
	case http.StatusTooManyRequests, http.StatusInsufficientStorage:
		return errExhausted
	}
	return errDaemon
}

// connError is a request that reached no daemon (nothing listens, the
// connection broke before an answer).
type connError struct{ err error }

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// do sends the request and returns the answer when its status is 2xx; an
// error answer is an *apiError with the daemon's message. versioned
// prefixes the path with the negotiated API version.
func (e *engine) do(ctx context.Context, method, path string, q url.Values, body io.Reader, header http.Header, versioned bool) (*http.Response, error) {
	if versioned {
		v, err := e.negotiate(ctx)
		if err != nil {
			return nil, err
		}
		path = "/v" + v + path
	}
	u := e.base + (&url.URL{Path: path}).EscapedPath()
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	res, err := e.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, &connError{err}
	}
	if res.StatusCode/100 != 2 {
		defer res.Body.Close()
		return nil, &apiError{status: res.StatusCode, message: errorMessage(io.LimitReader(res.Body, maxErrorAnswer))}
	}
	return res, nil
}

// errorMessage is the message of an error answer: {"message": ...}, else
// its text.
func errorMessage(r io.Reader) string {
	b, _ := io.ReadAll(r)
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &m) == nil && m.Message != "" {
		return m.Message
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return s
	}
	return "(no message)"
}

// call does the request and decodes the JSON answer into out (nil: the
// answer is read and dropped), reading at most maxAnswer bytes.
func (e *engine) call(ctx context.Context, method, path string, q url.Values, in, out any) error {
	var body io.Reader
	var h http.Header
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		h = http.Header{"Content-Type": {"application/json"}}
	}
	res, err := e.do(ctx, method, path, q, body, h, true)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	r := io.LimitReader(res.Body, maxAnswer)
	if out == nil {
		_, err = io.Copy(io.Discard, r)
		return err
	}
	if err := json.NewDecoder(r).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

// negotiate returns the API version to speak: the daemon's (GET /_ping's
// API-Version), capped at apiMax; a daemon below apiMin is refused.
func (e *engine) negotiate(ctx context.Context) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.version != "" {
		return e.version, nil
	}
	v, err := e.ping(ctx)
	if err != nil {
		return "", err
	}
	if v == "" {
		v = apiMin
	}
	if versionLess(v, apiMin) {
		return "", fmt.Errorf("%w: the Docker daemon's API version %s is older than %s, the oldest this client speaks", errDaemon, v, apiMin)
	}
	if versionLess(apiMax, v) {
		v = apiMax
	}
	e.version = v
	return v, nil
}

// ping is GET /_ping: the daemon's API version.
func (e *engine) ping(ctx context.Context) (string, error) {
	res, err := e.do(ctx, http.MethodGet, "/_ping", nil, nil, nil, false)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<10))
	return res.Header.Get("Api-Version"), nil
}

// versionLess compares API versions "major.minor".
func versionLess(a, b string) bool {
	pa, pb := versionParts(a), versionParts(b)
	if pa[0] != pb[0] {
		return pa[0] < pb[0]
	}
	return pa[1] < pb[1]
}

func versionParts(v string) [2]int {
	maj, minor, _ := strings.Cut(v, ".")
	a, _ := strconv.Atoi(maj)
	b, _ := strconv.Atoi(minor)
	return [2]int{a, b}
}

// serverVersion is GET /version: the daemon's version and API version.
func (e *engine) serverVersion(ctx context.Context) (engineVersion, error) {
	var v engineVersion
	err := e.call(ctx, http.MethodGet, "/version", nil, nil, &v)
	return v, err
}

type engineVersion struct {
	Version    string `json:"Version"`
	APIVersion string `json:"ApiVersion"`
}

// runtimes is GET /info's Runtimes: the names of the container runtimes
// the daemon has registered.
func (e *engine) runtimes(ctx context.Context) (map[string]json.RawMessage, error) {
	info, err := e.info(ctx)
	return info.Runtimes, err
}

// daemonInfo is what the provider reads of GET /info.
type daemonInfo struct {
	Runtimes map[string]json.RawMessage `json:"Runtimes"`
	// NCPU is how many CPUs the daemon's containers can use: a CPU quota
	// above it is refused by the daemon.
	NCPU int `json:"NCPU"`
}

func (e *engine) info(ctx context.Context) (daemonInfo, error) {
	var info daemonInfo
	err := e.call(ctx, http.MethodGet, "/info", nil, nil, &info)
	return info, err
}

// errPathArg is an image name or container id that cannot be a segment of
// a request's path.
var errPathArg = errors.New("not an image reference or container id")

// pathArg checks that s (an image reference or a container id or name) is
// made of the characters references have and has no "." or ".." segment,
// so that it names one resource and no other endpoint.
func pathArg(s string) error {
	if s == "" || len(s) > 512 {
		return fmt.Errorf("%w %q: %w", errInvalid, s, errPathArg)
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:/@", r)
		if !ok {
			return fmt.Errorf("%w %q: %w", errInvalid, s, errPathArg)
		}
	}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w %q: %w", errInvalid, s, errPathArg)
		}
	}
	return nil
}

// imageInspect is GET /images/{name}/json; only its success matters.
func (e *engine) imageInspect(ctx context.Context, name string) error {
	if err := pathArg(name); err != nil {
		return err
	}
	return e.call(ctx, http.MethodGet, "/images/"+name+"/json", nil, nil, nil)
}

// buildOptions are the query of POST /build the provider uses.
type buildOptions struct {
	tag         string
	networkMode string
	labels      map[string]string
}

// imageBuild is POST /build with the tar context: the classic builder
// (version=1), intermediate containers removed, no pull. The caller reads
// (and closes) the answer's JSON progress stream.
func (e *engine) imageBuild(ctx context.Context, tarContext io.Reader, o buildOptions) (io.ReadCloser, error) {
	labels, err := json.Marshal(o.labels)
	if err != nil {
		return nil, err
	}
	q := url.Values{
		"t":           {o.tag},
		"rm":          {"1"},
		"forcerm":     {"1"},
		"networkmode": {o.networkMode},
		"version":     {"1"},
		"labels":      {string(labels)},
	}
	res, err := e.do(ctx, http.MethodPost, "/build", q, tarContext, http.Header{"Content-Type": {"application/x-tar"}}, true)
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}

// containerCreate is POST /containers/create: the new container's id.
func (e *engine) containerCreate(ctx context.Context, name string, cfg createRequest) (string, error) {
	var out struct {
		ID string `json:"Id"`
	}
	if err := e.call(ctx, http.MethodPost, "/containers/create", url.Values{"name": {name}}, cfg, &out); err != nil {
		return "", err
	}
	if out.ID == "" {
		return "", fmt.Errorf("%w: create container: the answer has no Id", errDaemon)
	}
	return out.ID, nil
}

// containerStart is POST /containers/{id}/start.
func (e *engine) containerStart(ctx context.Context, id string) error {
	if err := pathArg(id); err != nil {
		return err
	}
	return e.call(ctx, http.MethodPost, "/containers/"+id+"/start", nil, nil, nil)
}

// containerInspect is GET /containers/{id}/json.
func (e *engine) containerInspect(ctx context.Context, id string) (inspected, error) {
	if err := pathArg(id); err != nil {
		return inspected{}, err
	}
	var c inspected
	err := e.call(ctx, http.MethodGet, "/containers/"+id+"/json", nil, nil, &c)
	return c, err
}

// containerRemove is DELETE /containers/{id}, forced, with its anonymous
// volumes.
func (e *engine) containerRemove(ctx context.Context, id string) error {
	if err := pathArg(id); err != nil {
		return err
	}
	return e.call(ctx, http.MethodDelete, "/containers/"+id, url.Values{"force": {"1"}, "v": {"1"}}, nil, nil)
}

// containerList is GET /containers/json?all=1 filtered by label: the ids.
func (e *engine) containerList(ctx context.Context, label string) ([]string, error) {
	filters, err := json.Marshal(map[string][]string{"label": {label}})
	if err != nil {
		return nil, err
	}
	var out []struct {
		ID string `json:"Id"`
	}
	if err := e.call(ctx, http.MethodGet, "/containers/json", url.Values{"all": {"1"}, "filters": {string(filters)}}, nil, &out); err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(out))
	for _, c := range out {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// containerLogs is GET /containers/{id}/logs of stdout and stderr, the
// last tail lines; the answer is multiplexed (the container has no tty):
// the caller reads it with demux.
func (e *engine) containerLogs(ctx context.Context, id string, tail int) (io.ReadCloser, error) {
	if err := pathArg(id); err != nil {
		return nil, err
	}
	q := url.Values{"stdout": {"1"}, "stderr": {"1"}, "tail": {strconv.Itoa(tail)}}
	res, err := e.do(ctx, http.MethodGet, "/containers/"+id+"/logs", q, nil, nil, true)
	if err != nil {
		return nil, err
	}
	return res.Body, nil
}
