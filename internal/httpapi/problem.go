package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/errkind"
	"github.com/agentbox/agentbox/internal/files"
)

// The problem type URIs are part of the API contract and are defined once,
// in the public client package (client.Problem*), which clients switch on.

const problemContentType = "application/problem+json"

// statusClientClosed is the (nginx) status recorded when the client went away
// before the answer; the client never sees it.
const statusClientClosed = 499

var statusTypes = map[int]string{
	http.StatusBadRequest:            client.ProblemBadRequest,
	http.StatusUnauthorized:          client.ProblemUnauthorized,
	http.StatusForbidden:             client.ProblemForbidden,
	http.StatusNotFound:              client.ProblemNotFound,
	http.StatusMethodNotAllowed:      client.ProblemMethodNotAllowed,
	http.StatusNotAcceptable:         client.ProblemNotAcceptable,
	http.StatusRequestTimeout:        client.ProblemRequestTimeout,
	http.StatusConflict:              client.ProblemConflict,
	http.StatusRequestEntityTooLarge: client.ProblemPayloadTooLarge,
	http.StatusUnsupportedMediaType:  client.ProblemUnsupportedMediaType,
	http.StatusUnprocessableEntity:   client.ProblemValidation,
	http.StatusTooManyRequests:       client.ProblemTooManyRequests,
	http.StatusInternalServerError:   client.ProblemInternal,
	http.StatusServiceUnavailable:    client.ProblemUnavailable,
	http.StatusGatewayTimeout:        client.ProblemTimeout,
	http.StatusInsufficientStorage:   client.ProblemStorageFull,
	statusClientClosed:               client.ProblemCancelled,
}

// typeForStatus is the problem type of errors that only have a status, such
// as those of decoding and validation.
func typeForStatus(status int) string {
	if t, ok := statusTypes[status]; ok {
		return t
	}
	return client.ProblemOther
}

// problem is the error type of the whole API: handlers return it, the
// adapter (operation.go) answers with it, middleware writes it with
// writeProblem.
// Its JSON form is client.Problem.
type problem struct {
	client.Problem
	headers http.Header
}

func newProblem(status int, typ, detail string) *problem {
	title := http.StatusText(status)
	if status == statusClientClosed {
		title = "Client Closed Request"
	}
	return &problem{Problem: client.Problem{Type: typ, Title: title, Status: status, Detail: detail}}
}

func (p *problem) Error() string {
	if p.Detail != "" {
		return p.Detail
	}
	return p.Title
}

func (p *problem) withHeader(k, v string) *problem {
	if p.headers == nil {
		p.headers = http.Header{}
	}
	p.headers.Set(k, v)
	return p
}

// writeProblem writes p from the middleware (and for unknown routes).
func writeProblem(w http.ResponseWriter, p *problem) {
	h := w.Header()
	for k, v := range p.headers {
		h[k] = v
	}
	h.Del("Content-Length")
	h.Set("Content-Type", problemContentType)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// errorProblem is the one place where Go errors become HTTP problems. Errors
// that are problems already pass through. Errors of a kind (internal/errkind)
// map by their kind, after the few refinements that give one sentinel a
// problem type of its own (first match wins); anything else is a 500 whose
// text is logged, never sent.
func errorProblem(ctx context.Context, err error) *problem {
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	msg := err.Error()
	if typ, status, sentinel := refinement(err); sentinel != nil {
		p := newProblem(status, typ, msg)
		if errors.Is(sentinel, engine.ErrProviderQuota) {
			p = p.withHeader("Retry-After", retryAfterProviderQuota)
		}
		if errors.Is(sentinel, engine.ErrTooManyLive) {
			retry := engine.DefaultLiveRetryAfter
			var ce *engine.LiveCapError
			if errors.As(err, &ce) && ce.RetryAfter > 0 {
				retry = ce.RetryAfter
			}
			p = p.withHeader("Retry-After", strconv.Itoa(int((max(time.Second, retry)+time.Second-1)/time.Second)))
		}
		return p
	}
	switch k := errkind.Of(err); k {
	case errkind.NotFound:
		return newProblem(kindStatus[k], client.ProblemNotFound, msg)
	case errkind.Invalid:
		return newProblem(kindStatus[k], client.ProblemValidation, msg)
	case errkind.Conflict:
		return newProblem(kindStatus[k], client.ProblemConflict, msg)
	case errkind.Policy:
		// A policy that is invalid, or that this host cannot enforce: the
		// message names the field or the missing mechanism.
		return newProblem(kindStatus[k], client.ProblemPolicy, msg)
	case errkind.TooMany:
		return newProblem(kindStatus[k], client.ProblemTooManyRequests, msg).withHeader("Retry-After", retryAfterBusy)
	case errkind.Unavailable:
		return newProblem(kindStatus[k], client.ProblemUnavailable, msg)
	case errkind.ShuttingDown:
		return newProblem(kindStatus[k], client.ProblemShuttingDown, "The daemon is shutting down.").
			withHeader("Retry-After", "5")
	case errkind.StorageFull:
		// The text may name files of the data directory: logged, not sent.
		logFor(ctx).WarnContext(ctx, "storage full", "err", err)
		return newProblem(kindStatus[k], client.ProblemStorageFull,
			"The daemon's storage is full: reads still work, and writes succeed again once space is freed.").
			withHeader("Retry-After", retryAfterStorageFull)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		logFor(ctx).WarnContext(ctx, "request timed out", "err", err)
		return newProblem(http.StatusGatewayTimeout, client.ProblemTimeout, "The operation timed out.")
	case errors.Is(err, context.Canceled):
		return newProblem(statusClientClosed, client.ProblemCancelled, "The request was cancelled.")
	}
	logFor(ctx).ErrorContext(ctx, "internal error", "err", err)
	return internalProblem(ctx)
}

// retryAfterProviderQuota is the Retry-After (seconds) of a request a
// provider refused for its quota.
const retryAfterProviderQuota = "30"

// retryAfterStorageFull is the Retry-After (seconds) of a write refused
// because the disk is full.
const retryAfterStorageFull = "30"

// kindStatus is the status of each error kind; a refinement keeps its
// sentinel's.
var kindStatus = map[*errkind.Kind]int{
	errkind.NotFound:     http.StatusNotFound,
	errkind.Invalid:      http.StatusUnprocessableEntity,
	errkind.Conflict:     http.StatusConflict,
	errkind.Policy:       http.StatusUnprocessableEntity,
	errkind.TooMany:      http.StatusTooManyRequests,
	errkind.Unavailable:  http.StatusServiceUnavailable,
	errkind.ShuttingDown: http.StatusServiceUnavailable,
	errkind.StorageFull:  http.StatusInsufficientStorage,
}

// refinements are the sentinels whose problem type is more precise than
// their kind's; the status is their kind's unless status is set. First
// match wins.
var refinements = []struct {
	err    error
	typ    string
	status int
}{
	{engine.ErrUnknownAgent, client.ProblemUnknownAgent, 0},
	{engine.ErrInvalidMCP, client.ProblemInvalidMCPServer, 0},
	{engine.ErrBusy, client.ProblemBusy, 0},
	{engine.ErrNoTurn, client.ProblemNoTurn, 0},
	{engine.ErrLive, client.ProblemLive, 0},
	{engine.ErrNotResumable, client.ProblemNotResumable, 0},
	{engine.ErrNotLive, client.ProblemNotLive, 0},
	{engine.ErrNotPausable, client.ProblemNotPausable, 0},
	{engine.ErrEnvRequired, client.ProblemEnvRequired, 0},
	{engine.ErrMCPUnsupported, client.ProblemMCPUnsupported, 0},
	{engine.ErrMCPRequired, client.ProblemMCPRequired, 0},
	{engine.ErrUnsupportedContent, client.ProblemUnsupportedContent, 0},
	{engine.ErrUnknownChoice, client.ProblemUnknownModel, 0}, // or unknown-mode: see refinement
	{engine.ErrSwitchUnsupported, client.ProblemSwitchUnsupported, 0},
	{engine.ErrNoSandbox, client.ProblemNoSandbox, 0},
	{engine.ErrAlreadyResolved, client.ProblemAlreadyResolved, 0},
	{engine.ErrTooManyLive, client.ProblemTooManyLiveSessions, 0},
	{engine.ErrUnknownProvider, client.ProblemUnknownProvider, 0},
	{engine.ErrProviderCredentials, client.ProblemProviderCredentials, 0},
	{engine.ErrProviderQuota, client.ProblemProviderQuota, 0},
	{engine.ErrProviderUnavailable, client.ProblemProviderUnavailable, http.StatusBadGateway},
	{engine.ErrSandboxGone, client.ProblemSandboxGone, http.StatusBadGateway},
	{engine.ErrProviderUnsupported, client.ProblemProviderUnsupported, 0},
	{files.ErrOutside, client.ProblemOutsideWorkspace, http.StatusForbidden},
	{files.ErrProtected, client.ProblemProtectedPath, http.StatusForbidden},
	{files.ErrNotFound, client.ProblemFileNotFound, 0},
	{files.ErrNotRegular, client.ProblemNotRegularFile, 0},
	{files.ErrTooLarge, client.ProblemTooLarge, http.StatusRequestEntityTooLarge},
	{files.ErrBadArchive, client.ProblemInvalidArchive, 0},
	{files.ErrExists, client.ProblemFileExists, 0},
	{files.ErrSandboxLive, client.ProblemSandboxLive, 0},
}

// refinement is the refined sentinel err matches and its problem type, or
// nil.
func refinement(err error) (typ string, status int, sentinel error) {
	for _, r := range refinements {
		if !errors.Is(err, r.err) {
			continue
		}
		status := r.status
		if status == 0 {
			status = kindStatus[errkind.Of(r.err)]
		}
		var ce *engine.ChoiceError
		if errors.Is(r.err, engine.ErrUnknownChoice) && errors.As(err, &ce) && ce.Field == "mode" {
			return client.ProblemUnknownMode, status, r.err
		}
		return r.typ, status, r.err
	}
	return "", 0, nil
}

func internalProblem(ctx context.Context) *problem {
	p := newProblem(http.StatusInternalServerError, client.ProblemInternal, "An internal error occurred; the daemon log has the details.")
	if ri := infoFrom(ctx); ri != nil {
		p.Instance = "urn:agentbox:request:" + ri.id
	}
	return p
}

// msgValidationFailed is the message of a request refused for errors[],
// which validationProblem words by the status.
const msgValidationFailed = "validation failed"

// validationProblem is the problem of a request that decoding or
// validation refused, with status and msg, and errs as errors[]: each a
// *fieldError, or a bodyError (a body the client broke or sent as invalid
// UTF-8, see requestBody) that decides the whole answer.
func validationProblem(ctx context.Context, status int, msg string, errs []error) *problem {
	for _, err := range errs {
		// A body the client broke or sent as invalid UTF-8 (requestBody).
		var be *bodyError
		if errors.As(err, &be) {
			return be.problem()
		}
	}
	if status >= 500 {
		if status == http.StatusInternalServerError {
			logFor(ctx).ErrorContext(ctx, "internal error", "msg", msg, "errs", errs)
			return internalProblem(ctx)
		}
		return newProblem(status, typeForStatus(status), http.StatusText(status))
	}
	if msg == msgValidationFailed {
		switch status {
		case http.StatusBadRequest:
			msg = "The request body is not valid JSON."
		case http.StatusUnsupportedMediaType:
			msg = "Request bodies must be application/json."
		case http.StatusUnprocessableEntity:
			msg = "The request is not valid; see errors."
		}
	}
	p := newProblem(status, typeForStatus(status), msg)
	for _, err := range errs {
		if err == nil {
			continue
		}
		var f client.ProblemField
		var fe *fieldError
		if errors.As(err, &fe) {
			f = client.ProblemField{Message: fe.Message, Location: fe.Location, Value: fe.Value}
		} else {
			f = client.ProblemField{Message: err.Error()}
		}
		if f.Location == "body" {
			f.Value = nil // the whole body: do not echo it back
		}
		f.Value = clip(f.Value)
		p.Errors = append(p.Errors, f)
	}
	return p
}

// clip shortens long string values echoed back in validation errors and
// drops other values whose JSON is long (such as a whole body object).
func clip(v any) any {
	const max = 256
	s, ok := v.(string)
	if !ok {
		if b, err := json.Marshal(v); err != nil || len(b) > max {
			return nil
		}
		return v
	}
	if len(s) <= max {
		return v
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
