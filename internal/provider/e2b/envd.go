package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/provider/vendorapi"
)

// envdClient speaks to the envd of one sandbox: its REST file endpoint
// (envd.yaml) and its Connect-RPC process service (process.proto), with
// the sandbox's envd access token (never the API key).
type envdClient struct {
	c *vendorapi.Client
}

// newEnvd is the envd at base, with token (when the sandbox is secure).
func newEnvd(api *vendorapi.Client, base, token string) envdClient {
	h := http.Header{}
	if token != "" {
		h.Set("X-Access-Token", token)
	}
	return envdClient{c: api.Endpoint("envd", base, h)}
}

// upload writes data to path (relative to the default user's home) with
// POST /files and an application/octet-stream body.
func (e envdClient) upload(ctx context.Context, path string, data []byte) error {
	return e.c.Do(ctx, vendorapi.Request{
		Method: http.MethodPost, Path: "/files", Query: map[string]string{"path": path},
		Header: http.Header{"Content-Type": {"application/octet-stream"}, "Accept": {"application/json"}},
		Body:   bytes.NewReader(data), Want: http.StatusOK,
	})
}

// The Connect protocol's envelope flags.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
	// maxFrame bounds one envelope's message.
	maxFrame = 1 << 20
)

// startRequest is process.proto's StartRequest in Connect's JSON form.
type startRequest struct {
	Process processConfig `json:"process"`
}

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// processEvent is process.proto's StartResponse.event, the fields read.
type processEvent struct {
	Event struct {
		Start *struct {
			Pid uint32 `json:"pid"`
		} `json:"start"`
		End *struct {
			ExitCode int32  `json:"exitCode"`
			Status   string `json:"status"`
			Error    string `json:"error"`
		} `json:"end"`
	} `json:"event"`
}

// endStream is Connect's end-of-stream message.
type endStream struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// startDetached calls process.Process/Start and returns at the start
// event with the pid, leaving the process running: envd does not tie a
// process to the request that started it.
func (e envdClient) startDetached(ctx context.Context, cmd string, args []string) (uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, e.c.RequestTimeout)
	defer cancel()
	msg, err := json.Marshal(startRequest{Process: processConfig{Cmd: cmd, Args: args}})
	if err != nil {
		return 0, err
	}
	var body bytes.Buffer
	writeFrame(&body, 0, msg)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.c.BaseURL+"/process.Process/Start", &body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", fmt.Sprint(e.c.RequestTimeout.Milliseconds()))
	for k, v := range e.c.Header {
		req.Header[k] = v
	}
	resp, err := e.c.HTTP.Do(req)
	if err != nil {
		return 0, vendorapi.TransportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, vendorapi.MaxAnswer))
		return 0, connectStatusError(resp.StatusCode, b)
	}
	br := bufio.NewReader(resp.Body)
	for {
		flags, payload, err := readFrame(br)
		if err != nil {
			return 0, fmt.Errorf("%w: the process stream: %w", provider.ErrUnavailable, err)
		}
		if flags&flagEndStream != 0 {
			return 0, endStreamError(payload)
		}
		var ev processEvent
		if err := json.Unmarshal(payload, &ev); err != nil {
			return 0, fmt.Errorf("%w: the process stream: %w", provider.ErrUnavailable, err)
		}
		switch {
		case ev.Event.Start != nil:
			return ev.Event.Start.Pid, nil
		case ev.Event.End != nil:
			return 0, fmt.Errorf("the process ended before it started: %s %s", vendorapi.Clean(ev.Event.End.Status), vendorapi.Clean(ev.Event.End.Error))
		}
	}
}

// writeFrame writes one Connect envelope.
func writeFrame(w *bytes.Buffer, flags byte, msg []byte) {
	var h [5]byte
	h[0] = flags
	binary.BigEndian.PutUint32(h[1:], uint32(len(msg)))
	w.Write(h[:])
	w.Write(msg)
}

// readFrame reads one Connect envelope: flags, then a big-endian length,
// then the message. A compressed message is refused (none was asked for).
func readFrame(r io.Reader) (flags byte, msg []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, errors.New("the stream ended without an end-of-stream message")
		}
		return 0, nil, err
	}
	flags = h[0]
	if flags&^(flagCompressed|flagEndStream) != 0 {
		return 0, nil, fmt.Errorf("unknown envelope flags %#x", flags)
	}
	if flags&flagCompressed != 0 {
		return 0, nil, errors.New("a compressed envelope (none was asked for)")
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("an envelope of %d bytes (at most %d)", n, maxFrame)
	}
	msg = make([]byte, n)
	if _, err := io.ReadFull(r, msg); err != nil {
		return 0, nil, err
	}
	return flags, msg, nil
}

// endStreamError maps Connect's end-of-stream message to an error; an
// end of stream before the start event is an error even without one.
func endStreamError(payload []byte) error {
	var es endStream
	if err := json.Unmarshal(payload, &es); err != nil {
		return fmt.Errorf("%w: the end of the process stream: %w", provider.ErrUnavailable, err)
	}
	if es.Error == nil {
		return fmt.Errorf("%w: the process stream ended before the start event", provider.ErrUnavailable)
	}
	return connectCodeError(es.Error.Code, es.Error.Message)
}

// connectStatusError maps a non-200 answer of a Connect call: the body is
// Connect's error JSON {code, message}, or E2B's proxy's {code, message}.
func connectStatusError(status int, body []byte) error {
	var ce struct {
		Code    json.RawMessage `json:"code"`
		Message string          `json:"message"`
	}
	if json.Unmarshal(body, &ce) == nil {
		var code string
		if json.Unmarshal(ce.Code, &code) == nil && code != "" {
			return connectCodeError(code, ce.Message)
		}
	}
	return vendorapi.StatusError("envd", status, body)
}

// connectCodeError maps a Connect error code to the contract's sentinels.
func connectCodeError(code, message string) error {
	msg := vendorapi.Clean(message)
	var kind error
	switch code {
	case "unauthenticated", "permission_denied":
		kind = provider.ErrCredentials
	case "resource_exhausted":
		kind = provider.ErrQuota
	case "unavailable", "deadline_exceeded", "internal", "unknown", "aborted":
		kind = provider.ErrUnavailable
	case "not_found":
		kind = provider.ErrGone
	default:
		return fmt.Errorf("envd answered %s: %s", vendorapi.Clean(code), msg)
	}
	return fmt.Errorf("%w: envd answered %s: %s", kind, vendorapi.Clean(code), msg)
}
