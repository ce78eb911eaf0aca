package httpapi

import (
	"net/http"
	"sync"

	"github.com/agentbox/agentbox/client"
)

// DefaultMaxUploadBytes is the default of Config.MaxUploadBytes.
const DefaultMaxUploadBytes = 256 << 20

// uploadBudget bounds the memory of the upload bodies (a file's content,
// a tar stream) read or held at once: each takes, before its first byte
// is read, what it may grow to (its Content-Length, or its operation's
// limit when unknown or larger) and gives it back when its handler has
// returned. Past the budget the upload is refused at once (429) instead
// of waiting: a waiting upload holds its connection, and the budget is
// there so that many of them cannot hold the daemon's memory.
type uploadBudget struct {
	mu   sync.Mutex
	free int64
}

// take reserves n bytes; false when they are not free.
func (b *uploadBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.free {
		return false
	}
	b.free -= n
	return true
}

func (b *uploadBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.free += n
}

// isUpload says whether an operation's body counts in the upload budget.
func isUpload(l bodyLimit) bool { return l == limitFile || l == limitArchive }

// uploadSize is what an upload may grow to in memory: its length when
// declared and within limit, else limit.
func uploadSize(r *http.Request, limit int64) int64 {
	if r.ContentLength >= 0 && r.ContentLength < limit {
		return r.ContentLength
	}
	return limit
}

// errUploadsBusy answers an upload past the budget.
var errUploadsBusy = newProblem(http.StatusTooManyRequests, client.ProblemTooManyRequests,
	"As many uploads are being received as the daemon holds in memory at once; retry after Retry-After.").withHeader("Retry-After", retryAfterBusy)
