package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

// This file generates the OpenAPI document (api/openapi.json) from the
// operation table with huma, which the run-time binary does not link: huma
// derives the schemas from the Go types of each operation. The same huma API
// serves the operations in the differential test (validate_diff_test.go),
// as the oracle the adapter's decoding and validation are held to.

// APIVersion is the version of the API contract (info.version in the spec).
// It changes only when the contract does, not with every daemon release.
const APIVersion = "1.0.0"

const apiDescription = `One HTTP/SSE API for coding agents: start sessions, send messages, answer
the agents' permission requests and questions, and read or follow each
session's durable event log.

Authentication: every route except GET /v1/health needs
` + "`Authorization: Bearer <token>`" + `, unless the daemon runs with --insecure-no-auth.
The token is the one the daemon was given (--token), or the one it made and
wrote to DATA_DIR/token (mode 0600), which the CLI reads by itself.

A request whose Host header does not name the daemon (a loopback address,
localhost, the address it listens on, or a name allowed with --allowed-hosts),
or that a browser sends from an origin CORS does not allow, is refused (403).

Errors are RFC 7807 problems (application/problem+json). Their type URI is
stable and says what went wrong:

`

func humaConfig() huma.Config {
	registry := huma.NewMapRegistry("#/components/schemas/", huma.DefaultSchemaNamer)
	return huma.Config{
		OpenAPI: &huma.OpenAPI{
			OpenAPI: "3.1.0",
			Info: &huma.Info{
				Title:       "agentbox",
				Version:     APIVersion,
				Description: apiDescription + problemTable(),
			},
			Components: &huma.Components{
				Schemas: registry,
				SecuritySchemes: map[string]*huma.SecurityScheme{
					"bearer": {
						Type:        "http",
						Scheme:      "bearer",
						Description: "The daemon's API token: the one given with --token, or the one it wrote to DATA_DIR/token.",
					},
				},
			},
			Security: []map[string][]string{{"bearer": {}}},
			Tags: []*huma.Tag{
				{Name: "system", Description: "Health, the API description and metrics."},
				{Name: "agents", Description: "The agents this daemon can run."},
				{Name: "sessions", Description: "Agent sessions and their turns."},
				{Name: "requests", Description: "Permission requests and questions awaiting an answer."},
				{Name: "events", Description: "Each session's event log, paged or streamed."},
				{Name: "exec", Description: "Code execution in a sandbox under a policy."},
				{Name: "processes", Description: "Long-running sandboxed processes: start, stream and replay output, stdin, signals."},
				{Name: "network", Description: "Sandboxes' egress: a session's network rules, and the secrets the egress proxy adds to requests."},
				{Name: "files", Description: "A session's workspace files: list, stat, read, write, mkdir, move, delete, tar up and down, watch."},
			},
		},
		Formats: map[string]huma.Format{
			"application/json": huma.DefaultJSONFormat,
			"json":             huma.DefaultJSONFormat,
		},
		DefaultFormat:                "application/json",
		RejectUnknownQueryParameters: true,
	}
}

// problemTable lists the problem types for the spec's description.
func problemTable() string {
	rows := map[string]string{
		client.ProblemBadRequest:           "400: the body is not valid JSON, or is missing, or ended before its Content-Length or broke its chunked framing; or the path has an empty, . or .. segment",
		client.ProblemValidation:           "422: the input breaks the schema or a rule (see errors[]), or the body is not valid UTF-8 (or escapes a lone surrogate)",
		client.ProblemUnauthorized:         "401: the bearer token is missing or wrong",
		client.ProblemForbidden:            "403: the Host header does not name this daemon, or the request comes from a browser origin CORS does not allow",
		client.ProblemNotFound:             "404: no such route, session, permission request or question",
		client.ProblemMethodNotAllowed:     "405: the route exists, the method does not",
		client.ProblemNotAcceptable:        "406: no acceptable response format",
		client.ProblemRequestTimeout:       "408: the body was sent too slowly",
		client.ProblemConflict:             "409: the request conflicts with the current state",
		client.ProblemPayloadTooLarge:      "413: the body is larger than the limit",
		client.ProblemUnsupportedMediaType: "415: the body is not application/json",
		client.ProblemUnknownAgent:         "422: no agent has that name",
		client.ProblemBusy:                 "409: a turn is already running in the session",
		client.ProblemNoTurn:               "409: no turn is running",
		client.ProblemNotLive:              "409: the session has ended",
		client.ProblemNoSandbox:            "409: the session runs without a sandbox, so it has no network rules",
		client.ProblemAlreadyResolved:      "409: the request was already answered",
		client.ProblemUnavailable:          "503: the agent cannot run on this host",
		client.ProblemShuttingDown:         "503: the daemon is stopping; retry elsewhere or later",
		client.ProblemTooManyRequests:      "429: as many sandboxed tasks run, or as many uploads are held in memory, as the daemon allows; retry after Retry-After",
		client.ProblemPolicy:               "422: the sandbox policy is invalid, refused by the global policy, or cannot be enforced here",
		client.ProblemTimeout:              "504: the operation timed out",
		client.ProblemStorageFull:          "507: the daemon's disk is full; reads still work, writes succeed again once space is freed; retry after Retry-After",
		client.ProblemInternal:             "500: an unexpected failure; the daemon log has details (see instance)",
		client.ProblemCancelled:            "499: the client went away (recorded in logs and metrics; never received)",
		client.ProblemOther:                "any other status",
	}
	keys := make([]string, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString("- `" + k + "`: " + rows[k] + "\n")
	}
	return b.String()
}

// registerPlainRoutes documents the two routes outside the table.
func registerPlainRoutes(api huma.API) {
	unauthorized := &huma.Response{Description: http.StatusText(http.StatusUnauthorized), Content: map[string]*huma.MediaType{
		problemContentType: {Schema: &huma.Schema{Ref: "#/components/schemas/Problem"}},
	}}
	api.OpenAPI().AddOperation(&huma.Operation{
		OperationID: "getOpenAPI", Method: http.MethodGet, Path: "/openapi.json", Tags: []string{"system"},
		Summary: "This API description (OpenAPI 3.1)",
		Responses: map[string]*huma.Response{
			"200": {Description: "The OpenAPI document.", Content: map[string]*huma.MediaType{
				"application/openapi+json": {Schema: &huma.Schema{Type: huma.TypeObject}},
			}},
			"401": unauthorized,
		},
	})
	api.OpenAPI().AddOperation(&huma.Operation{
		OperationID: "getMetrics", Method: http.MethodGet, Path: "/metrics", Tags: []string{"system"},
		Summary: "Prometheus metrics",
		Responses: map[string]*huma.Response{
			"200": {Description: "Metrics in the Prometheus text exposition format.", Content: map[string]*huma.MediaType{
				"text/plain": {Schema: &huma.Schema{Type: huma.TypeString}},
			}},
			"401": unauthorized,
		},
	})
}

// marshalSpec renders the document as committed in api/openapi.json:
// indented, keys sorted, trailing newline.
func marshalSpec(o *huma.OpenAPI) []byte {
	b, err := json.Marshal(o)
	if err != nil {
		panic("httpapi: marshal OpenAPI: " + err.Error())
	}
	// Round-trip through generic values to write "<" and "&" as they are
	// (huma's marshallers escape them).
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic("httpapi: re-read OpenAPI: " + err.Error())
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		panic("httpapi: marshal OpenAPI: " + err.Error())
	}
	return out.Bytes()
}

// specDocument returns the OpenAPI 3.1 document of the API, byte for byte what
// api/openapi.json must hold.
func specDocument() []byte {
	return marshalSpec(humaAPI(newServer(Config{}, nil, nil, nil), http.NewServeMux()).OpenAPI())
}

// humaAPI registers every operation of the table with huma, on mux, with
// s's handlers, as the daemon served them before the adapter: the same
// middleware (requireJSON), the same error model (installHumaErrors).
func humaAPI(s *server, mux *http.ServeMux) huma.API {
	installHumaErrors()
	api := humago.New(mux, humaConfig())
	api.UseMiddleware(requireJSON(api))
	for _, o := range operations() {
		o.(humaRoute).registerHuma(api, s)
	}
	registerPlainRoutes(api)
	return api
}

type humaRoute interface {
	registerHuma(api huma.API, s *server)
}

// humaOperation is the operation as huma takes it.
func (o *opSpec) humaOperation(api huma.API, s *server) huma.Operation {
	op := huma.Operation{
		OperationID: o.ID, Method: o.Method, Path: o.Path, Tags: []string{o.Tag},
		Summary: o.Summary, Description: o.Description,
		DefaultStatus:   o.Status,
		BodyReadTimeout: o.ReadTimeout,
		Errors:          slices.Clone(o.Errors),
		Responses:       streamResponses(api, o.Stream),
	}
	if o.Public {
		op.Security = []map[string][]string{}
	}
	// huma answers 413 to a body of MaxBodyBytes, as the adapter does to
	// one of bodyLimit: one more than the configured limit.
	op.MaxBodyBytes = s.bodyLimit(o.Limit)
	return op
}

func (o *op[I, O]) registerHuma(api huma.API, s *server) {
	hop := o.humaOperation(api, s)
	if o.Stream == notStream {
		huma.Register(api, hop, func(ctx context.Context, in *I) (*O, error) { return o.h(s, ctx, in) })
		optionalRawBody[I](api, o.Method, o.Path)
		return
	}
	huma.Register(api, hop, func(ctx context.Context, in *I) (*huma.StreamResponse, error) {
		out, err := o.h(s, ctx, in)
		if err != nil {
			return nil, err
		}
		so := any(out).(*streamOutput)
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			_, w := humago.Unwrap(hctx)
			so.Body(w)
		}}, nil
	})
}

// optionalRawBody makes a raw body (RawBody) optional, as the adapter
// takes it (an empty file is a file): huma marks it required. The
// document's operation is the one huma's handler checks (Register keeps a
// pointer to it), so the oracle answers the same.
func optionalRawBody[I any](api huma.API, method, path string) {
	if _, ok := reflect.TypeFor[I]().FieldByName("RawBody"); !ok {
		return
	}
	item := api.OpenAPI().Paths[path]
	for _, op := range []*huma.Operation{item.Put, item.Post, item.Patch} {
		if op != nil && op.Method == method && op.RequestBody != nil {
			op.RequestBody.Required = false
		}
	}
}

// The inputs' checks, as huma runs them (Resolver).

func (in *sendMessageInput) Resolve(huma.Context) []error  { return in.check() }
func (in *questionInput) Resolve(huma.Context) []error     { return in.check() }
func (in *execInput) Resolve(huma.Context) []error         { return in.check() }
func (in *startProcessInput) Resolve(huma.Context) []error { return in.check() }
func (in *sessionExecInput) Resolve(huma.Context) []error  { return in.check() }
func (in *ResumeParams) Resolve(huma.Context) []error      { return in.check() }

// streamResponses documents the answer of a streaming operation.
func streamResponses(api huma.API, kind streamKind) map[string]*huma.Response {
	reg := api.OpenAPI().Components.Schemas
	switch kind {
	case streamEvents:
		eventRef := reg.Schema(reflect.TypeFor[event.Event](), true, "Event")
		types := make([]any, len(event.Types))
		for i, t := range event.Types {
			types[i] = string(t)
		}
		return sseResponse("The event stream.", &huma.Schema{
			Type: huma.TypeObject,
			Properties: map[string]*huma.Schema{
				"id":    {Type: huma.TypeInteger, Format: "int64", Description: "The event's seq."},
				"event": {Type: huma.TypeString, Enum: types, Description: "The event's type."},
				"data":  eventRef,
			},
			Required: []string{"id", "event", "data"},
		})
	case streamExec:
		chunk := reg.Schema(reflect.TypeFor[client.OutputChunk](), true, "OutputChunk")
		return sseResponse("The execution's events.", sseOneOf(map[string]*huma.Schema{
			"start":  {Type: huma.TypeObject, Properties: map[string]*huma.Schema{"sandbox": reg.Schema(reflect.TypeFor[client.SandboxInfo](), true, "SandboxInfo")}},
			"stdout": chunk,
			"stderr": chunk,
			"result": reg.Schema(reflect.TypeFor[client.ExecResult](), true, "ExecResult"),
			"error":  {Ref: "#/components/schemas/Problem"},
		}))
	case streamFile:
		return rawResponse("The file's bytes.", "application/octet-stream")
	case streamArchive:
		return rawResponse("A tar stream (PAX).", "application/x-tar")
	case streamChanges:
		return sseResponse("The workspace's changes.", sseOneOf(map[string]*huma.Schema{
			"change": reg.Schema(reflect.TypeFor[client.FileChange](), true, "FileChange"),
		}))
	case streamProcess:
		chunk := reg.Schema(reflect.TypeFor[client.OutputChunk](), true, "OutputChunk")
		return sseResponse("The process's events.", sseOneOf(map[string]*huma.Schema{
			"stdout":  chunk,
			"stderr":  chunk,
			"dropped": reg.Schema(reflect.TypeFor[client.OutputGap](), true, "OutputGap"),
			"exit":    reg.Schema(reflect.TypeFor[client.Process](), true, "Process"),
		}))
	}
	return nil
}

// rawResponse documents an answer of raw bytes of one media type.
func rawResponse(desc, mediaType string) map[string]*huma.Response {
	return map[string]*huma.Response{
		"200": {
			Description: desc,
			Content:     map[string]*huma.MediaType{mediaType: {Schema: &huma.Schema{Type: huma.TypeString, Format: "binary"}}},
		},
	}
}

// sseResponse documents an event stream whose messages are items.
func sseResponse(desc string, items *huma.Schema) map[string]*huma.Response {
	return map[string]*huma.Response{
		"200": {
			Description: desc,
			Headers: map[string]*huma.Header{
				"Cache-Control":     {Schema: &huma.Schema{Type: huma.TypeString, Examples: []any{"no-cache"}}},
				"X-Accel-Buffering": {Schema: &huma.Schema{Type: huma.TypeString, Examples: []any{"no"}}},
			},
			Content: map[string]*huma.MediaType{
				"text/event-stream": {Schema: &huma.Schema{
					Title:       "Server-Sent Events",
					Description: "The stream as a sequence of messages, each serialized as UTF-8 text per the SSE specification.",
					Type:        huma.TypeArray,
					Items:       items,
				}},
			},
		},
	}
}

// sseOneOf is the message schema of a stream whose events are named in
// events, each with its data schema.
func sseOneOf(events map[string]*huma.Schema) *huma.Schema {
	var variants []*huma.Schema
	for _, name := range slices.Sorted(maps.Keys(events)) {
		variants = append(variants, &huma.Schema{
			Type: huma.TypeObject,
			Properties: map[string]*huma.Schema{
				"id":    {Type: huma.TypeInteger, Format: "int64", Description: "The event's seq, when it has one."},
				"event": {Type: huma.TypeString, Enum: []any{name}},
				"data":  events[name],
			},
			Required: []string{"event", "data"},
		})
	}
	return &huma.Schema{OneOf: variants}
}

// requireJSON answers 415 when an operation that takes a body gets one that
// is not JSON, as the adapter does (huma alone would accept a missing
// Content-Type).
func requireJSON(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		op := ctx.Operation()
		if op == nil || op.RequestBody == nil {
			next(ctx)
			return
		}
		r, _ := humago.Unwrap(ctx)
		if op.RequestBody.Content["application/json"] == nil {
			// A raw body: its own media type, as the adapter checks it.
			for mt := range op.RequestBody.Content {
				if r.ContentLength != 0 && !isMediaType(r.Header.Get("Content-Type"), mt) {
					_ = huma.WriteErr(api, ctx, http.StatusUnsupportedMediaType,
						"The request body must be "+mt+"; got "+strconv.Quote(r.Header.Get("Content-Type"))+".")
					return
				}
			}
			next(ctx)
			return
		}
		if r.ContentLength != 0 && !isJSON(r.Header.Get("Content-Type")) {
			_ = huma.WriteErr(api, ctx, http.StatusUnsupportedMediaType,
				"Request bodies must be application/json; got "+strconv.Quote(r.Header.Get("Content-Type"))+".")
			return
		}
		next(ctx)
	}
}

// GetStatus, ContentType and GetHeaders make a problem what huma asks of
// a handler's error (StatusError, ContentTypeFilter, HeadersError).

func (p *problem) GetStatus() int            { return p.Status }
func (p *problem) ContentType(string) string { return problemContentType }
func (p *problem) GetHeaders() http.Header   { return p.headers }

// installHumaErrors makes every error huma produces itself (validation,
// body limits, media types) a problem, as validationProblem words it, so
// that its answers can be compared with the adapter's byte for byte.
var installHumaErrors = sync.OnceFunc(func() {
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		return validationProblem(context.Background(), status, msg, fromHuma(errs))
	}
	huma.NewErrorWithContext = func(hctx huma.Context, status int, msg string, errs ...error) huma.StatusError {
		ctx := context.Background()
		if hctx != nil {
			ctx = hctx.Context()
		}
		return validationProblem(ctx, status, msg, fromHuma(errs))
	}
})

// fromHuma turns huma's error details into fieldErrors.
func fromHuma(errs []error) []error {
	out := make([]error, 0, len(errs))
	for _, err := range errs {
		var d *huma.ErrorDetail
		if errors.As(err, &d) {
			out = append(out, &fieldError{Location: d.Location, Message: d.Message, Value: d.Value})
			continue
		}
		out = append(out, err)
	}
	return out
}
