package client

import (
	"context"
	"iter"
	"net/http"
)

// SessionProcesses is the processes API of one session's sandbox
// (/v1/sessions/{id}/processes…): the calls of StartProcess, GetProcess
// and the rest, on the session's processes only.
type SessionProcesses struct {
	c  *Client
	id string
}

// SessionProcesses returns the processes API of session id.
func (c *Client) SessionProcesses(id string) SessionProcesses { return SessionProcesses{c: c, id: id} }

// Start starts a process in the session's sandbox, under the session's
// policy, and returns at once.
func (s SessionProcesses) Start(ctx context.Context, req SessionStartProcess) (Process, error) {
	p, err := sessionPath(s.id, "processes")
	if err != nil {
		return Process{}, err
	}
	var out Process
	err = s.c.do(ctx, http.MethodPost, p, nil, req, &out)
	return out, err
}

// List lists the session's processes, running and recently ended.
func (s SessionProcesses) List(ctx context.Context) (ProcessList, error) {
	p, err := sessionPath(s.id, "processes")
	if err != nil {
		return ProcessList{}, err
	}
	var out ProcessList
	err = s.c.do(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// path is the path of a process of the session, with more after it.
func (s SessionProcesses) path(idOrTag string, more ...string) (string, error) {
	return sessionPath(s.id, append([]string{"processes", idOrTag}, more...)...)
}

// Get describes the session's process found by id or tag.
func (s SessionProcesses) Get(ctx context.Context, idOrTag string) (Process, error) {
	p, err := s.path(idOrTag)
	if err != nil {
		return Process{}, err
	}
	var out Process
	err = s.c.do(ctx, http.MethodGet, p, nil, nil, &out)
	return out, err
}

// SendStdin writes data to the process's standard input, closing it
// afterwards when closeStdin is set.
func (s SessionProcesses) SendStdin(ctx context.Context, idOrTag, data string, closeStdin bool) error {
	p, err := s.path(idOrTag, "stdin")
	if err != nil {
		return err
	}
	return s.c.do(ctx, http.MethodPost, p, nil, ProcessInput{Data: data, Close: closeStdin}, nil)
}

// Signal sends a signal to the process's group.
func (s SessionProcesses) Signal(ctx context.Context, idOrTag, signal string) error {
	p, err := s.path(idOrTag, "signal")
	if err != nil {
		return err
	}
	return s.c.do(ctx, http.MethodPost, p, nil, ProcessSignal{Signal: signal}, nil)
}

// Resize sets the size of the process's terminal (a process started
// with TTY); the process gets SIGWINCH.
func (s SessionProcesses) Resize(ctx context.Context, idOrTag string, rows, cols int) error {
	p, err := s.path(idOrTag, "resize")
	if err != nil {
		return err
	}
	return s.c.do(ctx, http.MethodPost, p, nil, TerminalSize{Rows: rows, Cols: cols}, nil)
}

// Wait waits until the process has exited and describes it.
func (s SessionProcesses) Wait(ctx context.Context, idOrTag string) (Process, error) {
	p, err := s.path(idOrTag, "wait")
	if err != nil {
		return Process{}, err
	}
	return s.c.waitAt(ctx, p)
}

// Delete kills the process if it runs and forgets it.
func (s SessionProcesses) Delete(ctx context.Context, idOrTag string) error {
	p, err := s.path(idOrTag)
	if err != nil {
		return err
	}
	return s.c.do(ctx, http.MethodDelete, p, nil, nil, nil)
}

// Stream follows the process's output as ProcessStream does.
func (s SessionProcesses) Stream(ctx context.Context, idOrTag string, after int64) iter.Seq2[ProcessEvent, error] {
	p, err := s.path(idOrTag, "stream")
	if err != nil {
		return func(yield func(ProcessEvent, error) bool) { yield(ProcessEvent{}, err) }
	}
	return s.c.processStreamAt(ctx, p, after)
}
