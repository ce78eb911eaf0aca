package claude

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/reexec"
)

// The test binary doubles as a stream-json peer for the process-handling
// tests: with AGENTBOX_CLAUDE_HELPER set in its environment it plays a
// scripted CLI on stdin/stdout instead of running tests. It is not a
// stand-in for the real CLI (the e2e tests run that); it exercises what the
// real one cannot be made to do on demand: crash, hang, print huge lines.
//
// Modes (AGENTBOX_CLAUDE_HELPER):
//
//	replay     each user message replays the next turn of the transcript in
//	           AGENTBOX_CLAUDE_TRANSCRIPT; a can_use_tool request waits for
//	           the answer, which is echoed back as {"type":"helper_got",…}
//	slow       streams text deltas every 20ms until interrupted
//	deaf       like slow, but ignores interrupts (and SIGTERM)
//	crash      on a message, prints to stderr and exits 3
//	huge       on a message, prints a line of AGENTBOX_CLAUDE_HUGE bytes,
//	           then a normal answer
//	env        on a message, answers with its environment, args and cwd
//	control    on a message, sends an unknown control request and echoes
//	           the answer back
func TestMain(m *testing.M) {
	reexec.Init()
	if mode := os.Getenv("AGENTBOX_CLAUDE_HELPER"); mode != "" {
		os.Exit(helper(mode))
	}
	os.Exit(m.Run())
}

type helperPeer struct {
	in  *bufio.Scanner
	out *bufio.Writer
}

func (h *helperPeer) send(v any) {
	var b []byte
	switch v := v.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	default:
		b, _ = json.Marshal(v)
	}
	h.out.Write(b)
	h.out.WriteByte('\n')
	h.out.Flush()
}

// next reads the next stdin line as a generic object; ok is false at EOF.
func (h *helperPeer) next() (map[string]any, bool) {
	for h.in.Scan() {
		var m map[string]any
		if json.Unmarshal(h.in.Bytes(), &m) == nil {
			return m, true
		}
	}
	return nil, false
}

func helperResult(sub string, isErr bool) map[string]any {
	return map[string]any{"type": "result", "subtype": sub, "is_error": isErr, "stop_reason": "end_turn",
		"usage": map[string]int{"input_tokens": 3, "output_tokens": 2}, "total_cost_usd": 0.001, "result": "ok"}
}

func helperText(h *helperPeer, text string) {
	h.send(map[string]any{"type": "assistant", "message": map[string]any{"id": "msg_h", "role": "assistant",
		"content": []map[string]string{{"type": "text", "text": text}}}})
}

func helper(mode string) int {
	h := &helperPeer{in: bufio.NewScanner(os.Stdin), out: bufio.NewWriter(os.Stdout)}
	h.in.Buffer(nil, 64<<20)
	if mode == "deaf" {
		signal.Ignore(syscall.SIGTERM)
	}
	var turns [][]string
	if mode == "replay" {
		b, err := os.ReadFile(os.Getenv("AGENTBOX_CLAUDE_TRANSCRIPT"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		var cur []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(l) == "" || strings.HasPrefix(l, `{"_sent"`) {
				continue
			}
			cur = append(cur, l)
			if strings.Contains(l, `"type":"result"`) || strings.Contains(l, `"type": "result"`) {
				turns = append(turns, cur)
				cur = nil
			}
		}
	}
	turn := 0
	for {
		msg, ok := h.next()
		if !ok {
			return 0 // stdin closed: exit like the CLI
		}
		if req, _ := msg["request"].(map[string]any); msg["type"] == "control_request" && req["subtype"] == "initialize" {
			// Like the CLI, answer initialize with its models: those of
			// AGENTBOX_CLAUDE_MODELS (a JSON list), none if unset; in
			// mode mute-init, not at all.
			if mode != "mute-init" {
				models := json.RawMessage(cmp.Or(os.Getenv("AGENTBOX_CLAUDE_MODELS"), "[]"))
				h.send(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": msg["request_id"],
					"response": map[string]any{"commands": []any{}, "models": models}}})
			}
			continue
		}
		if msg["type"] != "user" {
			continue
		}
		switch mode {
		case "crash":
			fmt.Fprintln(os.Stderr, "boom: the helper failed on purpose")
			return 3
		case "huge":
			n := 0
			fmt.Sscan(os.Getenv("AGENTBOX_CLAUDE_HUGE"), &n)
			h.send(`{"type":"assistant","message":{"id":"m","role":"assistant","content":[{"type":"text","text":"` + strings.Repeat("x", n) + `"}]}}`)
			helperText(h, "after the huge line")
			h.send(helperResult("success", false))
		case "env":
			wd, _ := os.Getwd()
			p, _ := json.Marshal(map[string]any{"env": os.Environ(), "args": os.Args[1:], "cwd": wd, "message": msg})
			h.send(`{"type":"helper_env","data":` + string(p) + `}`)
			h.send(helperResult("success", false))
		case "control":
			h.send(`{"type":"control_request","request_id":"req-x","request":{"subtype":"hook_callback","callback_id":"cb"}}`)
			ans, _ := h.next()
			p, _ := json.Marshal(ans)
			h.send(`{"type":"helper_got","data":` + string(p) + `}`)
			h.send(helperResult("success", false))
		case "slow", "deaf":
			h.send(`{"type":"stream_event","event":{"type":"message_start","message":{"id":"msg_s","role":"assistant","content":[]}},"api_message_id":"msg_s"}`)
			h.send(`{"type":"stream_event","event":{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}},"api_message_id":"msg_s"}`)
			stdin := make(chan map[string]any)
			go func() {
				for {
					m, ok := h.next()
					if !ok {
						close(stdin)
						return
					}
					stdin <- m
				}
			}()
			tick := time.NewTicker(20 * time.Millisecond)
		loop:
			for {
				select {
				case <-tick.C:
					h.send(`{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"tick "}},"api_message_id":"msg_s"}`)
				case m, ok := <-stdin:
					if !ok {
						if mode == "deaf" {
							stdin = nil // deaf to EOF too
							continue
						}
						return 0
					}
					req, _ := m["request"].(map[string]any)
					if m["type"] == "control_request" && req["subtype"] == "interrupt" && mode == "slow" {
						h.send(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success", "request_id": m["request_id"]}})
						h.send(`{"type":"user","message":{"role":"user","content":[{"type":"text","text":"[Request interrupted by user]"}]}}`)
						h.send(`{"type":"stream_event","event":{"type":"message_stop"},"api_message_id":"msg_s","abandoned_blocks":{"api_message_id":"msg_s","from_block_index":0}}`)
						h.send(helperResult("error_during_execution", true))
						break loop
					}
				}
			}
			tick.Stop()
			// Serve further turns from the same goroutine's channel.
			for m := range stdin {
				if m["type"] == "user" {
					helperText(h, "after the interrupt")
					h.send(helperResult("success", false))
				}
			}
			return 0
		case "replay":
			if turn >= len(turns) {
				helperText(h, "no more turns")
				h.send(helperResult("success", false))
				continue
			}
			for _, l := range turns[turn] {
				h.send(l)
				if strings.Contains(l, `"control_request"`) {
					ans, ok := h.next()
					if !ok {
						return 0
					}
					p, _ := json.Marshal(ans)
					h.send(`{"type":"helper_got","data":` + string(p) + `}`)
				}
			}
			turn++
		}
	}
}
