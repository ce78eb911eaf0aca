// Package verceltest is an in-repo fake of Vercel Sandbox's API: named
// sandboxes (create, get, list by tag, delete), their sessions (get, file
// writes as a gzipped tar, detached commands), every request and answer
// validated against the document in internal/provider/vercel/testdata
// (derived from the SDK; see its README). The data plane is real: a
// sandbox's session is a vendortest.Box, and a route is the loopback port
// its routed port maps to.
package verceltest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider/vendortest"
)

// Cwd is a session's working directory (the SDK mock's and Vercel's).
const Cwd = "/vercel/sandbox"

// maxUpload bounds one fs/write archive, unpacked.
const maxUpload = 256 << 20

// Fault is an injected failure of one operation.
type Fault struct {
	Status  int
	Code    string
	Message string
	Hang    bool
}

// The operations a Fault can be injected into.
const (
	OpCreate  = "create"
	OpGet     = "get"
	OpSession = "session"
	OpList    = "list"
	OpDelete  = "delete"
	OpWrite   = "write"
	OpCmd     = "cmd"
)

// Fake is a fake Vercel Sandbox API. Make one with New.
type Fake struct {
	// Token, TeamID and ProjectID are the credentials the fake accepts.
	Token, TeamID, ProjectID string
	// PendingPolls is how many session reads answer "pending" after a
	// create before "running" (a session boots).
	PendingPolls int
	// MaxPage caps a list's page (the limit asked for, when lower, wins).
	MaxPage int

	t    testing.TB
	srv  *httptest.Server
	spec *vendortest.Spec

	mu        sync.Mutex
	sandboxes map[string]*sandbox // by name
	faults    map[string]Fault
	seen      bytes.Buffer
	hang      chan struct{}
}

type sandbox struct {
	name, sessionID, region, image string
	tags                           map[string]string
	vcpus                          int
	timeout                        int64
	persistent                     bool
	ports                          []int
	subdomains                     map[int]string
	created                        int64
	polls                          int
	box                            *vendortest.Box
}

// New starts a fake Vercel, closed with every sandbox at the test's end.
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{
		Token:        "vcp_" + randHex(24),
		TeamID:       "team_" + randHex(8),
		ProjectID:    "prj_" + randHex(8),
		PendingPolls: 2,
		MaxPage:      50,
		t:            t,
		spec:         vendortest.LoadSpec(t, testdata("openapi.yaml"), "Error"),
		sandboxes:    map[string]*sandbox{},
		faults:       map[string]Fault{},
		hang:         make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v3/sandboxes", f.create)
	mux.HandleFunc("GET /v2/sandboxes", f.list)
	mux.HandleFunc("GET /v2/sandboxes/{name}", f.get)
	mux.HandleFunc("DELETE /v2/sandboxes/{name}", f.delete)
	mux.HandleFunc("GET /v2/sandboxes/sessions/{id}", f.session)
	mux.HandleFunc("POST /v2/sandboxes/sessions/{id}/fs/write", f.write)
	mux.HandleFunc("POST /v2/sandboxes/sessions/{id}/cmd", f.cmd)
	f.srv = httptest.NewServer(f.spec.Handler(t, f.authed(mux)))
	t.Cleanup(f.close)
	return f
}

func testdata(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", name)
}

// URL is the API's base URL (the real one is https://api.vercel.com).
func (f *Fake) URL() string { return f.srv.URL }

// Fail injects fault into every later call of op; a zero Fault clears it.
func (f *Fake) Fail(op string, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fault == (Fault{}) {
		delete(f.faults, op)
		return
	}
	f.faults[op] = fault
}

// Running returns the names of the sandboxes that exist, sorted.
func (f *Fake) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, 0, len(f.sandboxes))
	for n := range f.sandboxes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Processes is the number of processes running in every sandbox.
func (f *Fake) Processes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, sb := range f.sandboxes {
		n += sb.box.Live()
	}
	return n
}

// SentIntoSandboxes is every byte sent into a sandbox (file contents,
// commands and their environments, create-time environments).
func (f *Fake) SentIntoSandboxes() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.seen.Bytes())
}

// Created is what the create of sandbox name asked for: its vCPUs (0 for
// Vercel's default), timeout in milliseconds, tags and persistence.
func (f *Fake) Created(name string) (vcpus int, timeoutMs int64, tags map[string]string, persistent bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[name]; sb != nil {
		return sb.vcpus, sb.timeout, sb.tags, sb.persistent
	}
	return 0, 0, nil, false
}

// KillInner kills every process of sandbox name (the inner daemon), as a
// crash inside it would; the sandbox stays (providertest.Harness.KillInner).
func (f *Fake) KillInner(_ context.Context, name string) error {
	f.mu.Lock()
	sb := f.sandboxes[name]
	f.mu.Unlock()
	if sb == nil {
		return fmt.Errorf("fake vercel: no sandbox %s", name)
	}
	sb.box.KillProcesses()
	return nil
}

// Logs is what the processes of sandbox name wrote.
func (f *Fake) Logs(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[name]; sb != nil {
		return sb.box.Logs()
	}
	return ""
}

func (f *Fake) close() {
	close(f.hang)
	f.srv.Close()
	f.mu.Lock()
	sbs := f.sandboxes
	f.sandboxes = map[string]*sandbox{}
	f.mu.Unlock()
	for _, sb := range sbs {
		sb.box.Kill()
	}
}

// writeError answers Vercel's error body.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Fake) fault(w http.ResponseWriter, r *http.Request, op string) bool {
	f.mu.Lock()
	ft, ok := f.faults[op]
	f.mu.Unlock()
	if !ok {
		return false
	}
	vendortest.MarkFault(r)
	if ft.Hang {
		select {
		case <-r.Context().Done():
		case <-f.hang:
		}
		writeError(w, http.StatusGatewayTimeout, "timeout", "timed out")
		return true
	}
	code := ft.Code
	if code == "" {
		code = "injected"
	}
	writeError(w, ft.Status, code, ft.Message)
	return true
}

// authed checks the token and the team as Vercel does; the project is
// checked by each operation that names one.
func (f *Fake) authed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.Token {
			writeError(w, http.StatusForbidden, "forbidden", "Not authorized: the token is missing or invalid")
			return
		}
		if r.URL.Query().Get("teamId") != f.TeamID {
			writeError(w, http.StatusForbidden, "forbidden", "You don't have permission to access this team")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (f *Fake) project(w http.ResponseWriter, id string) bool {
	if id != f.ProjectID {
		writeError(w, http.StatusNotFound, "not_found", "Project not found")
		return false
	}
	return true
}

type createBody struct {
	ProjectID string `json:"projectId"`
	Name      string `json:"name"`
	Ports     []int  `json:"ports"`
	Timeout   *int64 `json:"timeout"`
	Resources *struct {
		VCPUs int `json:"vcpus"`
	} `json:"resources"`
	Persistent *bool             `json:"persistent"`
	Image      string            `json:"image"`
	Region     string            `json:"region"`
	Env        map[string]string `json:"env"`
	Tags       map[string]string `json:"tags"`
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpCreate) {
		return
	}
	var in createBody
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if !f.project(w, in.ProjectID) {
		return
	}
	if in.Resources != nil && (in.Resources.VCPUs > 8 || (in.Resources.VCPUs > 1 && in.Resources.VCPUs%2 != 0)) {
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("vcpus must be 1 or an even number up to 8, got %d", in.Resources.VCPUs))
		return
	}
	if in.Timeout != nil && *in.Timeout > 45*60*1000 {
		writeError(w, http.StatusBadRequest, "bad_request", "timeout exceeds the maximum of 45 minutes for your plan")
		return
	}
	if in.Image != "" && !strings.HasPrefix(in.Image, "vercel/sandbox/") {
		writeError(w, http.StatusBadRequest, "image_not_found", "Image "+in.Image+" not found")
		return
	}
	box, err := vendortest.NewBox(Cwd)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	sb := &sandbox{name: in.Name, sessionID: "sbx_" + randHex(12), region: in.Region, image: in.Image, tags: in.Tags,
		timeout: 300_000, ports: in.Ports, subdomains: map[int]string{}, created: time.Now().UnixMilli(), box: box}
	if sb.name == "" {
		sb.name = "sandbox-" + randHex(8)
	}
	if sb.region == "" {
		sb.region = "iad1"
	}
	if in.Timeout != nil {
		sb.timeout = *in.Timeout
	}
	if in.Resources != nil {
		sb.vcpus = in.Resources.VCPUs
	}
	if in.Persistent == nil || *in.Persistent {
		sb.persistent = true // named sandboxes persist unless told
	}
	if sb.tags == nil {
		sb.tags = map[string]string{}
	}
	for _, p := range in.Ports {
		sb.subdomains[p] = "sb-" + randHex(6)
	}
	f.mu.Lock()
	if f.sandboxes[sb.name] != nil {
		f.mu.Unlock()
		box.Kill()
		writeError(w, http.StatusConflict, "conflict", "A sandbox named "+sb.name+" already exists")
		return
	}
	f.sandboxes[sb.name] = sb
	for k, v := range in.Env {
		fmt.Fprintf(&f.seen, "%s=%s\n", k, v)
	}
	f.mu.Unlock()
	routes, err := f.routes(sb)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandbox": f.sandboxJSON(sb, "pending"), "session": f.sessionJSON(sb, "pending"), "routes": routes, "resumed": false})
}

// status is a session's status: pending for its first PendingPolls reads.
func (f *Fake) status(sb *sandbox, poll bool) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb.polls < f.PendingPolls {
		if poll {
			sb.polls++
		}
		return "pending"
	}
	return "running"
}

func (f *Fake) sessionJSON(sb *sandbox, status string) map[string]any {
	vcpus := sb.vcpus
	if vcpus == 0 {
		vcpus = 2
	}
	s := map[string]any{"id": sb.sessionID, "memory": vcpus * 2048, "vcpus": vcpus, "region": sb.region, "timeout": sb.timeout,
		"status": status, "requestedAt": sb.created, "createdAt": sb.created, "updatedAt": sb.created, "cwd": Cwd}
	if status == "running" {
		s["startedAt"] = sb.created
	}
	return s
}

func (f *Fake) sandboxJSON(sb *sandbox, status string) map[string]any {
	vcpus := sb.vcpus
	if vcpus == 0 {
		vcpus = 2
	}
	d := map[string]any{"name": sb.name, "persistent": sb.persistent, "region": sb.region, "vcpus": vcpus, "memory": vcpus * 2048,
		"timeout": sb.timeout, "createdAt": sb.created, "updatedAt": sb.created, "currentSessionId": sb.sessionID,
		"status": status, "cwd": Cwd, "tags": sb.tags}
	if sb.image != "" {
		d["image"] = sb.image
	}
	return d
}

// routes are the sandbox's routes: each routed port's URL is the box's
// loopback port for it (Vercel's is https://<subdomain>.vercel.run).
func (f *Fake) routes(sb *sandbox) ([]map[string]any, error) {
	out := []map[string]any{}
	for _, p := range sb.ports {
		hp, err := sb.box.Port(p)
		if err != nil {
			return nil, err
		}
		out = append(out, map[string]any{"url": "http://127.0.0.1:" + strconv.Itoa(hp), "subdomain": sb.subdomains[p], "port": p})
	}
	return out, nil
}

func (f *Fake) lookup(w http.ResponseWriter, name string) *sandbox {
	f.mu.Lock()
	sb := f.sandboxes[name]
	f.mu.Unlock()
	if sb == nil {
		writeError(w, http.StatusNotFound, "not_found", "Sandbox not found: "+name)
	}
	return sb
}

func (f *Fake) bySession(w http.ResponseWriter, id string) *sandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sb := range f.sandboxes {
		if sb.sessionID == id {
			return sb
		}
	}
	writeError(w, http.StatusNotFound, "not_found", "Session not found: "+id)
	return nil
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpGet) || !f.project(w, r.URL.Query().Get("projectId")) {
		return
	}
	if r.URL.Query().Get("resume") == "true" {
		f.t.Errorf("fake vercel: a get that resumes sandbox %s (the provider never resumes: a new session has no inner daemon)", r.PathValue("name"))
	}
	sb := f.lookup(w, r.PathValue("name"))
	if sb == nil {
		return
	}
	routes, err := f.routes(sb)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	st := f.status(sb, false)
	writeJSON(w, http.StatusOK, map[string]any{"sandbox": f.sandboxJSON(sb, st), "session": f.sessionJSON(sb, st), "routes": routes, "resumed": false})
}

func (f *Fake) session(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpSession) {
		return
	}
	sb := f.bySession(w, r.PathValue("id"))
	if sb == nil {
		return
	}
	routes, err := f.routes(sb)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"session": f.sessionJSON(sb, f.status(sb, true)), "routes": routes})
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpList) {
		return
	}
	q := r.URL.Query()
	if !f.project(w, q.Get("project")) {
		return
	}
	want := map[string]string{}
	for _, tag := range q["tags"] {
		k, v, _ := strings.Cut(tag, ":")
		want[k] = v
	}
	limit := 50
	if s := q.Get("limit"); s != "" {
		l, err := strconv.Atoi(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "limit: "+err.Error())
			return
		}
		limit = l
	}
	f.mu.Lock()
	limit = min(limit, f.MaxPage)
	f.mu.Unlock()
	after := q.Get("cursor")
	f.mu.Lock()
	var match []*sandbox
	for _, sb := range f.sandboxes {
		ok := sb.name > after
		for k, v := range want {
			ok = ok && sb.tags[k] == v
		}
		if ok {
			match = append(match, sb)
		}
	}
	f.mu.Unlock()
	sort.Slice(match, func(i, j int) bool { return match[i].name < match[j].name })
	var next any
	if len(match) > limit {
		match = match[:limit]
		next = match[limit-1].name
	}
	items := make([]map[string]any, 0, len(match))
	for _, sb := range match {
		items = append(items, f.sandboxJSON(sb, f.status(sb, false)))
	}
	writeJSON(w, http.StatusOK, map[string]any{"sandboxes": items, "pagination": map[string]any{"count": len(items), "next": next}})
}

func (f *Fake) delete(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpDelete) || !f.project(w, r.URL.Query().Get("projectId")) {
		return
	}
	sb := f.lookup(w, r.PathValue("name"))
	if sb == nil {
		return
	}
	f.mu.Lock()
	delete(f.sandboxes, sb.name)
	f.mu.Unlock()
	sb.box.Kill()
	writeJSON(w, http.StatusOK, map[string]any{"sandbox": f.sandboxJSON(sb, "stopped")})
}

// running answers 410 (as Vercel does for a stopped session) unless the
// session has booted; true when it has.
func (f *Fake) running(w http.ResponseWriter, sb *sandbox) bool {
	if f.status(sb, false) != "running" {
		writeError(w, http.StatusUnprocessableEntity, "session_not_running", "Session "+sb.sessionID+" is not running yet")
		return false
	}
	return true
}

func (f *Fake) write(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpWrite) {
		return
	}
	sb := f.bySession(w, r.PathValue("id"))
	if sb == nil || !f.running(w, sb) {
		return
	}
	dir := r.Header.Get("X-Cwd")
	data, err := untar(sb.box, dir, r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	f.mu.Lock()
	f.seen.Write(data)
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{})
}

// untar extracts a gzipped tar into the box under dir (absolute inside
// the sandbox), bounded, regular files only, each with its mode; it
// returns every file's bytes.
func untar(box *vendortest.Box, dir string, body io.Reader) ([]byte, error) {
	zr, err := gzip.NewReader(body)
	if err != nil {
		return nil, fmt.Errorf("not gzip: %w", err)
	}
	tr := tar.NewReader(io.LimitReader(zr, maxUpload))
	var all bytes.Buffer
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return all.Bytes(), nil
		}
		if err != nil {
			return nil, fmt.Errorf("tar: %w", err)
		}
		if h.Typeflag == tar.TypeDir {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("tar entry %q: type %c: the fake writes regular files only", h.Name, h.Typeflag)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("tar: %w", err)
		}
		host, err := box.WriteFile(path.Join(dir, h.Name), data)
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(host, os.FileMode(h.Mode).Perm()); err != nil {
			return nil, err
		}
		all.Write(data)
	}
}

func (f *Fake) cmd(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpCmd) {
		return
	}
	sb := f.bySession(w, r.PathValue("id"))
	if sb == nil || !f.running(w, sb) {
		return
	}
	var in struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Cwd     string            `json:"cwd"`
		Env     map[string]string `json:"env"`
		Sudo    bool              `json:"sudo"`
		Wait    bool              `json:"wait"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if in.Wait {
		f.t.Errorf("fake vercel: a command with wait (the fake runs commands detached only): %q", in.Command)
	}
	if in.Sudo {
		f.t.Errorf("fake vercel: a command with sudo: %q", in.Command)
	}
	cwd := in.Cwd
	if cwd == "" {
		cwd = Cwd
	}
	f.mu.Lock()
	f.seen.WriteString(strings.Join(append([]string{in.Command}, in.Args...), " ") + "\n")
	for k, v := range in.Env {
		fmt.Fprintf(&f.seen, "%s=%s\n", k, v)
	}
	f.mu.Unlock()
	if _, err := sb.box.Start(append([]string{in.Command}, in.Args...), in.Env, cwd); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"command": map[string]any{
		"id": "cmd_" + randHex(8), "name": in.Command, "args": in.Args, "cwd": cwd, "sessionId": sb.sessionID,
		"exitCode": nil, "startedAt": time.Now().UnixMilli(),
	}})
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
