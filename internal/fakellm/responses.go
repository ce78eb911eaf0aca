package fakellm

import (
	"context"
	"maps"
	"net/http"
	"time"
)

// OpenAI Responses: https://platform.openai.com/docs/api-reference/responses
// (wire shapes only).

func writeResponses(ctx context.Context, w http.ResponseWriter, c *conversation, r *reply) {
	model := c.model
	if model == "" {
		model = "fake-model"
	}
	w.Header().Set("x-request-id", newID("req_"))
	rid := newID("resp_")
	created := time.Now().Unix()
	in, out := tokens(c.size), r.outputTokens()
	usage := object{
		"input_tokens":          in,
		"input_tokens_details":  object{"cached_tokens": 0},
		"output_tokens":         out,
		"output_tokens_details": object{"reasoning_tokens": 0},
		"total_tokens":          in + out,
	}
	toolChoice := c.body["tool_choice"]
	if toolChoice == nil {
		toolChoice = "auto"
	}
	response := func(status string, output []object) object {
		o := object{
			"id": rid, "object": "response", "created_at": created, "status": status,
			"model": model, "output": output, "parallel_tool_calls": true,
			"tool_choice": toolChoice, "tools": []any{}, "error": nil,
			"incomplete_details": nil, "usage": nil,
		}
		if status == "completed" {
			o["usage"] = usage
		}
		return o
	}

	// The output items, complete.
	var items []object
	if r.thinking != "" {
		items = append(items, object{"type": "reasoning", "id": newID("rs_"),
			"summary": []any{object{"type": "summary_text", "text": r.thinking}}})
	}
	if len(r.chunks) > 0 {
		items = append(items, object{"type": "message", "id": newID("msg_"), "status": "completed",
			"role": "assistant", "content": []any{outputText(r.text())}})
	}
	for _, tc := range r.calls {
		switch tc.kind {
		case toolCustom:
			items = append(items, object{"type": "custom_tool_call", "id": newID("ctc_"), "status": "completed",
				"call_id": newID("call_"), "name": tc.name, "input": tc.input})
		case toolLocalShell:
			items = append(items, object{"type": "local_shell_call", "id": newID("lsh_"), "status": "completed",
				"call_id": newID("call_"), "action": object{"type": "exec", "command": tc.command, "env": object{}}})
		default:
			fc := object{"type": "function_call", "id": newID("fc_"), "status": "completed",
				"call_id": newID("call_"), "name": tc.name, "arguments": tc.arguments}
			if tc.namespace != "" {
				fc["namespace"] = tc.namespace
			}
			items = append(items, fc)
		}
	}
	if items == nil {
		items = []object{}
	}

	if !c.stream {
		if err := sleep(ctx, r.delay*time.Duration(r.pieces())); err != nil {
			return
		}
		writeJSON(w, http.StatusOK, response("completed", items))
		return
	}

	s := newStream(ctx, w, r.delay)
	seq := 0
	ev := func(o object) {
		o["sequence_number"] = seq
		seq++
		s.event(o["type"].(string), o)
	}
	ev(object{"type": "response.created", "response": response("in_progress", []object{})})
	ev(object{"type": "response.in_progress", "response": response("in_progress", []object{})})
	for i, it := range items {
		id := it["id"]
		added := maps.Clone(it)
		switch it["type"] {
		case "reasoning":
			added["summary"] = []any{}
			ev(object{"type": "response.output_item.added", "output_index": i, "item": added})
			ev(object{"type": "response.reasoning_summary_part.added", "item_id": id, "output_index": i,
				"summary_index": 0, "part": object{"type": "summary_text", "text": ""}})
			for _, p := range splitN(r.thinking, 2) {
				s.pause()
				ev(object{"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": i,
					"summary_index": 0, "delta": p})
			}
			ev(object{"type": "response.reasoning_summary_text.done", "item_id": id, "output_index": i,
				"summary_index": 0, "text": r.thinking})
			ev(object{"type": "response.reasoning_summary_part.done", "item_id": id, "output_index": i,
				"summary_index": 0, "part": object{"type": "summary_text", "text": r.thinking}})
		case "message":
			added["status"], added["content"] = "in_progress", []any{}
			ev(object{"type": "response.output_item.added", "output_index": i, "item": added})
			ev(object{"type": "response.content_part.added", "item_id": id, "output_index": i,
				"content_index": 0, "part": outputText("")})
			for _, p := range r.chunks {
				s.pause()
				ev(object{"type": "response.output_text.delta", "item_id": id, "output_index": i,
					"content_index": 0, "delta": p, "logprobs": []any{}})
			}
			ev(object{"type": "response.output_text.done", "item_id": id, "output_index": i,
				"content_index": 0, "text": r.text(), "logprobs": []any{}})
			ev(object{"type": "response.content_part.done", "item_id": id, "output_index": i,
				"content_index": 0, "part": outputText(r.text())})
		case "function_call":
			added["status"], added["arguments"] = "in_progress", ""
			ev(object{"type": "response.output_item.added", "output_index": i, "item": added})
			args := it["arguments"].(string)
			for _, p := range splitN(args, 3) {
				s.pause()
				ev(object{"type": "response.function_call_arguments.delta", "item_id": id, "output_index": i, "delta": p})
			}
			ev(object{"type": "response.function_call_arguments.done", "item_id": id, "output_index": i,
				"name": it["name"], "arguments": args})
		case "custom_tool_call":
			added["status"], added["input"] = "in_progress", ""
			ev(object{"type": "response.output_item.added", "output_index": i, "item": added})
			input := it["input"].(string)
			for _, p := range splitN(input, 2) {
				s.pause()
				ev(object{"type": "response.custom_tool_call_input.delta", "item_id": id, "output_index": i, "delta": p})
			}
			ev(object{"type": "response.custom_tool_call_input.done", "item_id": id, "output_index": i, "input": input})
		default: // local_shell_call: no deltas
			s.pause()
			ev(object{"type": "response.output_item.added", "output_index": i, "item": added})
		}
		ev(object{"type": "response.output_item.done", "output_index": i, "item": it})
	}
	ev(object{"type": "response.completed", "response": response("completed", items)})
}

func outputText(text string) object {
	return object{"type": "output_text", "text": text, "annotations": []any{}}
}

// writeOpenAIError writes an OpenAI error body (Responses and Chat).
func writeOpenAIError(w http.ResponseWriter, e *Error) {
	typ, code := e.Type, any(nil)
	switch {
	case e.Status == 429:
		if typ == "" {
			typ = "requests"
		}
		code = "rate_limit_exceeded"
	case e.Status == 401:
		if typ == "" {
			typ = "invalid_request_error"
		}
		code = "invalid_api_key"
	case e.Status >= 500:
		if typ == "" {
			typ = "server_error"
		}
	default:
		if typ == "" {
			typ = "invalid_request_error"
		}
	}
	w.Header().Set("x-request-id", newID("req_"))
	errorHeaders(w, e)
	writeJSON(w, e.Status, object{"error": object{
		"message": errorMessage(e), "type": typ, "param": nil, "code": code}})
}
