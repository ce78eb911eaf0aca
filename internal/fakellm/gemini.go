package fakellm

import (
	"context"
	"net/http"
	"time"
)

// Gemini generateContent / streamGenerateContent:
// https://ai.google.dev/api/generate-content (wire shapes only).

func writeGemini(ctx context.Context, w http.ResponseWriter, c *conversation, r *reply, sse bool) {
	in, out := tokens(c.size), r.outputTokens()
	usage := object{"promptTokenCount": in, "candidatesTokenCount": out, "totalTokenCount": in + out}
	rid := newID("")
	response := func(parts []any, final bool) object {
		cand := object{"content": object{"role": "model", "parts": parts}, "index": 0}
		o := object{"candidates": []any{cand}, "modelVersion": c.model, "responseId": rid}
		if final {
			cand["finishReason"] = "STOP"
			o["usageMetadata"] = usage
		}
		return o
	}
	var calls []any
	for _, tc := range r.calls {
		calls = append(calls, object{"functionCall": object{"name": tc.name, "args": tc.object()}})
	}

	if !c.stream {
		if err := sleep(ctx, r.delay*time.Duration(r.pieces())); err != nil {
			return
		}
		var parts []any
		if r.thinking != "" {
			parts = append(parts, object{"text": r.thinking, "thought": true})
		}
		if len(r.chunks) > 0 {
			parts = append(parts, object{"text": r.text()})
		}
		parts = append(parts, calls...)
		if parts == nil {
			parts = []any{}
		}
		writeJSON(w, http.StatusOK, response(parts, true))
		return
	}

	// The chunks of the stream; the last one carries finishReason and usage.
	var chunks [][]any
	for _, p := range splitN(r.thinking, 2) {
		chunks = append(chunks, []any{object{"text": p, "thought": true}})
	}
	for _, p := range r.chunks {
		chunks = append(chunks, []any{object{"text": p}})
	}
	if len(calls) > 0 {
		chunks = append(chunks, calls)
	}
	if len(chunks) == 0 {
		chunks = append(chunks, []any{})
	}
	if !sse { // a JSON array, written as it goes
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		for i, ch := range chunks {
			if err := sleep(ctx, r.delay); err != nil {
				return
			}
			sep := ",\n"
			if i == 0 {
				sep = "[\n"
			}
			if _, err := w.Write(append([]byte(sep), marshal(response(ch, i == len(chunks)-1))...)); err != nil {
				return
			}
			_ = rc.Flush()
		}
		_, _ = w.Write([]byte("\n]\n"))
		return
	}
	s := newStream(ctx, w, r.delay)
	for i, ch := range chunks {
		s.pause()
		s.event("", response(ch, i == len(chunks)-1))
	}
}

func writeGeminiError(w http.ResponseWriter, e *Error) {
	status := e.Type
	if status == "" {
		switch e.Status {
		case 400:
			status = "INVALID_ARGUMENT"
		case 401:
			status = "UNAUTHENTICATED"
		case 403:
			status = "PERMISSION_DENIED"
		case 404:
			status = "NOT_FOUND"
		case 429:
			status = "RESOURCE_EXHAUSTED"
		case 499:
			status = "CANCELLED"
		case 500:
			status = "INTERNAL"
		case 503:
			status = "UNAVAILABLE"
		case 504:
			status = "DEADLINE_EXCEEDED"
		default:
			status = "FAILED_PRECONDITION"
			if e.Status >= 500 {
				status = "UNKNOWN"
			}
		}
	}
	errorHeaders(w, e)
	writeJSON(w, e.Status, object{"error": object{"code": e.Status, "message": errorMessage(e), "status": status}})
}

func writeGeminiCount(w http.ResponseWriter, size int) {
	writeJSON(w, http.StatusOK, object{"totalTokens": tokens(size)})
}
