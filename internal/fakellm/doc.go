// Package fakellm is a deterministic fake LLM provider: an HTTP server on a
// loopback address that answers the model APIs coding agents call
// (Anthropic Messages, OpenAI Responses, OpenAI Chat Completions, Gemini)
// from a script, so that real agent CLIs and agentbox's own tests run end
// to end without a model or a network.
//
// # Routes
//
// Routes match by path suffix, so a base URL with any prefix works:
//
//	POST …/messages                      Anthropic Messages (stream or not; ?beta=true too)
//	POST …/messages/count_tokens         Anthropic token count
//	POST …/responses                     OpenAI Responses (stream or not)
//	POST …/chat/completions              OpenAI Chat Completions (stream or not)
//	POST …/models/<m>:generateContent    Gemini
//	POST …/models/<m>:streamGenerateContent[?alt=sse]
//	POST …/models/<m>:countTokens
//	GET  …/models, …/models/<m>          model lists (Gemini shape under v1beta/v1alpha)
//
// Anything else is answered 404 (telemetry-like paths get {}; GET /,
// /health and /healthz get {"ok":true}; HEAD gets 200).
//
// # Scenarios
//
// A Scenario is a script of model answers (Turns): text streamed in chunks,
// thinking, abstract tool calls, upstream errors and per-chunk delays. The
// server is stateless: which turn answers a request is computed from the
// conversation in the request. Turns are consumed in order; a turn with
// calls is one tool round, a turn without calls ends the agent's answer to
// a user prompt. For the k-th user prompt (k = the number of final answers
// already in the history) and the r-th tool round since the last real user
// message, the server answers with the r-th turn of the k-th group of
// turns; past the last group it repeats the last group, and past the end of
// a group it answers "done". So one server serves any number of sessions at
// once, and a second user message continues the script where the first
// answer ended. An upstream error leaves nothing in the history, so a
// client that retries gets the same error again.
//
// Requests that offer no tools (title generation, classifiers) get the
// scenario's NoToolsText; requests that ask for JSON output (Gemini
// responseMimeType, Chat response_format, Responses text.format, Anthropic
// output_format) and offer no tools get an object built from the schema:
// the first enum value, integers at least 1 (Gemini's routing classifier
// needs complexity_score ≥ 1).
//
// An abstract call (write, shell, edit) is mapped onto the tools the
// request offers, by tool name and by the argument names in each tool's
// schema (Write/write/write_file with file_path/filePath/path; apply_patch,
// freeform or not; Bash/bash/exec_command/shell/run_shell_command with a
// string or an array command; Edit with old_string/new_string or pi's
// edits:[{oldText,newText}]). Relative paths are made absolute with the
// scenario's Workdir, else the cwd the agent states in its prompt, else
// Options.Workdir.
//
// The path prefix /s/<name>/ selects scenario <name> for one request (see
// Server.ScenarioURL); other requests use the server's default scenario.
//
// # Request log
//
// Every request is recorded (Server.Requests, Server.Wait, Options.LogFile)
// with credentials redacted: headers such as Authorization, x-api-key,
// x-goog-api-key and cookies, and query parameters such as key, are stored
// as "REDACTED". Only a SHA-256 of the key is kept (Request.HasKey). The
// key is the first of: the Authorization header (without "Bearer "),
// x-api-key, x-goog-api-key, api-key, the ?key= query parameter.
//
// Request.Parts holds the content parts of the request's user messages
// (not tool results) in the API's own form — Anthropic image/document
// blocks, Chat image_url/file, Responses input_image/input_file, Gemini
// inlineData/fileData — with inline bytes as base64 (Part.Data, from a
// base64 source or a data: URL), so that a test can check that an image
// or a file reached the model (Images, Files). At most 256 are kept.
//
// # Required key
//
// With Options.RequireKey set, the model API calls (the routes above but
// the model lists) are answered only when they carry exactly that key, so
// that a test can prove that a proxy on the way put the real key in place
// of the agent's placeholder. Other calls get 401 in their API's error
// shape (Anthropic authentication_error, OpenAI invalid_api_key, Gemini
// UNAUTHENTICATED, with x-should-retry: false), are recorded with Status
// 401 and a Reply that says the key was missing or wrong, and are counted
// (Server.KeyMismatches). Health checks (GET /, /health, /healthz), HEAD,
// telemetry, model lists and unknown routes need no key.
//
// Options.Credentials is the stricter form: a list of accepted
// credentials, each a header and its whole value (and headers it needs
// with it, such as Anthropic's OAuth beta). A model call must carry one of
// them, and every credential it carries must be one of them in its own
// header; refusals are answered and counted the same way.
//
// # TLS
//
// With Options.TLS the server speaks HTTPS, HTTP/1.1 and HTTP/2 (ALPN), and
// URL is https://127.0.0.1:PORT. Start makes a throw-away ECDSA P-256 CA
// and a server certificate it signs for 127.0.0.1, ::1 and localhost;
// clients trust Server.CertPool (Go) or Server.CertPEM (a CA file).
// Streamed answers are flushed per event over both protocols.
package fakellm
