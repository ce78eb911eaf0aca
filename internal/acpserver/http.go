package acpserver

import (
	"bufio"
	"context"

	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Protocol is the HTTP Upgrade token of an ACP connection: after the 101
// response, both sides speak ACP (JSON-RPC 2.0, one message a line) over
// the connection.
const Protocol = "acp"

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// Backend returns the agentbox API a connection drives, e.g. a client
	// of the daemon itself carrying the request's credentials. It is
	// called once per connection, after the request is accepted.
	Backend func(r *http.Request) (Backend, error)
	// Config is the default for every connection; the query parameters
	// agent, model and permission_mode override its fields.
	Config Config
}

// Handler serves ACP over HTTP (mounted at e.g. /v1/acp): a GET with
// "Connection: Upgrade" and "Upgrade: acp" is switched to the ACP protocol
// (101) and the hijacked connection then carries newline-delimited
// JSON-RPC both ways, with agentbox speaking as the agent. ?agent=NAME
// selects the agent of new sessions. Authentication is the mounting
// router's job.
func Handler(opts HandlerOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "ACP over HTTP needs a GET with Upgrade: "+Protocol, http.StatusMethodNotAllowed)
			return
		}
		if !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", Protocol) {
			w.Header().Set("Upgrade", Protocol)
			w.Header().Set("Connection", "Upgrade")
			http.Error(w, "this endpoint speaks ACP after an HTTP/1.1 upgrade: send Connection: Upgrade and Upgrade: "+Protocol, http.StatusUpgradeRequired)
			return
		}
		cfg := opts.Config
		q := r.URL.Query()
		if v := q.Get("agent"); v != "" {
			cfg.Agent = v
		}
		if v := q.Get("model"); v != "" {
			cfg.Model = v
		}
		if v := q.Get("permission_mode"); v != "" {
			cfg.PermissionMode = v
		}
		if cfg.Agent == "" {
			http.Error(w, "no agent: add ?agent=NAME", http.StatusBadRequest)
			return
		}
		b, err := opts.Backend(r)
		if err != nil {
			http.Error(w, "agentbox: "+err.Error(), http.StatusInternalServerError)
			return
		}
		rc := http.NewResponseController(w)
		w.Header().Set("Upgrade", Protocol)
		w.Header().Set("Connection", "Upgrade")
		w.WriteHeader(http.StatusSwitchingProtocols)
		if err := rc.Flush(); err != nil {
			return
		}
		conn, brw, err := rc.Hijack()
		if err != nil {
			// HTTP/2 and some middlewares cannot hand the connection over.
			return
		}
		defer conn.Close()
		// The server's read and write timeouts are for requests; an ACP
		// connection idles between prompts.
		_ = conn.SetDeadline(time.Time{})
		// The connection's life is the ACP session's, not the request's
		// (whose context the server may cancel once the handler hijacked).
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Bytes the client sent after its request are in brw's buffer.
		_ = Serve(ctx, b, cfg, io.MultiReader(brw.Reader, conn), conn)
	})
}

// headerHas says whether a comma-separated header holds token (case
// insensitively).
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// Dial opens an ACP connection to an agentbox endpoint served by Handler
// (rawURL like http://127.0.0.1:7777/v1/acp?agent=NAME) with an optional
// bearer token, and returns it after the upgrade. Plain http only.
func Dial(ctx context.Context, rawURL, token string) (net.Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("acpserver: %w", err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("acpserver: cannot dial %q: only http URLs", rawURL)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return nil, fmt.Errorf("acpserver: %w", err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		conn.Close()
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", Protocol)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if err := req.Write(conn); err != nil {
		conn.Close()
		return nil, fmt.Errorf("acpserver: send the upgrade: %w", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("acpserver: read the upgrade response: %w", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		conn.Close()
		return nil, fmt.Errorf("acpserver: upgrade refused: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	_ = conn.SetDeadline(time.Time{})
	return &bufferedConn{Conn: conn, r: br}, nil
}

// bufferedConn reads first what the response reader buffered.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
