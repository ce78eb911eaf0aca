package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/client"
)

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
	if !wildcard && !slices.Contains(s.cfg.CORSOrigins, origin) {
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
