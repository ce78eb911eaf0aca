package fakeapi

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/client"
)

// Limits of the secret fields, as the API's schema says.
const (
	maxSecretValue  = 16384
	maxSecretHost   = 253
	maxSecretHeader = 128
	maxSecretFormat = 256
	maxAllowRules   = 1024
)

var secretNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// secret is a stored secret; value never leaves the fake except through
// Server.SecretValue.
type secret struct {
	info  client.SecretInfo
	value string
}

// AddSandboxedSession creates an idle session of the agent "mock" that has
// a sandbox with network n (mode proxy and default deny when empty), and
// returns its id. Sessions made by AddSession, or created without a policy,
// have no sandbox: their network endpoints answer 409 no-sandbox.
func (s *Server) AddSandboxedSession(n client.SessionNetwork) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.newSessionLocked(client.CreateSession{Agent: "mock"})
	ss.network = newNetwork(n)
	return ss.ID
}

// SecretValue returns the value stored for a secret, for tests of what a
// client sent; the API never returns it.
func (s *Server) SecretValue(name string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec, ok := s.secrets[name]
	return sec.value, ok
}

// newNetwork fills in the defaults of a sandbox's network.
func newNetwork(n client.SessionNetwork) *client.SessionNetwork {
	if n.Mode == "" {
		n.Mode = "proxy"
	}
	if n.Default == "" && n.Mode == "proxy" {
		n.Default = "deny"
	}
	n.Allow = slices.Clone(n.Allow)
	if n.Allow == nil {
		n.Allow = []string{}
	}
	n.Deny = slices.Clone(n.Deny)
	n.Live = false
	return &n
}

// networkLocked returns the answer for a session's network: Live when the
// session is live behind the egress proxy.
func networkLocked(ss *session) client.SessionNetwork {
	n := *ss.network
	n.Allow = slices.Clone(n.Allow)
	n.Deny = slices.Clone(n.Deny)
	n.Live = n.Mode == "proxy" && live(ss.Status)
	return n
}

// sandboxed finds the session of the request's {id}, answering 404 or 409
// no-sandbox; on success s.mu is held and the caller must unlock it.
func (s *Server) sandboxed(w http.ResponseWriter, r *http.Request) *session {
	ss := s.lookup(w, r)
	if ss == nil {
		return nil
	}
	if ss.network == nil {
		s.mu.Unlock()
		problem(w, http.StatusConflict, "no-sandbox", "session "+ss.ID+" has no sandbox, so no network rules")
		return nil
	}
	return ss
}

func (s *Server) getNetwork(w http.ResponseWriter, r *http.Request) {
	ss := s.sandboxed(w, r)
	if ss == nil {
		return
	}
	out := networkLocked(ss)
	s.mu.Unlock()
	reply(w, http.StatusOK, out)
}

func (s *Server) setNetwork(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Allow *[]string `json:"allow"`
	}
	if !decode(w, r, &body) {
		return
	}
	if body.Allow == nil {
		problem(w, http.StatusUnprocessableEntity, "validation", "validation failed", client.ProblemField{Location: "body.allow", Message: "expected required property allow to be present"})
		return
	}
	allow := *body.Allow
	if len(allow) > maxAllowRules {
		problem(w, http.StatusUnprocessableEntity, "validation", "validation failed", client.ProblemField{Location: "body.allow", Message: fmt.Sprintf("expected array length <= %d", maxAllowRules)})
		return
	}
	ss := s.sandboxed(w, r)
	if ss == nil {
		return
	}
	defer s.mu.Unlock()
	if ss.network.Mode != "proxy" {
		problem(w, http.StatusUnprocessableEntity, "policy", "the session's network mode is "+ss.network.Mode+", which has no egress proxy to take rules")
		return
	}
	for i, rule := range allow {
		if rule == "" || strings.ContainsAny(rule, " \t\r\n\x00") {
			problem(w, http.StatusUnprocessableEntity, "policy", fmt.Sprintf("network.allow[%d]: %q is not a rule (host[:port], *.domain[:port], *, CIDR[:port])", i, rule))
			return
		}
		if !s.covered(rule) {
			problem(w, http.StatusUnprocessableEntity, "policy", fmt.Sprintf("network.allow[%d]: %s is not permitted by the global policy (global network.allow: [%s])", i, rule, strings.Join(s.cfg.GlobalAllow, ", ")))
			return
		}
	}
	ss.network.Allow = slices.Clone(allow)
	out := networkLocked(ss)
	reply(w, http.StatusOK, out)
}

// covered says whether the operator's global allow list covers rule: an
// equal rule, "*", or "*.domain" (without a port) for a name in the domain.
func (s *Server) covered(rule string) bool {
	if s.cfg.GlobalAllow == nil {
		return true
	}
	for _, g := range s.cfg.GlobalAllow {
		if g == "*" || g == rule {
			return true
		}
		if d, ok := strings.CutPrefix(g, "*."); ok && !strings.Contains(d, ":") {
			host, _, _ := strings.Cut(strings.TrimPrefix(rule, "*."), ":")
			if strings.HasSuffix(host, "."+d) {
				return true
			}
		}
	}
	return false
}

func (s *Server) listSecrets(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := client.SecretList{Secrets: []client.SecretInfo{}}
	for _, sec := range s.secrets {
		out.Secrets = append(out.Secrets, sec.info)
	}
	s.mu.Unlock()
	slices.SortFunc(out.Secrets, func(a, b client.SecretInfo) int { return strings.Compare(a.Name, b.Name) })
	reply(w, http.StatusOK, out)
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var body client.PutSecret
	if !decode(w, r, &body) {
		return
	}
	if fields := checkSecret(name, body); len(fields) > 0 {
		problem(w, http.StatusUnprocessableEntity, "validation", "invalid secret "+name, fields...)
		return
	}
	info := client.SecretInfo{
		Name: name, Host: body.Host, Header: body.Header, Format: body.Format,
		Source: "api", Placeholder: "agentbox-placeholder-" + name,
	}
	s.mu.Lock()
	s.secrets[name] = secret{info: info, value: body.Value}
	s.mu.Unlock()
	reply(w, http.StatusOK, info)
}

// checkSecret validates a secret as the daemon does. Its messages never
// hold the value.
func checkSecret(name string, b client.PutSecret) []client.ProblemField {
	var fs []client.ProblemField
	bad := func(loc, msg string) { fs = append(fs, client.ProblemField{Location: loc, Message: msg}) }
	if !secretNameRE.MatchString(name) {
		bad("path.name", "1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit")
	}
	switch {
	case b.Value == "":
		bad("body.value", "value is empty")
	case len(b.Value) > maxSecretValue:
		bad("body.value", fmt.Sprintf("expected length <= %d", maxSecretValue))
	case strings.ContainsAny(b.Value, "\r\n\x00"):
		bad("body.value", "value holds a line break or NUL")
	}
	if b.Host == "" || len(b.Host) > maxSecretHost || b.Host == "*" || strings.ContainsAny(b.Host, ":/ \t\r\n\x00") ||
		strings.Contains(strings.TrimPrefix(b.Host, "*."), "*") {
		bad("body.host", fmt.Sprintf("host %q: one host name or *.domain, without a port", b.Host))
	}
	if b.Header == "" || len(b.Header) > maxSecretHeader || strings.IndexFunc(b.Header, func(r rune) bool {
		return (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-'
	}) >= 0 {
		bad("body.header", fmt.Sprintf("header %q: not a header name", b.Header))
	}
	if len(b.Format) > maxSecretFormat {
		bad("body.format", fmt.Sprintf("expected length <= %d", maxSecretFormat))
	} else if strings.ContainsAny(b.Format, "\r\n\x00") {
		bad("body.format", "format holds a line break or NUL")
	}
	return fs
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s.mu.Lock()
	_, ok := s.secrets[name]
	delete(s.secrets, name)
	s.mu.Unlock()
	if !ok {
		problem(w, http.StatusNotFound, "not-found", fmt.Sprintf("secret %q not found", name))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
