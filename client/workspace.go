package client

import (
	"context"
	"net/http"
	"net/url"
)

// Statuses of a DiffFile.
const (
	DiffAdded    = "added"
	DiffModified = "modified"
	DiffDeleted  = "deleted"
)

// DiffFile is one file a session changed.
type DiffFile struct {
	Path   string `json:"path" doc:"Slash-separated, relative to the session's workspace, as the workspace names it: untrusted (the agent named it)."`
	Status string `json:"status" enum:"added,modified,deleted"`
	Binary bool   `json:"binary,omitempty" doc:"Listed, not diffed: binary content, or a file over the size whose content is kept (1 MiB)."`
}

// SessionDiff is what a session changed in its workspace.
type SessionDiff struct {
	Files []DiffFile `json:"files" doc:"The changed files (regular files and symbolic links; a link's content is its target), in path order."`
	Diff  string     `json:"diff" doc:"Unified diff of the text files (git's form: a/ and b/ prefixes, /dev/null for an added or deleted file). A path with control characters, quotes or backslashes is written escaped."`
	// Truncated is set when a bound cut the answer.
	Truncated bool `json:"truncated" doc:"A bound cut the answer (1000 files, 1 MiB of diff, or the 20000 entries a workspace state records): changes may be missing."`
}

// DiffOptions select a session diff.
type DiffOptions struct {
	// Turn, when set, gives the changes of that turn only.
	Turn string
}

// Diff returns what session id changed in its workspace since it started,
// or during one turn (opts.Turn).
func (c *Client) Diff(ctx context.Context, id string, opts DiffOptions) (SessionDiff, error) {
	p, err := sessionPath(id, "diff")
	if err != nil {
		return SessionDiff{}, err
	}
	var q url.Values
	if opts.Turn != "" {
		q = url.Values{"turn": {opts.Turn}}
	}
	var out SessionDiff
	err = c.do(ctx, http.MethodGet, p, q, nil, &out)
	return out, err
}

// SessionExecRequest is a command to run in a session's sandbox, under the
// session's policy (it takes none of its own).
type SessionExecRequest struct {
	Argv      []string `json:"argv" minItems:"1" maxItems:"4096" doc:"The command; argv[0] is looked up in the sandbox's PATH. It runs in the session's workspace as the agent sees it."`
	Stdin     string   `json:"stdin,omitempty" maxLength:"4194304" doc:"The process's standard input; empty means /dev/null."`
	TimeoutMS int64    `json:"timeout_ms,omitempty" minimum:"0" doc:"Wall-clock limit in milliseconds, when shorter than the policy's."`
}

// SessionExec runs a command in session id's sandbox, beside its agent,
// and returns its result (the same shape as Exec's).
func (c *Client) SessionExec(ctx context.Context, id string, req SessionExecRequest) (ExecResult, error) {
	p, err := sessionPath(id, "exec")
	if err != nil {
		return ExecResult{}, err
	}
	var out ExecResult
	err = c.do(ctx, http.MethodPost, p, nil, req, &out)
	return out, err
}

// SessionStartProcess is the body of POST /v1/sessions/{id}/processes: a
// process in the session's sandbox, under the session's policy (it takes
// no policy and no files of its own).
type SessionStartProcess struct {
	Argv      []string          `json:"argv" minItems:"1" maxItems:"4096" doc:"The command; argv[0] is looked up in the sandbox's PATH."`
	Env       map[string]string `json:"env,omitempty" doc:"Added to the environment the session's policy defines."`
	Cwd       string            `json:"cwd,omitempty" maxLength:"4096" doc:"Absolute inside the sandbox, or relative to the session's workspace (the default)."`
	Stdin     bool              `json:"stdin,omitempty" doc:"Keep standard input open for POST …/stdin."`
	TTY       bool              `json:"tty,omitempty" doc:"Run the process on a pseudo-terminal, as tty of POST /v1/processes: the command is in the terminal's foreground process group (a shell has job control); SIGINT, SIGQUIT and SIGSTOP act as the terminal's keys (^C, ^\\, ^Z) on its foreground group; POST …/resize changes the size."`
	Rows      int               `json:"rows,omitempty" minimum:"0" maximum:"1000" doc:"The terminal's height, with tty (default 24)."`
	Cols      int               `json:"cols,omitempty" minimum:"0" maximum:"1000" doc:"The terminal's width, with tty (default 80)."`
	Tag       string            `json:"tag,omitempty" maxLength:"128" doc:"A name to find the process by instead of its id; unique among running processes."`
	TimeoutMS int64             `json:"timeout_ms,omitempty" minimum:"0" doc:"Wall-clock limit in milliseconds, when shorter than the policy's."`
}
