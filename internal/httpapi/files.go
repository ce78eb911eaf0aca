package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/files"
)

// FilesService opens a workspace for the files API: a session's
// (Config.Files) or a process's (Config.ProcessFiles); the daemon's
// implementation decides which tree that is and what a change may touch
// (see docs/ARCHITECTURE.md, "Workspace files"). An unknown session or
// process is an error of kind NotFound.
type FilesService interface {
	Open(ctx context.Context, id string) (*files.Workspace, error)
}

type filesListInput struct {
	ID    string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Path  string `query:"path" maxLength:"4096" default:"." doc:"A directory, relative to the workspace root."`
	Depth int    `query:"depth" minimum:"1" maximum:"64" default:"1" doc:"Levels listed: 1 is the directory's entries."`
}

type filePathInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Path string `query:"path" required:"true" minLength:"1" maxLength:"4096" doc:"Relative to the workspace root."`
}

type fileReadInput struct {
	ID     string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Path   string `query:"path" required:"true" minLength:"1" maxLength:"4096" doc:"A regular file, relative to the workspace root."`
	Offset int64  `query:"offset" minimum:"0" doc:"The first byte to read."`
	Length int64  `query:"length" minimum:"0" doc:"Bytes to read at most; 0 or absent: to the end (within the daemon's bound)."`
}

type fileWriteInput struct {
	ID      string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Path    string `query:"path" required:"true" minLength:"1" maxLength:"4096" doc:"A regular file, relative to the workspace root; its directory must exist."`
	RawBody []byte `contentType:"application/octet-stream"`
}

type mkdirInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Body client.MakeDir
}

type moveInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Body client.MoveFile
}

type fileDeleteInput struct {
	ID        string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Path      string `query:"path" required:"true" minLength:"1" maxLength:"4096" doc:"Relative to the workspace root."`
	Recursive bool   `query:"recursive" doc:"Remove a directory with everything in it."`
}

type fileTreeInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Path string `query:"path" maxLength:"4096" default:"." doc:"Relative to the workspace root."`
}

type archiveUploadInput struct {
	ID      string `path:"id" minLength:"1" maxLength:"128" doc:"The session's ID (/v1/sessions/{id}/files…), or the process's ID or tag (/v1/processes/{id}/files…)."`
	Path    string `query:"path" maxLength:"4096" default:"." doc:"The directory to unpack into, made if missing."`
	RawBody []byte `contentType:"application/x-tar"`
}

type fileListOutput struct{ Body client.FileList }

type fileEntryOutput struct{ Body client.FileEntry }

// filesErrors are the statuses every files operation may answer besides
// the common ones.
var filesErrors = []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict,
	http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable}

const filesDoc = " Paths are slash-separated and relative to the workspace root (\".\"); one that leaves it (absolute, \"..\", " +
	"a symlink pointing out) is refused with 403 outside-workspace."

// filesScope is whose workspace a set of files routes serves: a
// session's (/v1/sessions/{id}/files…) or a process's
// (/v1/processes/{id}/files…), the same operations on each.
type filesScope struct {
	base   string // the path the files routes hang under
	opName func(verb, noun string) string
	// docs: what the workspace is, what its reads show, what its changes do.
	whose, reads, changes string
	svc                   func(*server) FilesService
}

var sessionFilesScope = &filesScope{
	base:   "/v1/sessions/{id}",
	opName: func(verb, noun string) string { return verb + noun },
	whose:  "the session's workspace",
	reads: " While the session's sandbox runs, reads show the workspace as the sandbox sees it now (the agent's uncommitted work included); " +
		"a runtime that cannot show it is refused with 409 sandbox-live.",
	changes: " A change the session's sandbox commit would drop (a protected path, anything in .git, what the host's git " +
		"configuration runs) is refused with 403 protected-path. While the session's sandbox runs, changes are made inside it " +
		"(they reach the host with its commit, as the agent's do); 409 sandbox-live when it closes meanwhile.",
	svc: func(s *server) FilesService { return s.cfg.Files },
}

var processFilesScope = &filesScope{
	base:   "/v1/processes/{id}",
	opName: func(verb, noun string) string { return verb + "Process" + noun },
	whose:  "the workspace of a process started with its own sandbox (POST /v1/processes; kept after it ends until it is deleted or forgotten)",
	reads: " While the process runs, reads show the workspace as its sandbox sees it now; once it has ended, what its sandbox committed. " +
		"A process in a session's sandbox has no workspace of its own (404: use the session's). " +
		"A process on a provider: while it runs, every files request is made of the agentbox daemon in its sandbox (its answer passed back, bounded); " +
		"once it has ended, its workspace as copied back to this daemon.",
	changes: " A change the process's sandbox commit would drop (a protected path of its policy, anything in .git) is refused " +
		"with 403 protected-path. While the process runs, changes are made inside its sandbox; 409 sandbox-live when it ends meanwhile.",
	svc: func(s *server) FilesService { return s.cfg.ProcessFiles },
}

// bindFiles gives a files handler its scope.
func bindFiles[I, O any](sc *filesScope, f func(*server, context.Context, *filesScope, *I) (*O, error)) func(*server, context.Context, *I) (*O, error) {
	return func(s *server, ctx context.Context, in *I) (*O, error) { return f(s, ctx, sc, in) }
}

// filesRoutes are the files operations of one scope.
func filesRoutes(sc *filesScope) []route {
	p := sc.base + "/files"
	return []route{
		&op[filesListInput, fileListOutput]{h: bindFiles(sc, (*server).listFiles), opSpec: opSpec{
			ID: sc.opName("list", "Files"), Method: http.MethodGet, Path: p, Tag: "files",
			Summary:     "List a workspace directory",
			Description: "The entries of a directory of " + sc.whose + ", depth levels down, in path order; symlinks are listed, not followed. At most 10 000 entries (truncated says so)." + sc.reads + filesDoc,
			Errors:      errs(filesErrors...),
		}},
		&op[filePathInput, fileEntryOutput]{h: bindFiles(sc, (*server).statFile), opSpec: opSpec{
			ID: sc.opName("stat", "File"), Method: http.MethodGet, Path: p + "/stat", Tag: "files",
			Summary:     "Describe a workspace entry",
			Description: "A file, directory or symlink (the link itself) of " + sc.whose + "." + sc.reads + filesDoc,
			Errors:      errs(filesErrors...),
		}},
		&op[fileReadInput, streamOutput]{h: bindFiles(sc, (*server).readFile), opSpec: opSpec{
			ID: sc.opName("read", "File"), Method: http.MethodGet, Path: p + "/content", Tag: "files",
			Summary:     "Read a workspace file",
			Description: "The bytes of a regular file of " + sc.whose + ", from offset, length bytes at most; one read returns at most 16 MiB (413 too-large beyond: read in ranges). Devices, fifos and sockets are refused (422 not-regular-file)." + sc.reads + filesDoc,
			Errors:      errs(append(filesErrors, http.StatusUnprocessableEntity)...),
			Stream:      streamFile,
		}},
		&op[fileWriteInput, fileEntryOutput]{h: bindFiles(sc, (*server).writeFile), opSpec: opSpec{
			ID: sc.opName("write", "File"), Method: http.MethodPut, Path: p + "/content", Tag: "files",
			Summary:     "Write a workspace file",
			Description: "Replaces (or creates) a regular file of " + sc.whose + " with the request's bytes, at most 16 MiB, atomically (429 with Retry-After while the daemon holds as many uploads in memory as it allows): a symlink at the path is replaced, never written through. An existing file keeps its permission bits." + filesDoc + sc.changes,
			Limit:       limitFile, ReadTimeout: time.Minute,
			Errors: errs(append(filesErrors, http.StatusUnsupportedMediaType, http.StatusTooManyRequests)...),
		}},
		&op[mkdirInput, fileEntryOutput]{h: bindFiles(sc, (*server).makeDir), opSpec: opSpec{
			ID: sc.opName("make", "Dir"), Method: http.MethodPost, Path: p + "/mkdir", Tag: "files",
			Summary:     "Make a workspace directory",
			Description: "Makes a directory of " + sc.whose + " (with parents, its missing parents too)." + filesDoc + sc.changes,
			Errors:      errs(append(filesErrors, http.StatusBadRequest, http.StatusUnsupportedMediaType)...),
		}},
		&op[moveInput, fileEntryOutput]{h: bindFiles(sc, (*server).moveFile), opSpec: opSpec{
			ID: sc.opName("move", "File"), Method: http.MethodPost, Path: p + "/move", Tag: "files",
			Summary:     "Move a workspace entry",
			Description: "Renames from to to in " + sc.whose + "; an existing to only with overwrite (a file or an empty directory). Every path a moved directory's entries leave and take is judged." + filesDoc + sc.changes,
			Errors:      errs(append(filesErrors, http.StatusBadRequest, http.StatusUnsupportedMediaType)...),
		}},
		&op[fileDeleteInput, struct{}]{h: bindFiles(sc, (*server).deleteFile), opSpec: opSpec{
			ID: sc.opName("delete", "File"), Method: http.MethodDelete, Path: p, Tag: "files",
			Summary:     "Delete a workspace entry",
			Description: "Removes a file, symlink or empty directory of " + sc.whose + "; a directory with everything in it with recursive." + filesDoc + sc.changes,
			Status:      http.StatusNoContent,
			Errors:      errs(filesErrors...),
		}},
		&op[fileTreeInput, streamOutput]{h: bindFiles(sc, (*server).downloadArchive), opSpec: opSpec{
			ID: sc.opName("download", "Archive"), Method: http.MethodGet, Path: p + "/archive", Tag: "files",
			Summary:     "Download a workspace tree as tar",
			Description: "A tar stream (PAX) of the tree at path of " + sc.whose + ", names relative to it: files, directories and symlinks (not followed); devices, fifos and sockets are left out. At most 10 000 entries and 64 MiB of files (413 too-large before any byte)." + sc.reads + filesDoc,
			Errors:      errs(filesErrors...),
			Stream:      streamArchive,
		}},
		&op[archiveUploadInput, fileEntryOutput]{h: bindFiles(sc, (*server).uploadArchive), opSpec: opSpec{
			ID: sc.opName("upload", "Archive"), Method: http.MethodPut, Path: p + "/archive", Tag: "files",
			Summary: "Upload a tar into the workspace",
			Description: "Unpacks a tar stream into the directory path (made if missing) of " + sc.whose + ", replacing files. Every entry is checked before anything is applied: " +
				"relative clean names, files, directories and symlinks only (a symlink's target inside the workspace), no hard links, devices or fifos, " +
				"no setuid, setgid or sticky bit, at most 10 000 entries and 64 MiB of files; a refused entry applies nothing (422 invalid-archive, " +
				"403, 413). While the daemon holds as many uploads in memory as it allows, 429 with Retry-After." + filesDoc + sc.changes,
			Limit: limitArchive, ReadTimeout: 5 * time.Minute,
			Errors: errs(append(filesErrors, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusTooManyRequests)...),
		}},
		&op[fileTreeInput, streamOutput]{h: bindFiles(sc, (*server).watchFiles), opSpec: opSpec{
			ID: sc.opName("watch", "Files"), Method: http.MethodGet, Path: p + "/watch", Tag: "files",
			Summary: "Watch a workspace directory",
			Description: "Server-Sent Events, one change event per change below the directory of " + sc.whose + " (at every depth, up to 1024 directories): create, write, remove, " +
				"rename (for the old path and the new). The stream ends when the daemon's queue of changes overflows: list again and watch anew. " +
				"A stream opened while the sandbox runs follows the sandbox's view, changes as they are made, and ends when the sandbox closes: " +
				"watch anew to follow the tree that replaced it." + filesDoc,
			Errors: errs(filesErrors...),
			Stream: streamChanges,
		}},
	}
}

func filesOps() []route {
	return slices.Concat(filesRoutes(sessionFilesScope), filesRoutes(processFilesScope))
}

// filesSvc returns the scope's service, or a 503 when the daemon has none.
func (s *server) filesSvc(sc *filesScope) (FilesService, error) {
	svc := sc.svc(s)
	if svc == nil {
		return nil, newProblem(http.StatusServiceUnavailable, client.ProblemUnavailable, "This daemon serves no workspace files here.")
	}
	return svc, nil
}

// workspace opens the scope's workspace id; the caller closes it.
func (s *server) workspace(ctx context.Context, sc *filesScope, id string) (*files.Workspace, error) {
	svc, err := s.filesSvc(sc)
	if err != nil {
		return nil, err
	}
	w, err := svc.Open(ctx, id)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return w, nil
}

func toFileEntry(e files.Entry) client.FileEntry {
	return client.FileEntry{Path: e.Path, Name: e.Name, Type: e.Type, Size: e.Size,
		Mode: fmt.Sprintf("%04o", uint32(e.Mode)), MTime: e.ModTime.UTC()}
}

// withWorkspace runs f on the session's workspace and closes it.
func withWorkspace[O any](ctx context.Context, s *server, sc *filesScope, id string, f func(*files.Workspace) (*O, error)) (*O, error) {
	w, err := s.workspace(ctx, sc, id)
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Close() }()
	out, err := f(w)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return out, nil
}

func entryOutput(e files.Entry, err error) (*fileEntryOutput, error) {
	if err != nil {
		return nil, err
	}
	return &fileEntryOutput{Body: toFileEntry(e)}, nil
}

func (s *server) listFiles(ctx context.Context, sc *filesScope, in *filesListInput) (*fileListOutput, error) {
	return withWorkspace(ctx, s, sc, in.ID, func(w *files.Workspace) (*fileListOutput, error) {
		es, truncated, err := w.List(ctx, in.Path, in.Depth)
		if err != nil {
			return nil, err
		}
		out := client.FileList{Entries: make([]client.FileEntry, len(es)), Truncated: truncated}
		for i, e := range es {
			out.Entries[i] = toFileEntry(e)
		}
		return &fileListOutput{Body: out}, nil
	})
}

func (s *server) statFile(ctx context.Context, sc *filesScope, in *filePathInput) (*fileEntryOutput, error) {
	return withWorkspace(ctx, s, sc, in.ID, func(w *files.Workspace) (*fileEntryOutput, error) {
		return entryOutput(w.Stat(ctx, in.Path))
	})
}

func (s *server) readFile(ctx context.Context, sc *filesScope, in *fileReadInput) (*streamOutput, error) {
	w, err := s.workspace(ctx, sc, in.ID)
	if err != nil {
		return nil, err
	}
	r, n, err := w.Read(ctx, in.Path, in.Offset, in.Length)
	if err != nil {
		_ = w.Close()
		return nil, s.fail(ctx, err)
	}
	return &streamOutput{Body: func(rw http.ResponseWriter) {
		defer func() { _ = w.Close() }()
		defer r.Close()
		h := rw.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Length", strconv.FormatInt(n, 10))
		h.Set("X-Content-Type-Options", "nosniff")
		rw.WriteHeader(http.StatusOK)
		_, _ = io.Copy(rw, r)
	}}, nil
}

func (s *server) writeFile(ctx context.Context, sc *filesScope, in *fileWriteInput) (*fileEntryOutput, error) {
	return withWorkspace(ctx, s, sc, in.ID, func(w *files.Workspace) (*fileEntryOutput, error) {
		return entryOutput(w.Write(ctx, in.Path, in.RawBody))
	})
}

func (s *server) makeDir(ctx context.Context, sc *filesScope, in *mkdirInput) (*fileEntryOutput, error) {
	return withWorkspace(ctx, s, sc, in.ID, func(w *files.Workspace) (*fileEntryOutput, error) {
		return entryOutput(w.Mkdir(ctx, in.Body.Path, in.Body.Parents))
	})
}

func (s *server) moveFile(ctx context.Context, sc *filesScope, in *moveInput) (*fileEntryOutput, error) {
	return withWorkspace(ctx, s, sc, in.ID, func(w *files.Workspace) (*fileEntryOutput, error) {
		return entryOutput(w.Move(ctx, in.Body.From, in.Body.To, in.Body.Overwrite))
	})
}

func (s *server) deleteFile(ctx context.Context, sc *filesScope, in *fileDeleteInput) (*struct{}, error) {
	return withWorkspace(ctx, s, sc, in.ID, func(w *files.Workspace) (*struct{}, error) {
		if err := w.Delete(ctx, in.Path, in.Recursive); err != nil {
			return nil, err
		}
		return &struct{}{}, nil
	})
}

func (s *server) downloadArchive(ctx context.Context, sc *filesScope, in *fileTreeInput) (*streamOutput, error) {
	w, err := s.workspace(ctx, sc, in.ID)
	if err != nil {
		return nil, err
	}
	write, err := w.PrepareArchive(ctx, in.Path)
	if err != nil {
		_ = w.Close()
		return nil, s.fail(ctx, err)
	}
	return &streamOutput{Body: func(rw http.ResponseWriter) {
		defer func() { _ = w.Close() }()
		rw.Header().Set("Content-Type", "application/x-tar")
		rw.Header().Set("X-Content-Type-Options", "nosniff")
		rw.WriteHeader(http.StatusOK)
		if err := write(rw); err != nil && ctx.Err() == nil {
			// The status is sent: a cut stream is all the client can
			// be told (a tar without its end marker).
			logFor(ctx).WarnContext(ctx, "archive stream cut", "err", err)
			panic(http.ErrAbortHandler)
		}
	}}, nil
}

func (s *server) uploadArchive(ctx context.Context, sc *filesScope, in *archiveUploadInput) (*fileEntryOutput, error) {
	return withWorkspace(ctx, s, sc, in.ID, func(w *files.Workspace) (*fileEntryOutput, error) {
		return entryOutput(w.Unpack(ctx, in.Path, bytes.NewReader(in.RawBody)))
	})
}

func (s *server) watchFiles(ctx context.Context, sc *filesScope, in *fileTreeInput) (*streamOutput, error) {
	w, err := s.workspace(ctx, sc, in.ID)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	changes, err := w.Watch(wctx, in.Path)
	if err != nil {
		cancel()
		_ = w.Close()
		return nil, s.fail(ctx, err)
	}
	return &streamOutput{Body: func(rw http.ResponseWriter) {
		defer func() { _ = w.Close() }()
		defer cancel()
		c := s.newSSE(rw)
		defer c.finish()
		if !c.begin(0) {
			return
		}
		for ch := range changes {
			if !c.event("", "change", client.FileChange{Path: ch.Path, Op: ch.Op}) {
				return
			}
		}
	}}, nil
}
