package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/client"
)

// The API answers only requests meant for it. A web page can make a browser
// send requests to 127.0.0.1 in two ways, and both are refused before
// authentication:
//
//   - DNS rebinding: the page's own name (attacker.example) is made to
//     resolve to 127.0.0.1, so the browser sends "Host: attacker.example"
//     and lets the page read the answers. checkHost accepts only the names
//     this daemon is reached by.
//   - Cross-origin requests: the browser sends "Origin" (and
//     "Sec-Fetch-Site"); checkOrigin refuses any origin CORS does not
//     allow, even for requests CORS would let through unread (form posts).

// checkHost refuses a request whose Host is not this daemon's: for a TCP
// listener, Host must name a loopback address, localhost, the unspecified
// address (0.0.0.0 or ::), the address the connection arrived at, or an
// entry of Config.AllowedHosts, and (but for an allowed name without a
// port) carry the listener's port. The unspecified address is the daemon's
// own URL when it listens on a wildcard address (--listen 0.0.0.0:7777
// logs http://[::]:7777 or http://0.0.0.0:7777, and the /v1/acp backend
// dials it); a client that dials it reaches this host, and it is as safe
// as a loopback address: a rebinding page's Host is its own name, never an
// address literal. Unix socket
// listeners are not checked: no DNS name can lead a browser to them, and
// neither are requests served without a listener (in-process calls).
func (s *server) checkHost(r *http.Request) *problem {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok || slices.Contains(s.cfg.AllowedHosts, "*") {
		return nil
	}
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		host, port = r.Host, "80"
	}
	host = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
	if host != "" {
		for _, a := range s.cfg.AllowedHosts {
			a = strings.ToLower(a)
			if a == host || a == net.JoinHostPort(host, port) || a == host+":"+port {
				return nil
			}
		}
		if port == strconv.Itoa(local.Port) {
			if host == "localhost" {
				return nil
			}
			if ip, err := netip.ParseAddr(host); err == nil {
				ip = ip.Unmap().WithZone("")
				if la, ok := netip.AddrFromSlice(local.IP); ip.IsLoopback() || ip.IsUnspecified() || ok && la.Unmap() == ip {
					return nil
				}
			}
		}
	}
	return newProblem(http.StatusForbidden, client.ProblemForbidden,
		"The Host header "+strconv.Quote(r.Host)+" does not name this daemon; a name it is reached by must be allowed with --allowed-hosts.")
}

// checkOrigin refuses a browser request from another origin unless CORS
// allows that origin: one with an Origin header that is neither this
// daemon's own origin nor in Config.CORSOrigins, or, without Origin, one
// the browser marks "Sec-Fetch-Site: cross-site" or "same-site" (another
// port of localhost is the same site).
func (s *server) checkOrigin(r *http.Request) *problem {
	origin := r.Header.Get("Origin")
	if origin == "" {
		switch r.Header.Get("Sec-Fetch-Site") {
		case "cross-site", "same-site":
			return newProblem(http.StatusForbidden, client.ProblemForbidden, "Requests from other sites are not allowed.")
		}
		return nil
	}
	if s.corsAllows(origin) || origin == "http://"+r.Host {
		return nil
	}
	return newProblem(http.StatusForbidden, client.ProblemForbidden,
		"Requests from the browser origin "+strconv.Quote(origin)+" are not allowed; allow it with --cors-origins.")
}

// corsAllows reports whether CORS lets origin call the API.
func (s *server) corsAllows(origin string) bool {
	return slices.Contains(s.cfg.CORSOrigins, "*") || slices.Contains(s.cfg.CORSOrigins, origin)
}

// authenticate checks the bearer token. It returns nil when the request may
// proceed and the 401 problem to send otherwise. allowQuery accepts the
// token in ?access_token= too, for EventSource clients that cannot set
// headers; only the event stream route passes it.
func (s *server) authenticate(r *http.Request, allowQuery bool) *problem {
	if s.cfg.Token == "" {
		return nil
	}
	var tok string
	q := r.URL.Query()
	switch h := r.Header.Get("Authorization"); {
	case h != "":
		t, ok := parseBearer(h)
		if !ok {
			return invalidToken()
		}
		tok = t
	case allowQuery && q.Has("access_token"):
		tok = q.Get("access_token")
	default:
		return newProblem(http.StatusUnauthorized, client.ProblemUnauthorized, "A bearer token is required.").
			withHeader("WWW-Authenticate", `Bearer realm="agentbox"`)
	}
	if !tokenEqual(tok, s.cfg.Token) {
		return invalidToken()
	}
	return nil
}

func invalidToken() *problem {
	return newProblem(http.StatusUnauthorized, client.ProblemUnauthorized, "The bearer token is not valid.").
		withHeader("WWW-Authenticate", `Bearer realm="agentbox", error="invalid_token"`)
}

// tokenEqual compares in constant time; hashing first hides the length too.
func tokenEqual(got, want string) bool {
	a := sha256.Sum256([]byte(got))
	b := sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// parseBearer extracts the token of an "Authorization: Bearer <token>"
// header value (RFC 6750 §2.1). The scheme is case-insensitive. The token is
// checked more loosely than RFC 6750's token68: any visible ASCII, so that
// operator-chosen tokens work; it cannot contain spaces.
func parseBearer(h string) (string, bool) {
	scheme, tok, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	if !validToken(tok) {
		return "", false
	}
	return tok, true
}

// validToken reports whether s is non-empty visible ASCII (0x21-0x7e).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// cors applies the CORS policy. It returns true when it has answered the
// request itself (a preflight).
func (s *server) cors(w http.ResponseWriter, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if len(s.cfg.CORSOrigins) == 0 || origin == "" {
		return false
	}
	h := w.Header()
	h.Add("Vary", "Origin")
	wildcard := slices.Contains(s.cfg.CORSOrigins, "*")
	if !s.corsAllows(origin) {
		return false
	}
	if wildcard {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
	}
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Add("Vary", "Access-Control-Request-Method")
		h.Add("Vary", "Access-Control-Request-Headers")
		h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, Accept")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	h.Set("Access-Control-Expose-Headers", "Location, Retry-After, WWW-Authenticate, X-Request-Id")
	return false
}
