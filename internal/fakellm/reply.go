package fakellm

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// reply is what the server answers a generate request with, whatever the
// API.
type reply struct {
	thinking string
	chunks   []string // the text, in streamed pieces
	calls    []toolCall
	err      *Error
	delay    time.Duration
	// position in the conversation and the scenario (Request fields)
	prompt, turn, step int
	summary            string
}

// text returns the whole answer text.
func (r *reply) text() string { return strings.Join(r.chunks, "") }

// pieces is the number of streamed pieces, for the delay of a
// non-streamed answer.
func (r *reply) pieces() int {
	n := len(r.chunks) + len(r.calls)
	if r.thinking != "" {
		n++
	}
	return n
}

// decide picks the answer to a generate request.
func decide(sc *Scenario, c *conversation, workdir string) *reply {
	r := &reply{step: -1}
	r.prompt, r.turn = position(c.history)
	if len(c.tools) == 0 {
		if c.wantsJSON {
			js := string(marshal(fillSchema(c.schema)))
			r.chunks = splitN(js, 2)
			r.summary = "json " + clip(js)
			return r
		}
		r.chunks = splitN(sc.noToolsText(), 2)
		r.summary = fmt.Sprintf("no tools: text %q", clip(sc.noToolsText()))
		return r
	}
	t, step := sc.pick(r.prompt, r.turn)
	r.step = step
	if t.Error != nil {
		e := *t.Error
		r.err = &e
		r.summary = fmt.Sprintf("error %d", e.Status)
		return r
	}
	r.thinking, r.chunks, r.delay = t.Thinking, t.chunks(), time.Duration(t.Delay)
	if len(t.Calls) > 0 {
		wd := sc.Workdir
		if wd == "" {
			wd = guessCwd(c.body)
		}
		if wd == "" {
			wd = workdir
		}
		for _, call := range t.Calls {
			tc, err := mapCall(call, c.tools, wd)
			if err != nil {
				msg := "fakellm: " + err.Error()
				*r = reply{prompt: r.prompt, turn: r.turn, step: step, chunks: splitN(msg, 2), summary: "text " + clip(msg)}
				return r
			}
			r.calls = append(r.calls, tc)
		}
	}
	var parts []string
	if r.thinking != "" {
		parts = append(parts, "thinking")
	}
	if len(r.chunks) > 0 {
		parts = append(parts, fmt.Sprintf("text %q (%d chunks)", clip(r.text()), len(r.chunks)))
	}
	for _, tc := range r.calls {
		parts = append(parts, "call "+tc.summary())
	}
	r.summary = strings.Join(parts, ", ")
	return r
}

func clip(s string) string {
	if utf8.RuneCountInString(s) <= 80 {
		return s
	}
	return string([]rune(s)[:80]) + "…"
}

// tokens estimates a token count: a quarter of the bytes, at least 1.
func tokens(n int) int { return max(1, n/4) }

// outputTokens is the usage figure of an answer.
func (r *reply) outputTokens() int {
	n := len(r.thinking) + len(r.text())
	for _, c := range r.calls {
		n += len(c.arguments) + len(c.input)
	}
	return tokens(n)
}

// marshal encodes v as compact JSON without HTML escaping. Maps come out
// with sorted keys, so the output is deterministic.
func marshal(v any) json.RawMessage {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("fakellm: marshal: %v", err)) // only our own values get here
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// newID returns prefix + "fake" + 24 hex digits.
func newID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return prefix + "fake" + hex.EncodeToString(b[:])
}

// signature is the fixed signature of thinking blocks.
const signature = "ZmFrZWxsbS1zaWduYXR1cmU="

// object is a JSON object under construction.
type object = map[string]any
