package docker

import (
	"archive/tar"
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/internal/provider"
)

// The error of a build whose stream has a huge error message is bounded.
func TestBuildOutcomeBoundsMessage(t *testing.T) {
	err := buildOutcome("x:1", strings.NewReader(`{"error":"`+strings.Repeat("e", 1<<20)+`"}`))
	if !errors.Is(err, provider.ErrUnavailable) || len(err.Error()) > maxBuildError+256 {
		t.Fatalf("buildOutcome = error of %d bytes; want ErrUnavailable of at most %d", len(err.Error()), maxBuildError+256)
	}
}

// fakeDaemon serves h on a unix socket as a Docker daemon of API version
// apiVersion would (GET /_ping answered here); it returns the provider on
// it and the number of pings.
func fakeDaemon(t *testing.T, apiVersion string, h http.HandlerFunc) (*Provider, *atomic.Int32) {
	t.Helper()
	dir, err := os.MkdirTemp("", "abe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var pings atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_ping" {
			pings.Add(1)
			w.Header().Set("Api-Version", apiVersion)
			_, _ = w.Write([]byte("OK"))
			return
		}
		h(w, r)
	}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	p, err := New(Config{Host: "unix://" + sock, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, &pings
}

// TestEngineErrors: the daemon's error answers map onto the contract's
// sentinels with the daemon's message.
func TestEngineErrors(t *testing.T) {
	for _, tc := range []struct {
		status int
		body   string
		want   error
		msg    string
	}{
		{404, `{"message":"No such container: abc"}`, provider.ErrGone, "No such container: abc"},
		{401, `{"message":"login first"}`, provider.ErrCredentials, "login first"},
		{403, `{"message":"denied by policy"}`, provider.ErrCredentials, "denied by policy"},
		{429, `{"message":"too many"}`, provider.ErrQuota, "too many"},
		{400, `{"message":"bad parameter"}`, errOption, "bad parameter"},
		{409, `{"message":"in use"}`, provider.ErrUnavailable, "in use"},
		{500, `{"message":"disk on fire"}`, provider.ErrUnavailable, "disk on fire"},
		{500, `plain text`, provider.ErrUnavailable, "plain text"},
		{503, ``, provider.ErrUnavailable, "(no message)"},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			p, _ := fakeDaemon(t, "1.41", func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			})
			_, err := p.List(t.Context(), "o")
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("List = %v; want %v with %q", err, tc.want, tc.msg)
			}
		})
	}
}

// TestEngineNegotiates: requests carry the daemon's API version capped at
// apiMax, negotiated once; a daemon older than apiMin is refused.
func TestEngineNegotiates(t *testing.T) {
	for _, tc := range []struct{ server, want string }{
		{"1.41", "/v1.41/containers/json"},
		{"1.45", "/v1.45/containers/json"},
		{"1.99", "/v" + apiMax + "/containers/json"},
		{"2.0", "/v" + apiMax + "/containers/json"},
	} {
		t.Run(tc.server, func(t *testing.T) {
			var got atomic.Value
			p, pings := fakeDaemon(t, tc.server, func(w http.ResponseWriter, r *http.Request) {
				got.Store(r.URL.Path)
				if f := r.URL.Query().Get("filters"); f != `{"label":["agentbox.owner=o"]}` || r.URL.Query().Get("all") != "1" {
					t.Errorf("query %v", r.URL.Query())
				}
				_, _ = w.Write([]byte(`[{"Id":"b"},{"Id":"a"}]`))
			})
			for range 2 {
				ids, err := p.List(t.Context(), "o")
				if err != nil || strings.Join(ids, ",") != "a,b" {
					t.Fatalf("List = %v, %v", ids, err)
				}
			}
			if got.Load() != tc.want || pings.Load() != 1 {
				t.Fatalf("path %v after %d pings; want %s after 1", got.Load(), pings.Load(), tc.want)
			}
		})
	}
	p, _ := fakeDaemon(t, "1.30", func(w http.ResponseWriter, r *http.Request) { t.Errorf("request %s on a daemon too old", r.URL) })
	if _, err := p.List(t.Context(), "o"); !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), "1.30") {
		t.Fatalf("List on API 1.30 = %v; want ErrUnavailable naming the version", err)
	}
}

// TestBuildStreamError: an error in the build's progress stream fails the
// build with the daemon's message, though the answer's status is 200.
func TestBuildStreamError(t *testing.T) {
	p, _ := fakeDaemon(t, "1.41", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1.41/build" || r.Header.Get("Content-Type") != "application/x-tar" {
			t.Errorf("%s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		q := r.URL.Query()
		if q.Get("t") != "x:1" || q.Get("version") != "1" || q.Get("networkmode") != "none" {
			t.Errorf("query %v", q)
		}
		tr := tar.NewReader(r.Body)
		if h, err := tr.Next(); err != nil || h.Name != "f" {
			t.Errorf("context: %v %v", h, err)
		}
		_, _ = w.Write([]byte(`{"stream":"Step 1/2 : FROM scratch\n"}` + "\n" + `{"errorDetail":{"message":"COPY failed: no source"},"error":"COPY failed: no source"}` + "\n"))
	})
	err := p.build(t.Context(), "x:1", func(tw *tar.Writer) error { return addFile(tw, "f", []byte("x"), 0o644) })
	if !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), "COPY failed: no source") || !strings.Contains(err.Error(), "Step 1/2") {
		t.Fatalf("build = %v; want ErrUnavailable with the stream's error", err)
	}
}

// TestBuildNoImage: a build whose stream ends without an error but whose
// image is not there fails.
func TestBuildNoImage(t *testing.T) {
	p, _ := fakeDaemon(t, "1.41", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1.41/build" {
			_, _ = w.Write([]byte(`{"stream":"Successfully built"}`))
			return
		}
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"message":"No such image: x:1"}`))
	})
	err := p.build(t.Context(), "x:1", func(tw *tar.Writer) error { return addFile(tw, "f", []byte("x"), 0o644) })
	if !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), "No such image") {
		t.Fatalf("build = %v; want ErrUnavailable for the missing image", err)
	}
}

// TestPathArg: only references and ids reach a request's path.
func TestPathArg(t *testing.T) {
	for _, s := range []string{"abc", "agentbox-sandbox:0123", "registry.example:5000/a/b:c", "a@sha256:00ff"} {
		if err := pathArg(s); err != nil {
			t.Errorf("pathArg(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "../../info", "a/../b", "a//b", "a?x=1", "a#b", "a b", "a%2e", "./a", strings.Repeat("a", 513)} {
		if err := pathArg(s); !errors.Is(err, errInvalid) {
			t.Errorf("pathArg(%q) = %v; want errInvalid", s, err)
		}
	}
}

// frame is one frame of a multiplexed stream.
func frame(stream byte, payload string) []byte {
	b := []byte{stream, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[4:], uint32(len(payload)))
	return append(b, payload...)
}

func TestDemux(t *testing.T) {
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	big := make([]byte, 8)
	big[0] = 1
	binary.BigEndian.PutUint32(big[4:], maxFrame+1)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
		err  bool
	}{
		{"empty", nil, "", false},
		{"stdout and stderr", cat(frame(1, "out\n"), frame(2, "err\n"), frame(1, "")), "out\nerr\n", false},
		{"large frame", frame(1, strings.Repeat("x", 100<<10)), strings.Repeat("x", 100<<10), false},
		{"truncated header", cat(frame(1, "a"), []byte{1, 0, 0}), "a", true},
		{"truncated payload", frame(1, "abc")[:10], "ab", true},
		{"unknown stream", cat(frame(1, "a"), frame(3, "b")), "a", true},
		{"nonzero padding", []byte{1, 0, 1, 0, 0, 0, 0, 1, 'x'}, "", true},
		{"oversized frame", big, "", true},
		{"raw text", []byte("hello world, not a frame\n"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := demux(&out, bytes.NewReader(tc.in))
			if (err != nil) != tc.err || (err != nil && !errors.Is(err, errStream)) || out.String() != tc.want {
				t.Fatalf("demux = %q, %v; want %q, error %v", out.String(), err, tc.want, tc.err)
			}
		})
	}
}

func FuzzDemux(f *testing.F) {
	f.Add(append(frame(1, "out"), frame(2, "err")...))
	f.Add([]byte{2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte("plain"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		err := demux(&out, bytes.NewReader(in))
		if err != nil && !errors.Is(err, errStream) {
			t.Fatalf("demux error %v is not errStream", err)
		}
		// What comes out is payload: never more than went in, less the
		// headers.
		if out.Len() > len(in) {
			t.Fatalf("demux wrote %d bytes of %d", out.Len(), len(in))
		}
		if err == nil && (len(in)-out.Len())%8 != 0 {
			t.Fatalf("demux accepted %d bytes giving %d: headers are 8 bytes", len(in), out.Len())
		}
	})
}

func TestBuildOutcome(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // "" means success
	}{
		{"success", `{"stream":"Step 1/2"}` + "\n" + `{"stream":"Successfully built abc"}` + "\n", ""},
		{"empty", ``, ""},
		{"aux and progress", `{"aux":{"ID":"sha256:00"}}{"status":"Downloading","progressDetail":{"current":1}}`, ""},
		{"error", `{"stream":"Step 1/2"}{"error":"boom"}`, "boom"},
		{"error detail wins", `{"errorDetail":{"message":"detailed"},"error":"short"}`, "detailed"},
		{"error after output", `{"stream":"a"}{"stream":"b"}{"error":"late"}{"stream":"c"}`, "late (after: a | b)"},
		{"malformed", `{"stream":`, "reading the daemon's output"},
		{"not json", `<html>`, "reading the daemon's output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := buildOutcome("x:1", strings.NewReader(tc.in))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("buildOutcome = %v; want success", err)
				}
				return
			}
			if !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("buildOutcome = %v; want ErrUnavailable with %q", err, tc.want)
			}
		})
	}
}

func FuzzBuildOutcome(f *testing.F) {
	f.Add(`{"stream":"Step 1/2"}{"error":"boom"}`)
	f.Add(`{"errorDetail":{"message":"x"}}`)
	f.Add(`{"stream":"ok"}`)
	f.Fuzz(func(t *testing.T, in string) {
		err := buildOutcome("x:1", strings.NewReader(in))
		if err != nil && !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("buildOutcome error %v is not ErrUnavailable", err)
		}
		// What the daemon (or a hostile build) writes is bounded in the
		// error: its message and five lines of output.
		if err != nil && len(err.Error()) > maxBuildError+5*(512+8)+256 {
			t.Fatalf("error of %d bytes", len(err.Error()))
		}
	})
}
