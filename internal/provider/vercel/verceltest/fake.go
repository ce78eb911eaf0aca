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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
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

// Fault is an injected failure of one operation; its Code is Vercel's
// error code ("injected" when empty).
type Fault = vendortest.Fault

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
	*vendortest.Fake[*sandbox]
	// Token, TeamID and ProjectID are the credentials the fake accepts.
	Token, TeamID, ProjectID string
	// PendingPolls is how many session reads answer "pending" after a
	// create before "running" (a session boots).
	PendingPolls int
	// MaxPage caps a list's page (the limit asked for, when lower, wins).
	MaxPage int

	mu sync.Mutex // PendingPolls, MaxPage and the sandboxes' polls
}

type sandbox struct {
	*vendortest.Box
	name, sessionID, region, image string
	tags                           map[string]string
	vcpus                          int
	timeout                        int64
	persistent                     bool
	ports                          []int
	subdomains                     map[int]string
	created                        int64
	polls                          int
}

// New starts a fake Vercel, closed with every sandbox at the test's end.
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{
		Fake:         vendortest.NewFake[*sandbox](t, "vercel", writeError, "Sandbox not found: %s"),
		Token:        "vcp_" + vendortest.RandHex(24),
		TeamID:       "team_" + vendortest.RandHex(8),
		ProjectID:    "prj_" + vendortest.RandHex(8),
		PendingPolls: 2,
		MaxPage:      50,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v3/sandboxes", f.create)
	mux.HandleFunc("GET /v2/sandboxes", f.list)
	mux.HandleFunc("GET /v2/sandboxes/{name}", f.get)
	mux.HandleFunc("DELETE /v2/sandboxes/{name}", f.delete)
	mux.HandleFunc("GET /v2/sandboxes/sessions/{id}", f.session)
	mux.HandleFunc("POST /v2/sandboxes/sessions/{id}/fs/write", f.write)
	mux.HandleFunc("POST /v2/sandboxes/sessions/{id}/cmd", f.cmd)
	// The token and the team are checked as Vercel does; the project by
	// each operation that names one.
	authed := f.Authed(mux, http.StatusForbidden, "forbidden", func(r *http.Request) string {
		switch {
		case r.Header.Get("Authorization") != "Bearer "+f.Token:
			return "Not authorized: the token is missing or invalid"
		case r.URL.Query().Get("teamId") != f.TeamID:
			return "You don't have permission to access this team"
		}
		return ""
	})
	f.Serve(vendortest.LoadSpec(t, vendortest.Testdata("openapi.yaml"), "Error").Handler(t, authed))
	return f
}

// Created is what the create of sandbox name asked for: its vCPUs (0 for
// Vercel's default), timeout in milliseconds, tags and persistence.
func (f *Fake) Created(name string) (vcpus int, timeoutMs int64, tags map[string]string, persistent bool) {
	if sb, ok := f.Get(name); ok {
		return sb.vcpus, sb.timeout, sb.tags, sb.persistent
	}
	return 0, 0, nil, false
}

// writeError answers Vercel's error body.
func writeError(w http.ResponseWriter, _ *http.Request, status int, code, msg string) {
	vendortest.WriteJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (f *Fake) project(w http.ResponseWriter, r *http.Request, id string) bool {
	if id != f.ProjectID {
		writeError(w, r, http.StatusNotFound, "not_found", "Project not found")
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
	var in createBody
	if !f.Decode(w, r, OpCreate, &in) {
		return
	}
	if !f.project(w, r, in.ProjectID) {
		return
	}
	if in.Resources != nil && (in.Resources.VCPUs > 8 || (in.Resources.VCPUs > 1 && in.Resources.VCPUs%2 != 0)) {
		writeError(w, r, http.StatusBadRequest, "bad_request", fmt.Sprintf("vcpus must be 1 or an even number up to 8, got %d", in.Resources.VCPUs))
		return
	}
	if in.Timeout != nil && *in.Timeout > 45*60*1000 {
		writeError(w, r, http.StatusBadRequest, "bad_request", "timeout exceeds the maximum of 45 minutes for your plan")
		return
	}
	if in.Image != "" && !strings.HasPrefix(in.Image, "vercel/sandbox/") {
		writeError(w, r, http.StatusBadRequest, "image_not_found", "Image "+in.Image+" not found")
		return
	}
	box, err := vendortest.NewBox(Cwd)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	sb := &sandbox{Box: box, name: in.Name, sessionID: "sbx_" + vendortest.RandHex(12), region: in.Region, image: in.Image, tags: in.Tags,
		timeout: 300_000, ports: in.Ports, subdomains: map[int]string{}, created: time.Now().UnixMilli()}
	if sb.name == "" {
		sb.name = "sandbox-" + vendortest.RandHex(8)
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
		sb.subdomains[p] = "sb-" + vendortest.RandHex(6)
	}
	if !f.Add(sb.name, sb) {
		box.Kill()
		writeError(w, r, http.StatusConflict, "conflict", "A sandbox named "+sb.name+" already exists")
		return
	}
	f.SentEnv(in.Env)
	vendortest.WriteJSON(w, http.StatusOK, map[string]any{"sandbox": f.sandboxJSON(sb, "pending"), "session": f.sessionJSON(sb, "pending"), "routes": f.routes(sb), "resumed": false})
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
func (f *Fake) routes(sb *sandbox) []map[string]any {
	out := []map[string]any{}
	for _, p := range sb.ports {
		hp, err := sb.Port(p)
		if err != nil {
			f.T.Errorf("fake vercel: port %d: %v", p, err)
			continue
		}
		out = append(out, map[string]any{"url": "http://127.0.0.1:" + strconv.Itoa(hp), "subdomain": sb.subdomains[p], "port": p})
	}
	return out
}

// bySession is the sandbox of session id; an unknown one is answered 404.
func (f *Fake) bySession(w http.ResponseWriter, r *http.Request, id string) (*sandbox, bool) {
	sb, ok := f.Find(func(sb *sandbox) bool { return sb.sessionID == id })
	if !ok {
		writeError(w, r, http.StatusNotFound, "not_found", "Session not found: "+id)
	}
	return sb, ok
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpGet) || !f.project(w, r, r.URL.Query().Get("projectId")) {
		return
	}
	if r.URL.Query().Get("resume") == "true" {
		f.T.Errorf("fake vercel: a get that resumes sandbox %s (the provider never resumes: a new session has no inner daemon)", r.PathValue("name"))
	}
	if sb, ok := f.Lookup(w, r, r.PathValue("name")); ok {
		st := f.status(sb, false)
		vendortest.WriteJSON(w, http.StatusOK, map[string]any{"sandbox": f.sandboxJSON(sb, st), "session": f.sessionJSON(sb, st), "routes": f.routes(sb), "resumed": false})
	}
}

func (f *Fake) session(w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpSession) {
		return
	}
	if sb, ok := f.bySession(w, r, r.PathValue("id")); ok {
		vendortest.WriteJSON(w, http.StatusOK, map[string]any{"session": f.sessionJSON(sb, f.status(sb, true)), "routes": f.routes(sb)})
	}
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpList) {
		return
	}
	q := r.URL.Query()
	if !f.project(w, r, q.Get("project")) {
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
			writeError(w, r, http.StatusBadRequest, "bad_request", "limit: "+err.Error())
			return
		}
		limit = l
	}
	f.mu.Lock()
	limit = min(limit, f.MaxPage)
	f.mu.Unlock()
	page, next := f.Page(q.Get("cursor"), limit, func(sb *sandbox) bool { return vendortest.Labelled(sb.tags, want) })
	items := make([]map[string]any, 0, len(page))
	for _, sb := range page {
		items = append(items, f.sandboxJSON(sb, f.status(sb, false)))
	}
	var cursor any
	if next != "" {
		cursor = next
	}
	vendortest.WriteJSON(w, http.StatusOK, map[string]any{"sandboxes": items, "pagination": map[string]any{"count": len(items), "next": cursor}})
}

func (f *Fake) delete(w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpDelete) || !f.project(w, r, r.URL.Query().Get("projectId")) {
		return
	}
	if sb, ok := f.Remove(w, r, r.PathValue("name")); ok {
		vendortest.WriteJSON(w, http.StatusOK, map[string]any{"sandbox": f.sandboxJSON(sb, "stopped")})
	}
}

// running is a session route's start: the fault injected into op, else
// the sandbox of the session, if the session has booted (422, as Vercel
// answers, when it has not); false when answered.
func (f *Fake) running(w http.ResponseWriter, r *http.Request, op string) (*sandbox, bool) {
	if f.Fault(w, r, op) {
		return nil, false
	}
	sb, ok := f.bySession(w, r, r.PathValue("id"))
	if ok && f.status(sb, false) != "running" {
		writeError(w, r, http.StatusUnprocessableEntity, "session_not_running", "Session "+sb.sessionID+" is not running yet")
		return nil, false
	}
	return sb, ok
}

func (f *Fake) write(w http.ResponseWriter, r *http.Request) {
	sb, ok := f.running(w, r, OpWrite)
	if !ok {
		return
	}
	data, err := untar(sb.Box, r.Header.Get("X-Cwd"), r.Body)
	if err != nil {
		writeError(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	f.Sent(data)
	vendortest.WriteJSON(w, http.StatusOK, map[string]any{})
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
	sb, ok := f.running(w, r, OpCmd)
	if !ok {
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
		writeError(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if in.Wait {
		f.T.Errorf("fake vercel: a command with wait (the fake runs commands detached only): %q", in.Command)
	}
	if in.Sudo {
		f.T.Errorf("fake vercel: a command with sudo: %q", in.Command)
	}
	cwd := in.Cwd
	if cwd == "" {
		cwd = Cwd
	}
	f.Sent([]byte(strings.Join(append([]string{in.Command}, in.Args...), " ") + "\n"))
	f.SentEnv(in.Env)
	if _, err := sb.Start(append([]string{in.Command}, in.Args...), in.Env, cwd); err != nil {
		writeError(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	vendortest.WriteJSON(w, http.StatusOK, map[string]any{"command": map[string]any{
		"id": "cmd_" + vendortest.RandHex(8), "name": in.Command, "args": in.Args, "cwd": cwd, "sessionId": sb.sessionID,
		"exitCode": nil, "startedAt": time.Now().UnixMilli(),
	}})
}
