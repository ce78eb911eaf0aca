package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	"github.com/danielgtaylor/huma/v2"

	"github.com/agentbox/agentbox/client"
)

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
		client.ProblemTooManyRequests:      "429: as many sandboxed tasks run as the daemon allows; retry after Retry-After",
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

// registerPlainRoutes documents the two routes served outside huma.
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
// GET /openapi.json serves and api/openapi.json holds.
func specDocument() []byte {
	s, _ := newServer(Config{}, nil, nil, nil)
	return s.spec()
}
