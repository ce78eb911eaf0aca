package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/execution"
)

// Bounds of a files request made of a provider process's inner daemon.
const (
	// maxFilesAnswer bounds an answer's body: the largest the files API
	// sends (a 64 MiB archive of files, with its headers).
	maxFilesAnswer = 80 << 20
	// maxFilesRequest bounds a request's body: the largest the files API
	// takes (a 64 MiB archive, with its headers).
	maxFilesRequest = 80 << 20
	// filesHeaderTimeout bounds the wait for an answer's headers.
	filesHeaderTimeout = time.Minute
)

// filesHeaders are the answer headers passed on from the inner daemon;
// any other (cookies, its own request ids) is dropped.
var filesHeaders = []string{"Content-Type", "Content-Length", "Content-Disposition", "Cache-Control", "Retry-After", "Last-Modified", "X-Accel-Buffering"}

var _ execution.RemoteFilesServer = (*remoteProc)(nil)

// ServeFiles implements execution.RemoteFilesServer: the files request r
// (rest is its path after /v1/processes/{id}/files) is made of the inner
// daemon's process while the sandbox exists, with the sandbox's token in
// place of the caller's credentials (never passed on), and its answer
// passed back bounded: maxFilesAnswer bytes, the headers of filesHeaders.
// The inner daemon judges a change by its sandbox's commit rules; the
// host's apply when the workspace is copied back.
func (rp *remoteProc) ServeFiles(w http.ResponseWriter, r *http.Request, rest string) {
	target, transport, err := rp.filesTarget()
	if err != nil {
		writeFilesProblem(w, err.Error())
		return
	}
	defer transport.CloseIdleConnections()
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, maxFilesRequest)
	}
	p := &httputil.ReverseProxy{
		Transport: transport,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = target.Scheme, target.Host
			pr.Out.URL.Path = "/v1/processes/" + url.PathEscape(rp.id) + "/files" + rest
			pr.Out.URL.RawPath = ""
			q := pr.Out.URL.Query()
			q.Del("access_token")
			pr.Out.URL.RawQuery = q.Encode()
			pr.Out.Host = target.Host
			pr.Out.Header = http.Header{}
			for _, h := range []string{"Accept", "Content-Type", "Content-Length", "Last-Event-ID"} {
				if v := pr.In.Header.Values(h); len(v) > 0 {
					pr.Out.Header[h] = v
				}
			}
			pr.Out.Header.Set("Authorization", "Bearer "+rp.token)
		},
		ModifyResponse: func(resp *http.Response) error {
			kept := http.Header{}
			for _, h := range filesHeaders {
				if v := resp.Header.Values(h); len(v) > 0 {
					kept[h] = v
				}
			}
			resp.Header = kept
			resp.Body = limitedBody{Reader: io.LimitReader(resp.Body, maxFilesAnswer), Closer: resp.Body}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			rp.r.cfg.Log.Debug("a provider process's files request failed", "provider", rp.name, "sandbox", rp.sb.ID, "err", err)
			writeFilesProblem(w, fmt.Sprintf("the agentbox daemon in sandbox %s on %s did not answer the files request", rp.sb.ID, rp.name))
		},
		FlushInterval: -1,
	}
	p.ServeHTTP(w, r)
}

// writeFilesProblem answers 502 provider-unavailable with detail.
func writeFilesProblem(w http.ResponseWriter, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadGateway)
	_ = json.NewEncoder(w).Encode(client.Problem{Type: client.ProblemProviderUnavailable, Title: "Bad Gateway", Status: http.StatusBadGateway, Detail: detail})
}

type limitedBody struct {
	io.Reader
	io.Closer
}

// filesTarget is the inner daemon's base URL and a transport reaching it
// (never through a proxy of the environment: requests carry the token).
func (rp *remoteProc) filesTarget() (*url.URL, *http.Transport, error) {
	u, err := url.Parse(rp.sb.Address)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %s on %s: address: %w", rp.sb.ID, rp.name, err)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.ResponseHeaderTimeout = filesHeaderTimeout
	switch u.Scheme {
	case "http", "https":
		return u, t, nil
	case "unix":
		sock := u.Path
		t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		return &url.URL{Scheme: "http", Host: "agentbox"}, t, nil
	}
	return nil, nil, fmt.Errorf("sandbox %s on %s: address scheme %q", rp.sb.ID, rp.name, strings.ToLower(u.Scheme))
}
