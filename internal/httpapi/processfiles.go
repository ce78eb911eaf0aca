package httpapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/internal/execution"
)

// RemoteProcessFiles is an optional ability of an ExecService: the files
// of a process running in a provider's sandbox are served by the agentbox
// daemon in that sandbox (*execution.Service has it, through the relay).
type RemoteProcessFiles interface {
	RemoteFiles(idOrTag string) (execution.RemoteFilesServer, bool)
}

var _ RemoteProcessFiles = (*execution.Service)(nil)

// processFilesPrefix is where a process's files routes hang.
const processFilesPrefix = "/v1/processes/{id}/files"

// forwardProcessFiles serves a files request of a process running on a
// provider from its sandbox, and reports whether it did (the answer is
// then written). Any other process's files are the route's handler's.
func (s *server) forwardProcessFiles(w http.ResponseWriter, r *http.Request, pattern string) bool {
	rf, ok := s.cfg.Exec.(RemoteProcessFiles)
	if !ok {
		return false
	}
	_, path, _ := strings.Cut(pattern, " ")
	rest, ok := strings.CutPrefix(path, processFilesPrefix)
	if !ok {
		return false
	}
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/v1/processes/"), "/")
	id, err := url.PathUnescape(seg)
	if err != nil || id == "" {
		return false
	}
	fs, ok := rf.RemoteFiles(id)
	if !ok {
		return false
	}
	fs.ServeFiles(w, r, rest)
	return true
}
