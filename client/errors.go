package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ProblemTypeBase prefixes every problem type URI the daemon sends.
const ProblemTypeBase = "https://agentbox.dev/problems/"

// Problem type URIs, as found in Problem.Type, with the status each comes
// with.
const (
	ProblemBadRequest           = ProblemTypeBase + "bad-request"            // 400: malformed JSON, missing body
	ProblemValidation           = ProblemTypeBase + "validation"             // 422: the input breaks the schema or a rule
	ProblemUnauthorized         = ProblemTypeBase + "unauthorized"           // 401: missing or wrong bearer token
	ProblemForbidden            = ProblemTypeBase + "forbidden"              // 403: the Host or Origin is not one the daemon answers
	ProblemNotFound             = ProblemTypeBase + "not-found"              // 404: no such route, session, permission or question
	ProblemMethodNotAllowed     = ProblemTypeBase + "method-not-allowed"     // 405
	ProblemNotAcceptable        = ProblemTypeBase + "not-acceptable"         // 406
	ProblemRequestTimeout       = ProblemTypeBase + "request-timeout"        // 408: the body came too slowly
	ProblemConflict             = ProblemTypeBase + "conflict"               // 409: generic conflict
	ProblemPayloadTooLarge      = ProblemTypeBase + "payload-too-large"      // 413
	ProblemUnsupportedMediaType = ProblemTypeBase + "unsupported-media-type" // 415: body is not application/json
	ProblemUnknownAgent         = ProblemTypeBase + "unknown-agent"          // 422: no agent with that name
	ProblemBusy                 = ProblemTypeBase + "busy"                   // 409: a turn is already running
	ProblemNoTurn               = ProblemTypeBase + "no-turn"                // 409: interrupt with no turn running
	ProblemLive                 = ProblemTypeBase + "live"                   // 409: resume of a session that is live: send messages to it directly
	ProblemNotResumable         = ProblemTypeBase + "not-resumable"          // 409: the agent cannot resume the session
	ProblemNotLive              = ProblemTypeBase + "not-live"               // 409: the session has ended
	ProblemNotPausable          = ProblemTypeBase + "not-pausable"           // 409: pause of a session that does not run on a provider whose sandboxes pause
	ProblemNoSandbox            = ProblemTypeBase + "no-sandbox"             // 409: the session has no sandbox (so no network rules)
	ProblemAlreadyResolved      = ProblemTypeBase + "already-resolved"       // 409: the request was answered already
	ProblemUnavailable          = ProblemTypeBase + "unavailable"            // 503: the agent cannot run here
	ProblemPolicy               = ProblemTypeBase + "policy"                 // 422: the sandbox policy is invalid or cannot be enforced here
	ProblemEnvRequired          = ProblemTypeBase + "env-required"           // 422: resume (or a message to a stopped session) without env the client gave at create; the detail names the variables to send
	ProblemUnsupportedContent   = ProblemTypeBase + "unsupported-content"    // 422: a message part the session's agent does not accept; the detail names the part
	ProblemUnknownModel         = ProblemTypeBase + "unknown-model"          // 422: a model the agent does not offer (by the list it announced); the detail names the ones it does
	ProblemUnknownMode          = ProblemTypeBase + "unknown-mode"           // 422: a mode the agent does not offer; the detail names the ones it does
	ProblemSwitchUnsupported    = ProblemTypeBase + "switch-unsupported"     // 422: the agent cannot change the session's model or mode between turns, or refused the change
	ProblemInvalidMCPServer     = ProblemTypeBase + "invalid-mcp-server"     // 422: an MCP server of the create request breaks a rule; the detail names its index and field
	ProblemMCPUnsupported       = ProblemTypeBase + "mcp-unsupported"        // 422: MCP servers for an agent that cannot take them (capability mcp); the detail names the agent
	ProblemMCPRequired          = ProblemTypeBase + "mcp-required"           // 422: resume (or a message to a stopped session) of a session whose MCP servers had env or header values, which are never stored; the detail names them
	ProblemShuttingDown         = ProblemTypeBase + "shutting-down"          // 503: the daemon is stopping
	ProblemUnknownProvider      = ProblemTypeBase + "unknown-provider"       // 422: no sandbox provider with that name is configured; the detail names the configured ones
	ProblemProviderCredentials  = ProblemTypeBase + "provider-credentials"   // 503: the provider's credentials are missing or refused; the detail has the provider's message
	ProblemProviderQuota        = ProblemTypeBase + "provider-quota"         // 429: the provider refused for a quota or rate limit; see Retry-After
	ProblemProviderUnavailable  = ProblemTypeBase + "provider-unavailable"   // 502: the provider failed (5xx, timeout, refused connection); the detail has its message
	ProblemSandboxGone          = ProblemTypeBase + "sandbox-gone"           // 502: the session's sandbox no longer exists on its provider
	ProblemProviderUnsupported  = ProblemTypeBase + "provider-unsupported"   // 422: the provider cannot do what the request or its policy asks; the detail names the field
	ProblemTooManyRequests      = ProblemTypeBase + "too-many-requests"      // 429: too many sandboxed tasks, or uploads held, at once; see Retry-After
	ProblemTooManyLiveSessions  = ProblemTypeBase + "too-many-live-sessions" // 429: as many sessions have a live agent as the daemon allows; see Retry-After
	ProblemTimeout              = ProblemTypeBase + "timeout"                // 504: the daemon did not answer in time
	ProblemStorageFull          = ProblemTypeBase + "storage-full"           // 507: the daemon's disk is full; reads work, writes succeed again once space is freed; see Retry-After
	ProblemCancelled            = ProblemTypeBase + "cancelled"              // 499: the client went away (logs and metrics only)
	ProblemInternal             = ProblemTypeBase + "internal"               // 500: see the daemon log
	ProblemOther                = ProblemTypeBase + "other"                  // any other status
)

// APIError is a non-2xx answer of the API. It embeds the decoded problem
// document; when the body was not problem+json (a proxy's error page, say),
// the Problem is synthesised from the status line and Type is left empty.
type APIError struct {
	Problem
	// Method and Path identify the request (no query, no credentials).
	Method string
	Path   string
}

// Error implements error.
func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %d", e.Method, e.Path, e.Status)
	if e.Title != "" {
		b.WriteString(" " + e.Title)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	for i, f := range e.Errors {
		if i == 3 {
			fmt.Fprintf(&b, " (and %d more)", len(e.Errors)-i)
			break
		}
		b.WriteString("; ")
		if f.Location != "" {
			b.WriteString(f.Location + ": ")
		}
		b.WriteString(f.Message)
	}
	return b.String()
}

// Kind returns the problem type's short name ("not-found", "busy", ...).
// When the server sent no agentbox problem type it is derived from the HTTP
// status the way the daemon does, so that errors from proxies in between
// still classify sensibly.
func (e *APIError) Kind() string {
	if name, ok := strings.CutPrefix(e.Type, ProblemTypeBase); ok && name != "" {
		return name
	}
	switch e.Status {
	case http.StatusBadRequest:
		return "bad-request"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusNotFound:
		return "not-found"
	case http.StatusMethodNotAllowed:
		return "method-not-allowed"
	case http.StatusNotAcceptable:
		return "not-acceptable"
	case http.StatusRequestTimeout:
		return "request-timeout"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "payload-too-large"
	case http.StatusUnsupportedMediaType:
		return "unsupported-media-type"
	case http.StatusUnprocessableEntity:
		return "validation"
	case http.StatusTooManyRequests:
		return "too-many-requests"
	case http.StatusInternalServerError:
		return "internal"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusGatewayTimeout:
		return "timeout"
	}
	return "other"
}

// Temporary reports whether repeating the same request later may succeed:
// server-side failures, rate limits, timeouts and a daemon that is starting
// or stopping.
func (e *APIError) Temporary() bool {
	switch e.Status {
	case http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
		return false
	}
	return e.Status >= 500
}

// ProblemKind returns the short problem type of err when it is (or wraps)
// an *APIError, and "" otherwise.
func ProblemKind(err error) string {
	var e *APIError
	if errors.As(err, &e) {
		return e.Kind()
	}
	return ""
}

// HasProblemType reports whether err is (or wraps) an *APIError of the given
// problem type URI, such as ProblemBusy.
func HasProblemType(err error, typ string) bool {
	name, ok := strings.CutPrefix(typ, ProblemTypeBase)
	return ok && name != "" && ProblemKind(err) == name
}

// IsNotFound reports whether err says the session, request or route does
// not exist.
func IsNotFound(err error) bool { return HasProblemType(err, ProblemNotFound) }

// IsUnauthorized reports whether err says the token is missing or wrong.
func IsUnauthorized(err error) bool { return HasProblemType(err, ProblemUnauthorized) }

// IsForbidden reports a request refused for its Host or Origin header: it
// came through a name or from a web page the daemon does not answer.
func IsForbidden(err error) bool { return HasProblemType(err, ProblemForbidden) }

// IsValidation reports whether err says the request was malformed.
func IsValidation(err error) bool { return HasProblemType(err, ProblemValidation) }

// IsConflict reports whether err is the generic conflict problem. The more
// specific conflicts have their own helpers: IsBusy, IsNoTurn,
// IsAlreadyResolved and IsNotLive.
func IsConflict(err error) bool { return HasProblemType(err, ProblemConflict) }

// IsUnknownAgent reports whether err says no agent has the requested name.
func IsUnknownAgent(err error) bool { return HasProblemType(err, ProblemUnknownAgent) }

// IsBusy reports whether err says a turn is already running in the session.
func IsBusy(err error) bool { return HasProblemType(err, ProblemBusy) }

// IsNoTurn reports whether err says there is no running turn to interrupt.
func IsNoTurn(err error) bool { return HasProblemType(err, ProblemNoTurn) }

// IsNotResumable reports a resume the session's agent cannot do.
func IsNotResumable(err error) bool { return HasProblemType(err, ProblemNotResumable) }

// IsAlreadyResolved reports whether err says the permission or question was
// already answered (by another client, the policy or a timeout).
func IsAlreadyResolved(err error) bool { return HasProblemType(err, ProblemAlreadyResolved) }

// IsNotLive reports whether err says the session has ended.
func IsNotLive(err error) bool { return HasProblemType(err, ProblemNotLive) }

// IsUnavailable reports whether err says the agent or the daemon cannot
// serve the request here.
func IsUnavailable(err error) bool { return HasProblemType(err, ProblemUnavailable) }

// IsTooManyRequests reports whether err says the daemon runs as many
// sandboxed tasks as it allows; retry after the Retry-After delay.
func IsTooManyRequests(err error) bool { return HasProblemType(err, ProblemTooManyRequests) }

// IsTooManyLiveSessions reports a create, resume or message refused
// because as many sessions have a live agent process as the daemon allows
// (serve --max-live-sessions); end one, or retry after the Retry-After
// delay.
func IsTooManyLiveSessions(err error) bool { return HasProblemType(err, ProblemTooManyLiveSessions) }

// IsLive reports a resume of a session that is live: send messages to it
// directly instead.
func IsLive(err error) bool { return HasProblemType(err, ProblemLive) }

// IsEnvRequired reports a resume, or a message to a stopped session, that
// needs environment variables the client gave at create: the daemon never
// stores their values and does not hold them itself. The problem's detail
// names them; resume the session with them in env.
func IsEnvRequired(err error) bool { return HasProblemType(err, ProblemEnvRequired) }

// IsUnsupportedContent reports a message refused because one of its
// content parts (the detail names it) is of a type the session's agent
// does not accept (its capabilities images and files).
func IsUnsupportedContent(err error) bool { return HasProblemType(err, ProblemUnsupportedContent) }

// IsShuttingDown reports whether err says the daemon is stopping.
func IsShuttingDown(err error) bool { return HasProblemType(err, ProblemShuttingDown) }

// IsStorageFull reports whether err says the daemon's disk is full (507):
// reads still work, and the write may be retried after Retry-After.
func IsStorageFull(err error) bool { return HasProblemType(err, ProblemStorageFull) }
