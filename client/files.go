package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Problem types of the files API (/v1/sessions/{id}/files… and
// /v1/processes/{id}/files…). An unknown session or process is
// ProblemNotFound.
const (
	ProblemOutsideWorkspace = ProblemTypeBase + "outside-workspace" // 403: the path leaves the workspace: absolute, "..", or a symlink pointing out
	ProblemFileNotFound     = ProblemTypeBase + "file-not-found"    // 404: no file or directory at the path
	ProblemNotRegularFile   = ProblemTypeBase + "not-regular-file"  // 422: a device, fifo or socket, or a directory where a file is needed
	ProblemTooLarge         = ProblemTypeBase + "too-large"         // 413: a file, archive or listing past the daemon's bounds
	ProblemProtectedPath    = ProblemTypeBase + "protected-path"    // 403: the sandbox commit would drop the change (protected pattern, .git, host git configuration); the detail names the rule
	ProblemInvalidArchive   = ProblemTypeBase + "invalid-archive"   // 422: a tar stream that is malformed or has a forbidden entry (hard link, setuid bit, duplicate)
	ProblemFileExists       = ProblemTypeBase + "file-exists"       // 409: the target exists and the operation does not replace it
	ProblemSandboxLive      = ProblemTypeBase + "sandbox-live"      // 409: the workspace's sandbox closed during the request (try again), or its runtime cannot show its live workspace
)

// FileEntry is one file, directory or symlink of a session's workspace.
type FileEntry struct {
	Path  string    `json:"path" doc:"Slash-separated, relative to the workspace root; \".\" is the root."`
	Name  string    `json:"name"`
	Type  string    `json:"type" enum:"file,dir,symlink,other" doc:"other: a device, fifo or socket (never read or written)."`
	Size  int64     `json:"size"`
	Mode  string    `json:"mode" doc:"Permission bits in octal, e.g. \"0644\"."`
	MTime time.Time `json:"mtime"`
}

// FileList is a listing of a workspace directory.
type FileList struct {
	Entries []FileEntry `json:"entries" nullable:"false"`
	// Truncated is set when the listing stopped at the daemon's bound.
	Truncated bool `json:"truncated,omitempty" doc:"The listing stopped at the daemon's bound on entries."`
}

// MakeDir is the body of POST /v1/sessions/{id}/files/mkdir.
type MakeDir struct {
	Path    string `json:"path" minLength:"1" maxLength:"4096"`
	Parents bool   `json:"parents,omitempty" doc:"Make missing parent directories too; an existing directory is no error."`
}

// MoveFile is the body of POST /v1/sessions/{id}/files/move.
type MoveFile struct {
	From      string `json:"from" minLength:"1" maxLength:"4096"`
	To        string `json:"to" minLength:"1" maxLength:"4096"`
	Overwrite bool   `json:"overwrite,omitempty" doc:"Replace a file or empty directory at to."`
}

// FileChange is one change a watch reports.
type FileChange struct {
	Path string `json:"path"`
	Op   string `json:"op" enum:"create,write,remove,rename"`
}

// ProcessWorkspace names, for the files methods (ListFiles, StatFile,
// ReadFile, WriteFile, MakeDir, MoveFile, DeleteFile, DownloadArchive,
// UploadArchive, WatchFiles), the workspace of a process started with its
// own sandbox (StartProcess) instead of a session's: they then use
// /v1/processes/{id}/files…, e.g.
//
//	r, err := c.ReadFile(ctx, client.ProcessWorkspace(p.ID), "out.txt", 0, 0)
//
// The workspace is kept after the process ends, until it is deleted or
// forgotten.
func ProcessWorkspace(idOrTag string) string { return processWorkspacePrefix + idOrTag }

const processWorkspacePrefix = "process:"

// filesPath is /v1/sessions/{id}/files[/more], or for a ProcessWorkspace
// /v1/processes/{id}/files[/more].
func filesPath(id string, more ...string) (string, error) {
	if pid, ok := strings.CutPrefix(id, processWorkspacePrefix); ok {
		return processPath(pid, append([]string{"files"}, more...)...)
	}
	return sessionPath(id, append([]string{"files"}, more...)...)
}

// ListFiles lists the workspace directory path of a session ("" or "." is
// the root), depth levels down (0 is 1).
func (c *Client) ListFiles(ctx context.Context, id, path string, depth int) (FileList, error) {
	p, err := filesPath(id)
	if err != nil {
		return FileList{}, err
	}
	q := url.Values{"path": {orRoot(path)}}
	if depth > 0 {
		q.Set("depth", strconv.Itoa(depth))
	}
	var out FileList
	err = c.do(ctx, http.MethodGet, p, q, nil, &out)
	return out, err
}

// StatFile describes one entry of a session's workspace (a symlink itself,
// not its target).
func (c *Client) StatFile(ctx context.Context, id, path string) (FileEntry, error) {
	p, err := filesPath(id, "stat")
	if err != nil {
		return FileEntry{}, err
	}
	var out FileEntry
	err = c.do(ctx, http.MethodGet, p, url.Values{"path": {path}}, nil, &out)
	return out, err
}

// ReadFile returns a reader of a workspace file's bytes from offset,
// length bytes at most (0: to the end, within the daemon's bound). The
// caller closes it.
func (c *Client) ReadFile(ctx context.Context, id, path string, offset, length int64) (io.ReadCloser, error) {
	p, err := filesPath(id, "content")
	if err != nil {
		return nil, err
	}
	q := url.Values{"path": {path}}
	if offset > 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	if length > 0 {
		q.Set("length", strconv.FormatInt(length, 10))
	}
	return c.raw(ctx, http.MethodGet, p, q, nil, "", "application/octet-stream")
}

// WriteFile replaces (or creates) a workspace file with data.
func (c *Client) WriteFile(ctx context.Context, id, path string, data []byte) (FileEntry, error) {
	p, err := filesPath(id, "content")
	if err != nil {
		return FileEntry{}, err
	}
	return c.rawEntry(ctx, p, url.Values{"path": {path}}, data, "application/octet-stream")
}

// MakeDir makes a workspace directory.
func (c *Client) MakeDir(ctx context.Context, id, path string, parents bool) (FileEntry, error) {
	p, err := filesPath(id, "mkdir")
	if err != nil {
		return FileEntry{}, err
	}
	var out FileEntry
	err = c.do(ctx, http.MethodPost, p, nil, MakeDir{Path: path, Parents: parents}, &out)
	return out, err
}

// MoveFile renames a workspace entry.
func (c *Client) MoveFile(ctx context.Context, id, from, to string, overwrite bool) (FileEntry, error) {
	p, err := filesPath(id, "move")
	if err != nil {
		return FileEntry{}, err
	}
	var out FileEntry
	err = c.do(ctx, http.MethodPost, p, nil, MoveFile{From: from, To: to, Overwrite: overwrite}, &out)
	return out, err
}

// DeleteFile removes a workspace entry; a non-empty directory only with
// recursive.
func (c *Client) DeleteFile(ctx context.Context, id, path string, recursive bool) error {
	p, err := filesPath(id)
	if err != nil {
		return err
	}
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	return c.do(ctx, http.MethodDelete, p, q, nil, nil)
}

// DownloadArchive returns a tar stream of the workspace tree at path. The
// caller closes it.
func (c *Client) DownloadArchive(ctx context.Context, id, path string) (io.ReadCloser, error) {
	p, err := filesPath(id, "archive")
	if err != nil {
		return nil, err
	}
	return c.raw(ctx, http.MethodGet, p, url.Values{"path": {orRoot(path)}}, nil, "", "application/x-tar")
}

// UploadArchive unpacks the tar stream tarball into the workspace
// directory path (made if missing). Nothing is applied when an entry is
// refused.
func (c *Client) UploadArchive(ctx context.Context, id, path string, tarball []byte) (FileEntry, error) {
	p, err := filesPath(id, "archive")
	if err != nil {
		return FileEntry{}, err
	}
	return c.rawEntry(ctx, p, url.Values{"path": {orRoot(path)}}, tarball, "application/x-tar")
}

// WatchFiles yields the changes below the workspace directory path until
// ctx ends or the daemon ends the stream (its queue overflowed: list
// again and watch anew).
func (c *Client) WatchFiles(ctx context.Context, id, path string) iter.Seq2[FileChange, error] {
	return func(yield func(FileChange, error) bool) {
		p, err := filesPath(id, "watch")
		if err != nil {
			yield(FileChange{}, err)
			return
		}
		err = c.sse(ctx, http.MethodGet, p, url.Values{"path": {orRoot(path)}}, nil, "", func(m sseMessage) error {
			if m.Event != "change" {
				return nil
			}
			var ch FileChange
			if err := json.Unmarshal([]byte(m.Data), &ch); err != nil {
				return err
			}
			if !yield(ch, nil) {
				return errStopSSE
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			yield(FileChange{}, err)
		}
	}
}

func orRoot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// raw sends a request with a raw body (when not nil) and returns the
// answer's body, which must be of the media type want.
func (c *Client) raw(ctx context.Context, method, path string, q url.Values, body []byte, ct, want string) (io.ReadCloser, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := c.newRequest(ctx, method, path, q, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", want+", application/problem+json")
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer drainClose(resp)
		return nil, c.readAPIError(resp, method, path)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != want {
		drainClose(resp)
		return nil, fmt.Errorf("%s %s: answer is %q, not %s", method, path, mt, want)
	}
	return resp.Body, nil
}

// rawEntry PUTs a raw body and decodes the FileEntry answer.
func (c *Client) rawEntry(ctx context.Context, p string, q url.Values, body []byte, ct string) (FileEntry, error) {
	if body == nil {
		body = []byte{}
	}
	req, err := c.newRequest(ctx, http.MethodPut, p, q, bytes.NewReader(body))
	if err != nil {
		return FileEntry{}, err
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("Content-Type", ct)
	resp, err := c.hc.Do(req)
	if err != nil {
		return FileEntry{}, fmt.Errorf("PUT %s: %w", p, err)
	}
	defer drainClose(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return FileEntry{}, c.readAPIError(resp, http.MethodPut, p)
	}
	var out FileEntry
	err = decodeAnswer(resp.Body, http.MethodPut, p, &out, c.limits.Answer)
	return out, err
}
