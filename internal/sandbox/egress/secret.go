package egress

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/internal/errkind"
)

// Secret is a credential the egress proxy adds to requests for its host, so
// that the sandbox never holds it: inside, the environment variable that
// would carry it holds Placeholder(Name) instead.
//
// A secret is injected into plain-HTTP requests the proxy forwards and into
// requests on its routes (the model APIs of agents). HTTPS through CONNECT
// or SOCKS5 is end-to-end TLS that the proxy does not open, unless the
// secret opts in to TLS interception (InterceptTLS): then a tunnel to its
// host, in a sandbox created with a CA (Config.CA), is terminated with a
// certificate of that CA, and the secret is added to each request inside
// (see intercept.go).
type Secret struct {
	Name string `json:"name"`
	// Value is the credential. It is never logged, audited, stored on
	// disk by agentbox, or shown by the API.
	Value string `json:"-"`
	// Host is the one host (exact, or "*.domain") the secret is sent to.
	Host string `json:"host"`
	// Header is the request header that carries it, e.g. "Authorization".
	Header string `json:"header"`
	// Format is the header's value with "{value}" standing for Value,
	// e.g. "Bearer {value}". Empty means "{value}".
	Format string `json:"format,omitempty"`
	// InterceptTLS opts the secret in to TLS interception: HTTPS tunnels
	// to Host are opened by the proxy, which adds the secret to each
	// request inside, instead of passing through end to end.
	InterceptTLS bool `json:"intercept_tls,omitempty"`
}

// ErrInvalidSecret is returned (wrapped) by Secret.Validate and
// Secrets.Put.
var ErrInvalidSecret = errkind.New(errkind.Invalid, "invalid secret")

var secretNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`) })

// Validate checks the secret's fields (not its value's meaning).
func (s Secret) Validate() error {
	var errs []error
	if !secretNameRE().MatchString(s.Name) {
		errs = append(errs, fmt.Errorf("name %q: 1 to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", s.Name))
	}
	if s.Value == "" {
		errs = append(errs, errors.New("value is empty"))
	}
	if strings.ContainsAny(s.Value, "\r\n\x00") {
		errs = append(errs, errors.New("value holds a line break or NUL"))
	}
	if r, err := ParseRule(s.Host); err != nil || !r.IsName() || r.Host == "*" || r.Port != 0 {
		errs = append(errs, fmt.Errorf("host %q: one host name or *.domain, without a port", s.Host))
	}
	if s.Header == "" || strings.IndexFunc(s.Header, func(r rune) bool {
		return (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-'
	}) >= 0 {
		errs = append(errs, fmt.Errorf("header %q: not a header name", s.Header))
	}
	if strings.ContainsAny(s.Format, "\r\n\x00") {
		errs = append(errs, errors.New("format holds a line break or NUL"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w %s: %w", ErrInvalidSecret, s.Name, errors.Join(errs...))
	}
	return nil
}

// Placeholder is what a sandbox sees instead of the secret called name.
// It is not secret: it tells the proxy which secret to put in its place.
func Placeholder(name string) string { return "agentbox-placeholder-" + name }

// headerValue is the value of the secret's header.
func (s Secret) headerValue() string {
	if s.Format == "" {
		return s.Value
	}
	return strings.ReplaceAll(s.Format, "{value}", s.Value)
}

// matches reports whether the secret is bound to host (a name, lower case).
func (s Secret) matches(host string) bool {
	r, err := ParseRule(s.Host)
	return err == nil && r.matchName(host)
}

// inject sets, on a request for host, the header of every secret bound to
// host, and replaces each such secret's placeholder wherever a header
// holds it. It returns the names of the secrets it used. Secrets bound to
// other hosts are left out: their placeholders pass unchanged and reveal
// nothing.
func inject(h http.Header, host string, secrets []Secret) []string {
	var used []string
	for _, s := range secrets {
		if !s.matches(host) {
			continue
		}
		injectOne(h, s)
		used = append(used, s.Name)
	}
	return used
}

// injectOne sets s's header to its value, replacing what the sandbox sent
// there. Nothing else is touched: a placeholder the sandbox put in any
// other header goes out as it is, so that an upstream that echoes a header
// back cannot hand the value to the sandbox.
func injectOne(h http.Header, s Secret) {
	h.Set(s.Header, s.headerValue())
}

// SecretSource finds the daemon's secrets by name.
type SecretSource interface {
	Secret(name string) (Secret, bool)
}

// Secrets holds the daemon's secrets in memory only: values given on the
// command line's files and environment are read at start, values given
// through the API live until they are deleted or the daemon stops, and
// none is ever written to disk. It is safe for concurrent use.
type Secrets struct {
	mu sync.RWMutex
	m  map[string]secretEntry
}

type secretEntry struct {
	Secret
	source string
}

// SecretInfo describes a secret without its value.
type SecretInfo struct {
	Name   string `json:"name"`
	Host   string `json:"host"`
	Header string `json:"header"`
	Format string `json:"format,omitempty"`
	// InterceptTLS: HTTPS tunnels to Host are intercepted to add it.
	InterceptTLS bool `json:"intercept_tls,omitempty"`
	// Source is where the value came from: "env:NAME", "file:PATH" or "api".
	Source string `json:"source"`
	// Placeholder is what sandboxes see instead of the value.
	Placeholder string `json:"placeholder"`
}

// NewSecrets returns an empty store.
func NewSecrets() *Secrets { return &Secrets{m: map[string]secretEntry{}} }

// Put adds or replaces a secret after validating it.
func (s *Secrets) Put(sec Secret, source string) error {
	if err := sec.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[sec.Name] = secretEntry{sec, source}
	return nil
}

// Delete removes a secret and reports whether it existed.
func (s *Secrets) Delete(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[name]
	delete(s.m, name)
	return ok
}

// Secret implements SecretSource.
func (s *Secrets) Secret(name string) (Secret, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.m[name]
	return e.Secret, ok
}

// List describes every secret, sorted by name, without values.
func (s *Secrets) List() []SecretInfo {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]SecretInfo, 0, len(s.m))
	for _, e := range s.m {
		out = append(out, e.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Info describes one secret without its value.
func (s *Secrets) Info(name string) (SecretInfo, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.m[name]
	return e.info(), ok
}

func (e secretEntry) info() SecretInfo {
	return SecretInfo{Name: e.Name, Host: e.Host, Header: e.Header, Format: e.Format, InterceptTLS: e.InterceptTLS, Source: e.source, Placeholder: Placeholder(e.Name)}
}
