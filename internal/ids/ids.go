// Package ids makes the identifiers the daemon hands out: a short type prefix
// and a time-ordered UUIDv7 in hex, so ids sort by creation time and say what
// they name (ses_…, turn_…, perm_…).
package ids

import (
	"encoding/hex"

	"github.com/google/uuid"
)

// Prefixes of the identifiers the daemon creates.
const (
	Session    = "ses"
	Turn       = "turn"
	Event      = "evt"
	Item       = "item"
	Permission = "perm"
	Question   = "q"
	Daemon     = "dmn"
)

// New returns prefix_<32 hex digits of a UUIDv7>.
func New(prefix string) string {
	u, err := uuid.NewV7()
	if err != nil {
		// NewV7 only fails if the system's random source does; fall back
		// to v4, which panics in that case too, as it should.
		u = uuid.New()
	}
	var b [32]byte
	hex.Encode(b[:], u[:])
	return prefix + "_" + string(b[:])
}
