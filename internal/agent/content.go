package agent

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"unicode/utf8"

	"github.com/agentbox/agentbox/event"
)

// FileText is the text form of a file part, for agents whose prompt has
// no file input of its own (codex, pi): "Attached file NAME:" and the
// file's content. The engine has read a path part into Data already
// (confined to the session's workspace); a part without data, or whose
// content is not UTF-8 text, cannot be given this way and is refused
// (ErrUnsupportedContent), never dropped.
func FileText(p event.ContentPart) (string, error) {
	if p.Data == "" {
		return "", fmt.Errorf("%w: a file part without data", ErrUnsupportedContent)
	}
	b, err := base64.StdEncoding.DecodeString(p.Data)
	if err != nil {
		return "", fmt.Errorf("file data is not base64: %w", err)
	}
	if !utf8.Valid(b) || bytes.ContainsRune(b, 0) {
		return "", fmt.Errorf("%w: the file (%s) is not text, and the agent takes files only as text", ErrUnsupportedContent, p.MimeType)
	}
	name := p.Path
	if name == "" {
		name = "(unnamed)"
	}
	return fmt.Sprintf("Attached file %s:\n%s", name, b), nil
}
