package fakellm

import "strings"

// Kinds of Part.
const (
	PartText  = "text"
	PartImage = "image"
	PartFile  = "file"
)

// maxParts bounds how many parts a request records.
const maxParts = 256

// Part is one content part of a user message of a request (not of a tool
// result), as the API carried it, so that a test can check what reached
// the model: the bytes of an image, the content of a file.
type Part struct {
	// Type is PartText, PartImage or PartFile.
	Type string `json:"type"`
	// Form is the API's own name of the block: Anthropic "text", "image",
	// "document"; Chat "text", "image_url", "file"; Responses
	// "input_text", "input_image", "input_file"; Gemini "text",
	// "inlineData", "fileData".
	Form string `json:"form"`
	MIME string `json:"mime,omitempty"`
	// Data is the base64 of inline bytes (a base64 source or a data: URL).
	Data string `json:"data,omitempty"`
	// URL is where non-inline content was referenced (not a data: URL).
	URL  string `json:"url,omitempty"`
	Name string `json:"name,omitempty"`
	// Text is the text of a text part (or of a text document).
	Text string `json:"text,omitempty"`
}

// Images returns the image parts of ps.
func Images(ps []Part) []Part { return partsOf(ps, PartImage) }

// Files returns the file parts of ps.
func Files(ps []Part) []Part { return partsOf(ps, PartFile) }

func partsOf(ps []Part, typ string) []Part {
	var out []Part
	for _, p := range ps {
		if p.Type == typ {
			out = append(out, p)
		}
	}
	return out
}

// addPart appends p to c's parts, up to maxParts.
func (c *conversation) addPart(p Part) {
	if len(c.parts) < maxParts {
		c.parts = append(c.parts, p)
	}
}

// dataURL splits a data: URL with base64 content into its media type and
// data; ok is false for anything else.
func dataURL(u string) (mime, data string, ok bool) {
	rest, found := strings.CutPrefix(u, "data:")
	if !found {
		return "", "", false
	}
	head, data, found := strings.Cut(rest, ",")
	if !found {
		return "", "", false
	}
	mime, params, _ := strings.Cut(head, ";")
	if !strings.Contains(";"+params+";", ";base64;") {
		return "", "", false
	}
	return mime, data, true
}

// urlPart is an image or file part carried by URL: inline when u is a
// base64 data: URL.
func urlPart(typ, form, u string) Part {
	if mime, data, ok := dataURL(u); ok {
		return Part{Type: typ, Form: form, MIME: mime, Data: data}
	}
	return Part{Type: typ, Form: form, URL: u}
}

// anthropicParts records the blocks of an Anthropic user message.
func anthropicParts(c *conversation, content any) {
	if s, ok := content.(string); ok {
		c.addPart(Part{Type: PartText, Form: "text", Text: s})
		return
	}
	for _, bl := range arr(content) {
		b := obj(bl)
		switch typ := str(b["type"]); typ {
		case "text":
			c.addPart(Part{Type: PartText, Form: typ, Text: str(b["text"])})
		case "image", "document":
			kind := PartImage
			if typ == "document" {
				kind = PartFile
			}
			src := obj(b["source"])
			p := Part{Type: kind, Form: typ, MIME: str(src["media_type"]), Name: str(b["title"])}
			switch str(src["type"]) {
			case "base64":
				p.Data = str(src["data"])
			case "text":
				p.Text = str(src["data"])
			case "url":
				p.URL = str(src["url"])
			}
			c.addPart(p)
		}
	}
}

// chatParts records the parts of a Chat Completions user message.
func chatParts(c *conversation, content any) {
	if s, ok := content.(string); ok {
		c.addPart(Part{Type: PartText, Form: "text", Text: s})
		return
	}
	for _, it := range arr(content) {
		m := obj(it)
		switch typ := str(m["type"]); typ {
		case "text":
			c.addPart(Part{Type: PartText, Form: typ, Text: str(m["text"])})
		case "image_url":
			u := str(m["image_url"])
			if u == "" {
				u = str(obj(m["image_url"])["url"])
			}
			c.addPart(urlPart(PartImage, typ, u))
		case "file":
			f := obj(m["file"])
			p := urlPart(PartFile, typ, str(f["file_data"]))
			p.Name = str(f["filename"])
			c.addPart(p)
		}
	}
}

// responsesParts records the parts of a Responses user message.
func responsesParts(c *conversation, content any) {
	if s, ok := content.(string); ok {
		c.addPart(Part{Type: PartText, Form: "input_text", Text: s})
		return
	}
	for _, it := range arr(content) {
		m := obj(it)
		switch typ := str(m["type"]); typ {
		case "input_text":
			c.addPart(Part{Type: PartText, Form: typ, Text: str(m["text"])})
		case "input_image":
			c.addPart(urlPart(PartImage, typ, str(m["image_url"])))
		case "input_file":
			p := urlPart(PartFile, typ, str(m["file_data"]))
			if p.URL == "" && p.Data == "" {
				p.URL = str(m["file_url"])
			}
			p.Name = str(m["filename"])
			c.addPart(p)
		}
	}
}

// geminiForms names Gemini's part keys in their camelCase form.
var geminiForms = map[string]string{"inlineData": "inlineData", "inline_data": "inlineData", "fileData": "fileData", "file_data": "fileData"}

// geminiParts records the parts of a Gemini user content.
func geminiParts(c *conversation, parts []any) {
	for _, it := range parts {
		m := obj(it)
		if t, ok := m["text"].(string); ok {
			c.addPart(Part{Type: PartText, Form: "text", Text: t})
			continue
		}
		for _, key := range []string{"inlineData", "inline_data", "fileData", "file_data"} {
			d := obj(m[key])
			if d == nil {
				continue
			}
			mime := str(d["mimeType"])
			if mime == "" {
				mime = str(d["mime_type"])
			}
			kind := PartFile
			if strings.HasPrefix(mime, "image/") {
				kind = PartImage
			}
			p := Part{Type: kind, Form: geminiForms[key], MIME: mime, Data: str(d["data"])}
			if u := str(d["fileUri"]) + str(d["file_uri"]); u != "" {
				p.URL = u
			}
			c.addPart(p)
			break
		}
	}
}
