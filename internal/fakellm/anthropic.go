package fakellm

import (
	"context"
	"maps"
	"net/http"
	"time"
)

// Anthropic Messages: https://docs.anthropic.com/en/api/messages (wire
// shapes only).

func writeAnthropic(ctx context.Context, w http.ResponseWriter, c *conversation, r *reply) {
	model := c.model
	if model == "" {
		model = "fake-model"
	}
	w.Header().Set("request-id", newID("req_"))
	id := newID("msg_")
	type block struct {
		typ   string
		text  string   // text, thinking
		parts []string // streamed pieces
		call  *toolCall
		id    string
	}
	var blocks []block
	if r.thinking != "" {
		blocks = append(blocks, block{typ: "thinking", text: r.thinking, parts: splitN(r.thinking, 2)})
	}
	if len(r.chunks) > 0 {
		blocks = append(blocks, block{typ: "text", text: r.text(), parts: r.chunks})
	}
	for i := range r.calls {
		blocks = append(blocks, block{typ: "tool_use", call: &r.calls[i], id: newID("toolu_")})
	}
	stop := "end_turn"
	if len(r.calls) > 0 {
		stop = "tool_use"
	}
	usage := object{
		"input_tokens":                tokens(c.size),
		"output_tokens":               r.outputTokens(),
		"cache_creation_input_tokens": 0,
		"cache_read_input_tokens":     0,
	}
	content := func(b block, final bool) object {
		switch b.typ {
		case "thinking":
			o := object{"type": "thinking", "thinking": "", "signature": ""}
			if final {
				o["thinking"], o["signature"] = b.text, signature
			}
			return o
		case "text":
			o := object{"type": "text", "text": ""}
			if final {
				o["text"] = b.text
			}
			return o
		}
		o := object{"type": "tool_use", "id": b.id, "name": b.call.name, "input": object{}}
		if final {
			o["input"] = b.call.object()
		}
		return o
	}

	if !c.stream {
		if err := sleep(ctx, r.delay*time.Duration(r.pieces())); err != nil {
			return
		}
		var out []object
		for _, b := range blocks {
			out = append(out, content(b, true))
		}
		if out == nil {
			out = []object{}
		}
		writeJSON(w, http.StatusOK, object{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content": out, "stop_reason": stop, "stop_sequence": nil, "usage": usage,
		})
		return
	}

	s := newStream(ctx, w, r.delay)
	startUsage := maps.Clone(usage)
	startUsage["output_tokens"] = 1
	s.event("message_start", object{"type": "message_start", "message": object{
		"id": id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage,
	}})
	s.event("ping", object{"type": "ping"})
	for i, b := range blocks {
		s.event("content_block_start", object{"type": "content_block_start", "index": i, "content_block": content(b, false)})
		delta := func(d object) {
			s.pause()
			s.event("content_block_delta", object{"type": "content_block_delta", "index": i, "delta": d})
		}
		switch b.typ {
		case "thinking":
			for _, p := range b.parts {
				delta(object{"type": "thinking_delta", "thinking": p})
			}
			s.event("content_block_delta", object{"type": "content_block_delta", "index": i,
				"delta": object{"type": "signature_delta", "signature": signature}})
		case "text":
			for _, p := range b.parts {
				delta(object{"type": "text_delta", "text": p})
			}
		case "tool_use":
			for _, p := range splitN(string(b.call.object()), 3) {
				delta(object{"type": "input_json_delta", "partial_json": p})
			}
		}
		s.event("content_block_stop", object{"type": "content_block_stop", "index": i})
	}
	s.event("message_delta", object{"type": "message_delta",
		"delta": object{"stop_reason": stop, "stop_sequence": nil},
		"usage": object{"output_tokens": r.outputTokens()}})
	s.event("message_stop", object{"type": "message_stop"})
}

func writeAnthropicError(w http.ResponseWriter, e *Error) {
	typ := e.Type
	if typ == "" {
		switch e.Status {
		case 400:
			typ = "invalid_request_error"
		case 401:
			typ = "authentication_error"
		case 403:
			typ = "permission_error"
		case 404:
			typ = "not_found_error"
		case 413:
			typ = "request_too_large"
		case 429:
			typ = "rate_limit_error"
		case 529:
			typ = "overloaded_error"
		default:
			typ = "invalid_request_error"
			if e.Status >= 500 {
				typ = "api_error"
			}
		}
	}
	reqID := newID("req_")
	w.Header().Set("request-id", reqID)
	errorHeaders(w, e)
	writeJSON(w, e.Status, object{"type": "error",
		"error":      object{"type": typ, "message": errorMessage(e)},
		"request_id": reqID})
}

func writeAnthropicCount(w http.ResponseWriter, size int) {
	writeJSON(w, http.StatusOK, object{"input_tokens": tokens(size)})
}

// errorHeaders sets the retry hint of an error answer.
func errorHeaders(w http.ResponseWriter, e *Error) {
	if !e.Retry {
		w.Header().Set("x-should-retry", "false")
	}
}

func errorMessage(e *Error) string {
	if e.Message != "" {
		return e.Message
	}
	return "fakellm: " + http.StatusText(e.Status)
}
