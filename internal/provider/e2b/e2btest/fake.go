// Package e2btest is an in-repo fake of E2B: its control plane
// (api.e2b.app: create, get, list, kill sandboxes) and the envd of each
// sandbox (the /files endpoint and the process.Process/Start Connect-RPC
// call), every request and answer validated against the vendored
// documents in internal/provider/e2b/testdata. The data plane is real: a
// sandbox is a vendortest.Box, a directory with real processes and
// loopback ports.
package e2btest

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider/vendortest"
)

// Home is the default user's home in an E2B sandbox.
const Home = "/home/user"

// envdPort is the port of envd in every sandbox.
const envdPort = 49983

// Fault is an injected failure of one operation (its Code is unused:
// E2B's error is a status and a message).
type Fault = vendortest.Fault

// The operations a Fault can be injected into.
const (
	OpCreate = "create"
	OpGet    = "get"
	OpList   = "list"
	OpKill   = "kill"
	OpUpload = "upload"
	OpStart  = "start"
)

// Fake is a fake E2B. Its zero value is not usable: call New.
type Fake struct {
	*vendortest.Fake[*sandbox]
	// APIKey is the key the control plane accepts.
	APIKey string
	// Domain is the sandbox domain the control plane answers.
	Domain string

	envd *vendortest.Spec
}

type sandbox struct {
	*vendortest.Box
	id, template, envdToken string
	metadata                map[string]string
	started, end            time.Time
	envd                    *httptest.Server
}

// Kill ends the sandbox and its envd.
func (sb *sandbox) Kill() {
	sb.envd.CloseClientConnections()
	sb.Box.Kill()
	sb.envd.Close()
}

// New starts a fake E2B whose documents are in dir (the e2b package's
// testdata); it is closed, and every sandbox killed, at the end of the
// test.
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{
		Fake:   vendortest.NewFake[*sandbox](t, "e2b", writeError, `sandbox "%s" doesn't exist or you don't have access to it`),
		APIKey: "e2b_" + vendortest.RandHex(20),
		Domain: "fake.e2b.test",
		envd:   vendortest.LoadSpec(t, vendortest.Testdata("envd.yaml"), "Error"),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /sandboxes", f.create)
	mux.HandleFunc("GET /v2/sandboxes", f.list)
	mux.HandleFunc("GET /sandboxes/{sandboxID}", f.get)
	mux.HandleFunc("DELETE /sandboxes/{sandboxID}", f.kill)
	// A request without the API key is refused, as E2B's API does.
	authed := f.Authed(mux, http.StatusUnauthorized, "", func(r *http.Request) string {
		if r.Header.Get("X-API-Key") != f.APIKey {
			return "Invalid API key, please visit https://e2b.dev/docs/api-key"
		}
		return ""
	})
	f.Serve(vendortest.LoadSpec(t, vendortest.Testdata("openapi.yml"), "Error").Handler(t, authed))
	return f
}

// SandboxURL is the e2b.Config.SandboxURL for this fake: the base URL of
// a sandbox's port, which the real E2B names https://<port>-<id>.<domain>
// and routes through its proxy; here it is a loopback port.
func (f *Fake) SandboxURL(port int, id, domain string) string {
	sb, ok := f.Get(id)
	if !ok || domain != f.Domain {
		return "http://127.0.0.1:1" // no sandbox answers there, as no host would resolve
	}
	if port == envdPort {
		return sb.envd.URL
	}
	hp, err := sb.Port(port)
	if err != nil {
		f.T.Errorf("fake e2b: port %d: %v", port, err)
	}
	return "http://127.0.0.1:" + strconv.Itoa(hp)
}

// apiError is the document's Error.
type apiError struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, _ *http.Request, status int, _, msg string) {
	vendortest.WriteJSON(w, status, apiError{Code: int32(status), Message: msg})
}

// newSandbox is the document's NewSandbox, as the fake reads it (the
// document validated it already).
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int32            `json:"timeout"`
	Secure     bool              `json:"secure"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	var in newSandbox
	if !f.Decode(w, r, OpCreate, &in) {
		return
	}
	if in.TemplateID != "base" {
		writeError(w, r, http.StatusBadRequest, "", fmt.Sprintf("template '%s' not found", in.TemplateID))
		return
	}
	timeout := int32(15) // the document's default
	if in.Timeout != nil {
		timeout = *in.Timeout
	}
	sb, err := f.add(in.TemplateID, in.Metadata, timeout, in.Secure)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "", err.Error())
		return
	}
	f.SentEnv(in.EnvVars)
	out := map[string]any{
		"templateID":  sb.template,
		"sandboxID":   sb.id,
		"clientID":    "fake",
		"envdVersion": "0.4.0",
		"domain":      f.Domain,
	}
	if sb.envdToken != "" {
		out["envdAccessToken"] = sb.envdToken
	}
	vendortest.WriteJSON(w, http.StatusCreated, out)
}

// add makes a sandbox: its box and its envd.
func (f *Fake) add(template string, metadata map[string]string, timeout int32, secure bool) (*sandbox, error) {
	box, err := vendortest.NewBox(Home)
	if err != nil {
		return nil, err
	}
	sb := &sandbox{
		Box:      box,
		id:       "i" + vendortest.RandHex(10),
		template: template,
		metadata: metadata,
		started:  time.Now().UTC(),
	}
	sb.end = sb.started.Add(time.Duration(timeout) * time.Second)
	if secure {
		sb.envdToken = vendortest.RandHex(16)
	}
	sb.envd = httptest.NewServer(f.envd.Handler(f.T, f.envdHandler(sb), "/process.Process/"))
	f.Add(sb.id, sb)
	return sb, nil
}

// CreateBare makes a sandbox with metadata and nothing running in it, as
// a daemon that crashed right after its create call leaves one.
func (f *Fake) CreateBare(t testing.TB, metadata map[string]string) string {
	t.Helper()
	sb, err := f.add("base", metadata, 300, true)
	if err != nil {
		t.Fatal(err)
	}
	return sb.id
}

// detail is the document's SandboxDetail and ListedSandbox (the fields
// both have).
func (sb *sandbox) detail() map[string]any {
	md := sb.metadata
	if md == nil {
		md = map[string]string{}
	}
	return map[string]any{
		"templateID":  sb.template,
		"sandboxID":   sb.id,
		"clientID":    "fake",
		"startedAt":   sb.started.Format(time.RFC3339),
		"endAt":       sb.end.Format(time.RFC3339),
		"cpuCount":    2,
		"memoryMB":    512,
		"diskSizeMB":  1024,
		"metadata":    md,
		"state":       "running",
		"envdVersion": "0.4.0",
	}
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	sb, ok := f.Sandbox(w, r, OpGet, r.PathValue("sandboxID"))
	if !ok {
		return
	}
	d := sb.detail()
	d["domain"] = f.Domain
	vendortest.WriteJSON(w, http.StatusOK, d)
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpList) {
		return
	}
	q := r.URL.Query()
	metadata, err := url.ParseQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "", "invalid metadata query: "+err.Error())
		return
	}
	want := map[string]string{}
	for k := range metadata {
		want[k] = metadata.Get(k)
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		limit, _ = strconv.Atoi(s) // the document bounds it to 1..100
	}
	page, next := f.Page(q.Get("nextToken"), limit, func(sb *sandbox) bool { return vendortest.Labelled(sb.metadata, want) })
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := make([]map[string]any, 0, len(page))
	for _, sb := range page {
		out = append(out, sb.detail())
	}
	vendortest.WriteJSON(w, http.StatusOK, out)
}

func (f *Fake) kill(w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpKill) {
		return
	}
	if _, ok := f.Remove(w, r, r.PathValue("sandboxID")); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}

// envdHandler is the envd of sb: /files and process.Process/Start.
func (f *Fake) envdHandler(sb *sandbox) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /files", func(w http.ResponseWriter, r *http.Request) { f.upload(sb, w, r) })
	mux.HandleFunc("POST /process.Process/Start", func(w http.ResponseWriter, r *http.Request) { f.start(sb, w, r) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sb.envdToken != "" && r.Header.Get("X-Access-Token") != sb.envdToken {
			if strings.HasPrefix(r.URL.Path, "/process.Process/") {
				connectError(w, http.StatusUnauthorized, "unauthenticated", "invalid access token")
				return
			}
			writeError(w, r, http.StatusUnauthorized, "", "invalid access token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (f *Fake) upload(sb *sandbox, w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpUpload) {
		return
	}
	path := r.URL.Query().Get("path")
	var data []byte
	var err error
	switch ct := r.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/octet-stream"):
		if path == "" {
			writeError(w, r, http.StatusBadRequest, "", "the path parameter is required with application/octet-stream")
			return
		}
		data, err = io.ReadAll(r.Body)
	default: // multipart/form-data (the document allows no other)
		var file io.ReadCloser
		file, _, err = r.FormFile("file")
		if err == nil {
			data, err = io.ReadAll(file)
			file.Close()
		}
	}
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "", err.Error())
		return
	}
	if _, err := sb.WriteFile(path, data); err != nil {
		writeError(w, r, http.StatusBadRequest, "", err.Error())
		return
	}
	f.Sent(data)
	abs := path
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(Home, path)
	}
	vendortest.WriteJSON(w, http.StatusOK, []map[string]string{{"path": abs, "name": filepath.Base(abs), "type": "file"}})
}

// startRequest is process.proto's StartRequest in Connect's JSON form;
// a field it does not have is refused, as envd's protojson does.
type startRequest struct {
	Process *struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args"`
		Envs map[string]string `json:"envs"`
		Cwd  *string           `json:"cwd"`
	} `json:"process"`
	Pty   json.RawMessage `json:"pty"`
	Tag   *string         `json:"tag"`
	Stdin *bool           `json:"stdin"`
}

// start is process.Process/Start, a Connect server-streaming call with
// the JSON codec: one enveloped StartRequest in, enveloped StartResponse
// events out, then the end-of-stream message. The process outlives the
// call, as envd's does.
func (f *Fake) start(sb *sandbox, w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "application/connect+json" {
		f.T.Errorf("fake envd: Start with Content-Type %q (want application/connect+json)", ct)
		connectError(w, http.StatusUnsupportedMediaType, "unknown", "unsupported content type "+ct)
		return
	}
	if v := r.Header.Get("Connect-Protocol-Version"); v != "" && v != "1" {
		f.T.Errorf("fake envd: Connect-Protocol-Version %q", v)
	}
	br := bufio.NewReader(r.Body)
	var h [5]byte
	if _, err := io.ReadFull(br, h[:]); err != nil || h[0] != 0 {
		f.T.Errorf("fake envd: Start: not one uncompressed Connect envelope (%v, flags %#x)", err, h[0])
		connectError(w, http.StatusBadRequest, "invalid_argument", "bad envelope")
		return
	}
	msg := make([]byte, binary.BigEndian.Uint32(h[1:]))
	if _, err := io.ReadFull(br, msg); err != nil {
		connectError(w, http.StatusBadRequest, "invalid_argument", "short envelope")
		return
	}
	var in startRequest
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || in.Process == nil || in.Process.Cmd == "" {
		f.T.Errorf("fake envd: Start: a request process.proto does not allow: %s (%v)", msg, err)
		connectError(w, http.StatusBadRequest, "invalid_argument", "invalid StartRequest")
		return
	}
	f.Sent([]byte(in.Process.Cmd + "\n" + strings.Join(in.Process.Args, "\n") + "\n"))
	f.SentEnv(in.Process.Envs)
	ft, faulted := f.Injected(OpStart)
	w.Header().Set("Content-Type", "application/connect+json")
	if faulted {
		endStream(w, "internal", ft.Message)
		return
	}
	cwd := ""
	if in.Process.Cwd != nil {
		cwd = *in.Process.Cwd
	}
	pid, err := sb.Start(append([]string{in.Process.Cmd}, in.Process.Args...), in.Process.Envs, cwd)
	if err != nil {
		endStream(w, "internal", "error starting process: "+err.Error())
		return
	}
	writeEvent(w, map[string]any{"start": map[string]any{"pid": pid}})
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	select {
	case <-r.Context().Done(): // the client went; the process stays
		return
	case <-sb.Done(pid):
		writeEvent(w, map[string]any{"end": map[string]any{"exited": true, "status": "exited"}})
		endStream(w, "", "")
	}
}

func writeEvent(w io.Writer, ev map[string]any) {
	b, _ := json.Marshal(map[string]any{"event": ev})
	writeFrame(w, 0, b)
}

func writeFrame(w io.Writer, flags byte, b []byte) {
	var h [5]byte
	h[0] = flags
	binary.BigEndian.PutUint32(h[1:], uint32(len(b)))
	_, _ = w.Write(h[:])
	_, _ = w.Write(b)
}

// endStream writes Connect's end-of-stream message, with an error when
// code is not empty.
func endStream(w io.Writer, code, msg string) {
	m := map[string]any{}
	if code != "" {
		m["error"] = map[string]string{"code": code, "message": msg}
	}
	b, _ := json.Marshal(m)
	writeFrame(w, 0x02, b)
}

// connectError is a Connect error answered before any stream.
func connectError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"code": code, "message": msg})
}
