package fakellm

import (
	"context"
	"net/http"
	"time"
)

// OpenAI Chat Completions:
// https://platform.openai.com/docs/api-reference/chat (wire shapes only).

func writeChat(ctx context.Context, w http.ResponseWriter, c *conversation, r *reply) {
	model := c.model
	if model == "" {
		model = "fake-model"
	}
	w.Header().Set("x-request-id", newID("req_"))
	id := newID("chatcmpl-")
	created := time.Now().Unix()
	in, out := tokens(c.size), r.outputTokens()
	usage := object{"prompt_tokens": in, "completion_tokens": out, "total_tokens": in + out}
	finish := "stop"
	if len(r.calls) > 0 {
		finish = "tool_calls"
	}
	callIDs := make([]string, len(r.calls))
	for i := range callIDs {
		callIDs[i] = newID("call_")
	}

	if !c.stream {
		if err := sleep(ctx, r.delay*time.Duration(r.pieces())); err != nil {
			return
		}
		msg := object{"role": "assistant", "content": nil}
		if len(r.chunks) > 0 {
			msg["content"] = r.text()
		}
		if r.thinking != "" {
			msg["reasoning_content"] = r.thinking
		}
		if len(r.calls) > 0 {
			var calls []any
			for i, tc := range r.calls {
				calls = append(calls, object{"id": callIDs[i], "type": "function",
					"function": object{"name": tc.name, "arguments": string(tc.object())}})
			}
			msg["tool_calls"] = calls
		}
		writeJSON(w, http.StatusOK, object{
			"id": id, "object": "chat.completion", "created": created, "model": model,
			"choices": []any{object{"index": 0, "message": msg, "finish_reason": finish, "logprobs": nil}},
			"usage":   usage,
		})
		return
	}

	s := newStream(ctx, w, r.delay)
	chunk := func(delta object, finish any) {
		s.event("", object{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{object{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}})
	}
	chunk(object{"role": "assistant", "content": ""}, nil)
	for _, p := range splitN(r.thinking, 2) {
		s.pause()
		chunk(object{"reasoning_content": p}, nil)
	}
	for _, p := range r.chunks {
		s.pause()
		chunk(object{"content": p}, nil)
	}
	for i, tc := range r.calls {
		chunk(object{"tool_calls": []any{object{"index": i, "id": callIDs[i], "type": "function",
			"function": object{"name": tc.name, "arguments": ""}}}}, nil)
		for _, p := range splitN(string(tc.object()), 3) {
			s.pause()
			chunk(object{"tool_calls": []any{object{"index": i, "function": object{"arguments": p}}}}, nil)
		}
	}
	chunk(object{}, finish)
	if c.includeUsage {
		s.event("", object{"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
			"choices": []any{}, "usage": usage})
	}
	s.event("", "[DONE]")
}
