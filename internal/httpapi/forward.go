package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/engine"
)

// Owners is an optional ability of an Engine whose store several daemons
// share: which other daemon drives a session's agent. Requests that need
// the agent (every route under /v1/sessions/{id} but the reads the store
// answers) are forwarded to that daemon.
type Owners interface {
	// SessionOwner returns the daemon that drives session id when it is
	// another one; ok is false when it is this one or nobody.
	SessionOwner(ctx context.Context, id string) (owner engine.Owner, ok bool, err error)
}

var _ Owners = (*engine.Manager)(nil)

// forwardedHeader marks a forwarded request: it is never forwarded again,
// so that two daemons that disagree for a moment about the owner cannot
// bounce a request between them.
const forwardedHeader = "Agentbox-Forwarded"

// servedHere are the session routes any daemon answers from the store.
var servedHere = map[string]bool{
	"GET /v1/sessions/{id}":          true,
	"GET /v1/sessions/{id}/events":   true,
	patternStream:                    true,
	"GET /v1/sessions/{id}/requests": true,
}

// forward proxies r to the daemon driving its session when that is another
// daemon, and reports whether it did (the answer is then written).
func (s *server) forward(w http.ResponseWriter, r *http.Request, pattern string) bool {
	own, ok := s.eng.(Owners)
	if !ok || servedHere[pattern] || r.Header.Get(forwardedHeader) != "" {
		return false
	}
	_, path, _ := strings.Cut(pattern, " ")
	if !strings.HasPrefix(path, "/v1/sessions/{id}") {
		return false
	}
	id, ok := sessionIDOf(r.URL)
	if !ok {
		return false
	}
	owner, ok, err := own.SessionOwner(r.Context(), id)
	if err != nil || !ok {
		// Not found and the like: the route's handler answers.
		return false
	}
	target, err := url.Parse(owner.Addr)
	if owner.Addr == "" || err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		writeProblem(w, newProblem(http.StatusConflict, client.ProblemConflict,
			fmt.Sprintf("Session %s is driven by daemon %s, which advertises no address to forward to (its --advertise).", id, owner.Daemon)))
		return true
	}
	logFor(r.Context()).DebugContext(r.Context(), "forwarding to the session's daemon", "session", id, "daemon", owner.Daemon)
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			q := pr.Out.URL.Query()
			if q.Has("access_token") {
				q.Del("access_token")
				pr.Out.URL.RawQuery = q.Encode()
			}
			// The daemons sharing a store share the token: this
			// daemon's own, whatever the client sent.
			pr.Out.Header.Del("Authorization")
			if s.cfg.Token != "" {
				pr.Out.Header.Set("Authorization", "Bearer "+s.cfg.Token)
			}
			pr.Out.Header.Set(forwardedHeader, "1")
			pr.Out.Header.Del("Origin")
		},
		Transport: forwardTransport(),
		// Streams (a process's output, a file watch) pass through as
		// they come.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(r.Context().Err(), context.Canceled) {
				return
			}
			// Its daemon does not answer: it may be gone, and its
			// lease expires soon; then this daemon takes it over.
			wait := max(time.Until(owner.Expires), 0) + time.Second
			writeProblem(w, newProblem(http.StatusServiceUnavailable, client.ProblemUnavailable,
				fmt.Sprintf("Session %s is driven by daemon %s, which does not answer; its lease expires within %s, and then another daemon takes the session over.",
					id, owner.Daemon, wait.Round(time.Second))).
				withHeader("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds())))))
		},
		ModifyResponse: func(resp *http.Response) error {
			// The owner's own request id stays in its logs; the client
			// keeps the one this daemon gave.
			resp.Header.Del("X-Request-Id")
			return nil
		},
	}
	// Full duplex: the owner may answer before this proxy's transport
	// has read the request body's end; see internal/sandbox/egress.
	_ = http.NewResponseController(w).EnableFullDuplex()
	p.ServeHTTP(w, r)
	return true
}

// sessionIDOf returns the {id} of a /v1/sessions/{id}... path.
func sessionIDOf(u *url.URL) (string, bool) {
	rest, ok := strings.CutPrefix(u.EscapedPath(), "/v1/sessions/")
	if !ok {
		return "", false
	}
	seg, _, _ := strings.Cut(rest, "/")
	id, err := url.PathUnescape(seg)
	return id, err == nil && id != ""
}

// forwardTransport carries forwarded requests straight to the owner:
// never through a proxy from the environment (they carry the daemon's
// token).
var forwardTransport = sync.OnceValue(func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return t
})
