package fakellm

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestParts checks that each API's user content parts are recorded in
// their native form, and tool results and assistant messages are not.
func TestParts(t *testing.T) {
	const png = "iVBORw0KGgo="
	tests := []struct {
		name string
		api  string
		body string
		want []Part
	}{
		{"anthropic", APIAnthropic,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + png + `"}},{"type":"document","title":"a.txt","source":{"type":"text","media_type":"text/plain","data":"body"}},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]},{"role":"assistant","content":[{"type":"text","text":"no"}]},{"role":"user","content":[{"type":"tool_result","content":[{"type":"image","source":{"type":"base64","data":"no"}}]}]},{"role":"user","content":"again"}]}`,
			[]Part{{Type: PartText, Form: "text", Text: "hi"}, {Type: PartImage, Form: "image", MIME: "image/png", Data: png},
				{Type: PartFile, Form: "document", MIME: "text/plain", Name: "a.txt", Text: "body"}, {Type: PartImage, Form: "image", URL: "https://x/y.png"},
				{Type: PartText, Form: "text", Text: "again"}}},
		{"chat", APIChat,
			`{"messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + png + `"}},{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,QUJD"}}]},{"role":"tool","content":"x"}]}`,
			[]Part{{Type: PartText, Form: "text", Text: "hi"}, {Type: PartImage, Form: "image_url", MIME: "image/png", Data: png},
				{Type: PartFile, Form: "file", MIME: "application/pdf", Data: "QUJD", Name: "a.pdf"}}},
		{"responses", APIResponses,
			`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"data:image/png;base64,` + png + `"},{"type":"input_file","filename":"f","file_url":"https://x/f"},{"type":"input_image","image_url":"data:image/png,notbase64"}]},{"type":"function_call_output","output":"x"}]}`,
			[]Part{{Type: PartText, Form: "input_text", Text: "hi"}, {Type: PartImage, Form: "input_image", MIME: "image/png", Data: png},
				{Type: PartFile, Form: "input_file", URL: "https://x/f", Name: "f"}, {Type: PartImage, Form: "input_image", URL: "data:image/png,notbase64"}}},
		{"gemini", APIGemini,
			`{"contents":[{"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"image/png","data":"` + png + `"}},{"inline_data":{"mime_type":"text/plain","data":"QUJD"}},{"fileData":{"mimeType":"application/pdf","fileUri":"gs://f"}}]},{"role":"user","parts":[{"functionResponse":{}}]}]}`,
			[]Part{{Type: PartText, Form: "text", Text: "hi"}, {Type: PartImage, Form: "inlineData", MIME: "image/png", Data: png},
				{Type: PartFile, Form: "inlineData", MIME: "text/plain", Data: "QUJD"}, {Type: PartFile, Form: "fileData", MIME: "application/pdf", URL: "gs://f"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b map[string]any
			if err := json.Unmarshal([]byte(tt.body), &b); err != nil {
				t.Fatal(err)
			}
			var c *conversation
			switch tt.api {
			case APIAnthropic:
				c = parseAnthropic(b)
			case APIChat:
				c = parseChat(b)
			case APIResponses:
				c = parseResponses(b)
			case APIGemini:
				c = parseGemini(b, "g", false)
			}
			if !reflect.DeepEqual(c.parts, tt.want) {
				t.Errorf("parts\n got %+v\nwant %+v", c.parts, tt.want)
			}
			if got := Images(c.parts); len(got) == 0 || got[0].Type != PartImage {
				t.Errorf("Images %+v", got)
			}
		})
	}
}

// TestPartsBounded checks that a request records at most maxParts parts.
func TestPartsBounded(t *testing.T) {
	content := make([]any, maxParts+10)
	for i := range content {
		content[i] = map[string]any{"type": "text", "text": "x"}
	}
	c := parseAnthropic(map[string]any{"messages": []any{map[string]any{"role": "user", "content": content}}})
	if len(c.parts) != maxParts {
		t.Errorf("%d parts recorded, want %d", len(c.parts), maxParts)
	}
}
