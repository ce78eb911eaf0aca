// Package httpapi is the daemon's HTTP/SSE API v1: it turns HTTP requests
// into calls on the session [Engine] and the engine's answers and errors into
// JSON responses, RFC 7807 problems and Server-Sent Event streams, and it
// serves the OpenAPI 3.1 document that is the API's contract.
//
// Everything HTTP-specific lives here and nowhere else: routing, bearer-token
// authentication, CORS, request size and media-type limits, the mapping of
// engine errors to status codes (see problem.go), request metrics and logs.
// It holds no session state of its own.
package httpapi
