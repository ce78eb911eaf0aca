package sandbox

import (
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/internal/inert"
)

// Limits of a Peer's text, in bytes.
const (
	MaxPeerName        = 64
	MaxPeerCommandLine = 1024
)

// NewPeer is the Peer of a process a runtime found behind a connection,
// from what it read of the process in the sandbox (its comm and its argv
// joined by spaces): every runtime builds its Peers here, and the egress
// proxy passes every Peer a runtime reports through it again (Sanitized),
// so that whatever a sandboxed process names itself reaches an event, an
// audit record or a terminal only as inert, bounded text.
//
// The text is valid UTF-8; the characters inert.Unsafe names (control
// characters: C0, DEL, C1; invisible formatting characters: bidi overrides
// and isolates, zero-width characters and the rest of Unicode's Cf
// category; line and paragraph separators; private-use and unassigned code
// points) are written as escapes (\x1b, \u202e), and invalid bytes as
// \xNN; the name is cut to MaxPeerName bytes and the command line
// to MaxPeerCommandLine, at a character boundary, ending in "…" when cut.
func NewPeer(pid int, name, commandLine string) Peer {
	if pid < 0 {
		pid = 0
	}
	return Peer{Pid: pid, Name: CleanReported(name, MaxPeerName), CommandLine: CleanReported(commandLine, MaxPeerCommandLine)}
}

// Sanitized returns p as NewPeer would have built it. It is idempotent.
func (p Peer) Sanitized() Peer { return NewPeer(p.Pid, p.Name, p.CommandLine) }

// CleanReported makes text a sandbox reported safe to show: see NewPeer.
// It returns at most limit bytes (limit < 4 is taken as 4).
func CleanReported(s string, limit int) string {
	limit = max(limit, 4)
	var pieces []string
	total := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size <= 1:
			piece = inert.EscapeByte(s[i])
		case inert.Unsafe(r):
			piece = inert.Escape(r)
		default:
			piece = s[i : i+size]
		}
		i += size
		pieces = append(pieces, piece)
		total += len(piece)
		if total > 2*limit+16 {
			break // enough to know it is cut
		}
	}
	if total <= limit {
		return strings.Join(pieces, "")
	}
	const ellipsis = "…"
	var b strings.Builder
	for _, p := range pieces {
		if b.Len()+len(p)+len(ellipsis) > limit {
			break
		}
		b.WriteString(p)
	}
	b.WriteString(ellipsis)
	return b.String()
}
