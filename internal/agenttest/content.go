package agenttest

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/fakellm"
)

// PNG returns a real 4×4 PNG image (a gradient), base64: the bytes a test
// sends in an image part and expects at the model.
func PNG(t testing.TB) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	for x := range 4 {
		for y := range 4 {
			img.Set(x, y, color.RGBA{R: uint8(60 * x), G: uint8(60 * y), B: 128, A: 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// SendContent sends a message of parts to session sid and follows the turn
// to its end; it returns the turn's turn.completed, its events and the
// model requests the fake LLM answered during it.
func (s *Stack) SendContent(t testing.TB, sid string, parts []event.ContentPart) (event.TurnCompleted, []event.Event, []fakellm.Request) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	before := len(s.LLM.Requests())
	after, err := s.C.LastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.C.SendMessage(ctx, sid, client.SendMessage{Content: parts})
	if err != nil {
		t.Fatalf("send content: %v", err)
	}
	var evs []event.Event
	tc, err := s.C.WaitTurn(ctx, sid, tr.TurnID, after, func(e event.Event) error {
		evs = append(evs, e)
		return nil
	})
	if err != nil {
		t.Fatalf("content turn: %v\nevents:\n%s", err, Dump(evs))
	}
	return tc, evs, s.LLM.Requests()[before:]
}

// ModelCalls keeps the requests of reqs that are model calls.
func ModelCalls(reqs []fakellm.Request) []fakellm.Request {
	var out []fakellm.Request
	for _, r := range reqs {
		switch r.API {
		case fakellm.APIAnthropic, fakellm.APIResponses, fakellm.APIChat, fakellm.APIGemini:
			out = append(out, r)
		}
	}
	return out
}

// ImageReached reports whether a model call of reqs carried an image part
// with exactly the base64 bytes data, and in which form.
func ImageReached(reqs []fakellm.Request, data string) (form string, ok bool) {
	for _, r := range ModelCalls(reqs) {
		for _, p := range fakellm.Images(r.Parts) {
			if p.Data == data {
				return p.Form, true
			}
		}
	}
	return "", false
}

// FileReached reports whether a model call of reqs carried content (the
// text of a file): in a file part (inline text or base64 bytes), or in the
// text of a user message, and in which form.
func FileReached(reqs []fakellm.Request, content string) (form string, ok bool) {
	for _, r := range ModelCalls(reqs) {
		for _, p := range r.Parts {
			switch {
			case p.Type == fakellm.PartFile && strings.Contains(p.Text, content):
				return p.Form, true
			case p.Type == fakellm.PartFile && p.Data != "":
				if b, err := base64.StdEncoding.DecodeString(p.Data); err == nil && bytes.Contains(b, []byte(content)) {
					return p.Form, true
				}
			case p.Type == fakellm.PartText && strings.Contains(p.Text, content):
				return "text", true
			}
		}
	}
	return "", false
}

// FileMarker is the content of the file CheckContent sends.
const FileMarker = "agentbox file part 7f3a: the answer is forty-two"

// CheckContent proves the adapter's Images and Files flags through the
// model: in a fresh session (fakellm.ScenarioText), a message with a real
// PNG must reach the model with the same bytes when the adapter's Info
// says Images, and be refused 422 unsupported-content naming the part
// otherwise; a file part naming a file of the session's workspace must
// reach the model with the file's content when it says Files, and be
// refused otherwise. It returns the forms the model saw ("" for a refused
// part).
func (s *Stack) CheckContent(t testing.TB) (imageForm, fileForm string) {
	t.Helper()
	caps := s.Adapter.Info(t.Context()).Capabilities
	images, files := caps.Images, caps.Files
	s.SetScenario(fakellm.ScenarioText)
	ses, cwd := s.Create(t, client.PermissionDefault, nil)
	if err := os.WriteFile(filepath.Join(cwd, "notes.txt"), []byte(FileMarker+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := PNG(t)
	for _, c := range []struct {
		want bool
		part event.ContentPart
		form *string
	}{
		{images, event.ContentPart{Type: event.PartImage, MimeType: "image/png", Data: img}, &imageForm},
		{files, event.ContentPart{Type: event.PartFile, Path: "notes.txt"}, &fileForm},
	} {
		parts := []event.ContentPart{event.TextPart("what is in this " + string(c.part.Type) + "?"), c.part}
		if !c.want {
			_, err := s.C.SendMessage(t.Context(), ses.ID, client.SendMessage{Content: parts})
			if !client.IsUnsupportedContent(err) || !strings.Contains(err.Error(), "content[1]") {
				t.Errorf("%s part to an agent without the flag: %v, want 422 unsupported-content naming content[1]", c.part.Type, err)
			}
			continue
		}
		tc, evs, reqs := s.SendContent(t, ses.ID, parts)
		if tc.StopReason != event.StopEndTurn {
			t.Errorf("%s turn stopped %s\n%s", c.part.Type, tc.StopReason, Dump(evs))
		}
		var ok bool
		if c.part.Type == event.PartImage {
			*c.form, ok = ImageReached(reqs, img)
		} else {
			*c.form, ok = FileReached(reqs, FileMarker)
		}
		if !ok {
			t.Errorf("the model never got the %s part; the model calls carried:\n%s", c.part.Type, partsDump(ModelCalls(reqs)))
		}
		t.Logf("%s reached the model as %q", c.part.Type, *c.form)
	}
	return imageForm, fileForm
}

// partsDump describes the non-text parts (and the start of the text
// parts) each request carried.
func partsDump(reqs []fakellm.Request) string {
	var b strings.Builder
	for _, r := range reqs {
		fmt.Fprintf(&b, "%s %s:", r.API, r.Path)
		for _, p := range r.Parts {
			fmt.Fprintf(&b, " [%s/%s mime=%q data=%d url=%q text=%q]", p.Type, p.Form, p.MIME, len(p.Data), p.URL, clip(p.Text, 80))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
