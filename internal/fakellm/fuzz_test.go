package fakellm

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
)

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Flush()                      {}

// FuzzRequest feeds arbitrary bodies to every API's parser, the answer
// logic of every built-in scenario and the writers: nothing may panic.
func FuzzRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","stream":true,"tools":[{"name":"Write","input_schema":{"properties":{"file_path":{},"content":{}}}}],"messages":[{"role":"user","content":"hi"}]}`,
		`{"input":[{"role":"user","content":"<cwd>/a</cwd>"},{"type":"function_call","name":"x"},{"type":"function_call_output"}],"tools":[{"type":"custom","name":"apply_patch"},{"type":"local_shell"}],"stream":true}`,
		`{"messages":[{"role":"assistant","tool_calls":[{}]},{"role":"tool"}],"tools":[{"type":"function","function":{"name":"bash","parameters":{"properties":{"command":{"type":"array"}},"required":["command","workdir","x"]}}}],"stream_options":{"include_usage":true}}`,
		`{"contents":[{"role":"model","parts":[{"functionCall":{}}]}],"tools":[{"functionDeclarations":[{"name":"replace","parameters":{"properties":{"edits":{"items":{"properties":{"old":{}}}}}}}]}]}`,
		`{"generationConfig":{"responseMimeType":"application/json","responseSchema":{"$ref":"#","properties":{"a":{"$ref":"#"},"b":{"type":"array","minItems":99,"items":{"$ref":"#"}}}}}}`,
		`{"response_format":{"type":"json_schema","json_schema":{"schema":{"anyOf":[{"type":"null"}],"allOf":[{"enum":[]}]}}}}`,
		`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","data":"QQ=="}},{"type":"document","source":{"type":"text"}},{"type":"image_url","image_url":"data:;base64"},{"type":"file","file":{"file_data":"data:x/y;base64,QQ"}}]}]}`,
		`{"input":[{"role":"user","content":[{"type":"input_image","image_url":"data:,"},{"type":"input_file","file_data":7}]}],"contents":[{"parts":[{"inlineData":{}},{"file_data":{"file_uri":"x"}},{"text":1}]}]}`,
		`[]`, `null`, `{"messages":7}`, ``,
	} {
		for api := range uint8(4) {
			f.Add(api, uint8(0), []byte(seed))
		}
	}
	scenarios := builtins()
	names := BuiltinNames()
	f.Fuzz(func(t *testing.T, api, scenario uint8, raw []byte) {
		var body map[string]any
		if json.Unmarshal(raw, &body) != nil || body == nil {
			return
		}
		var c *conversation
		var write func(context.Context, http.ResponseWriter, *conversation, *reply)
		switch api % 4 {
		case 0:
			c, write = parseAnthropic(body), writeAnthropic
		case 1:
			c, write = parseResponses(body), writeResponses
		case 2:
			c, write = parseChat(body), writeChat
		case 3:
			c = parseGemini(body, "g", scenario%2 == 0)
			write = func(ctx context.Context, w http.ResponseWriter, c *conversation, r *reply) {
				writeGemini(ctx, w, c, r, scenario%4 == 0)
			}
		}
		c.size = len(raw)
		sc := scenarios[names[int(scenario)%len(names)]]
		r := decide(sc, c, "/work")
		r.delay = 0
		if r.err != nil {
			writeError(&discard{}, APIAnthropic, r.err)
			return
		}
		write(context.Background(), &discard{}, c, r)
	})
}
