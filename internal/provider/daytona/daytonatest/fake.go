// Package daytonatest is an in-repo fake of Daytona: its control plane
// (create, get, list, delete sandboxes; a port's preview URL) and the
// toolbox of each sandbox behind the toolbox proxy (file upload, sessions
// and their asynchronous commands), every request and answer validated
// against the vendored documents in internal/provider/daytona/testdata.
// The data plane is real: a sandbox is a vendortest.Box.
package daytonatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// Home is the sandbox user's home.
const Home = "/home/daytona"

// Fault is an injected failure of one operation.
type Fault struct {
	Status  int
	Message string
	Hang    bool
}

// The operations a Fault can be injected into.
const (
	OpCreate  = "create"
	OpGet     = "get"
	OpList    = "list"
	OpDelete  = "delete"
	OpPreview = "preview"
	OpUpload  = "upload"
	OpExec    = "exec"
)

// Fake is a fake Daytona. Make one with New.
type Fake struct {
	// APIKey is the key the API and the toolbox proxy accept.
	APIKey string

	t       testing.TB
	srv     *httptest.Server
	ctrl    *vendortest.Spec
	toolbox *vendortest.Spec

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	faults    map[string]Fault
	seen      bytes.Buffer
	hang      chan struct{}
}

type sandbox struct {
	id, snapshot, target string
	labels               map[string]string
	cpu, memory          int
	public               bool
	created              time.Time
	sessions             map[string]bool
	box                  *vendortest.Box
	handler              http.Handler // the toolbox, validated
}

// New starts a fake Daytona, closed with every sandbox at the test's end.
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{
		APIKey:    "dtn_" + randHex(24),
		t:         t,
		ctrl:      vendortest.LoadSpec(t, testdata("api.yaml"), ""),
		toolbox:   vendortest.LoadSpec(t, testdata("toolbox.yaml"), ""),
		sandboxes: map[string]*sandbox{},
		faults:    map[string]Fault{},
		hang:      make(chan struct{}),
	}
	ctrl := http.NewServeMux()
	ctrl.HandleFunc("POST /sandbox", f.create)
	ctrl.HandleFunc("GET /sandbox", f.list)
	ctrl.HandleFunc("GET /sandbox/{id}", f.get)
	ctrl.HandleFunc("DELETE /sandbox/{id}", f.delete)
	ctrl.HandleFunc("GET /sandbox/{id}/ports/{port}/preview-url", f.preview)
	validated := f.ctrl.Handler(t, ctrl)
	f.srv = httptest.NewServer(f.authed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/toolbox/"); ok {
			f.toolboxProxy(w, r, rest)
			return
		}
		validated.ServeHTTP(w, r)
	})))
	t.Cleanup(f.close)
	return f
}

func testdata(name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", name)
}

// URL is the API's base URL (the real one is https://app.daytona.io/api).
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

// Running returns the ids of the sandboxes alive, sorted.
func (f *Fake) Running() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := make([]string, 0, len(f.sandboxes))
	for id := range f.sandboxes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
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

// SentIntoSandboxes is every byte sent into a sandbox (files, commands).
func (f *Fake) SentIntoSandboxes() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.seen.Bytes())
}

// KillInner kills every process of sandbox id (the inner daemon), as a
// crash inside it would; the sandbox stays (providertest.Harness.KillInner).
func (f *Fake) KillInner(_ context.Context, id string) error {
	f.mu.Lock()
	sb := f.sandboxes[id]
	f.mu.Unlock()
	if sb == nil {
		return fmt.Errorf("fake daytona: no sandbox %s", id)
	}
	sb.box.KillProcesses()
	return nil
}

// Logs is what the processes of sandbox id wrote.
func (f *Fake) Logs(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		return sb.box.Logs()
	}
	return ""
}

// Created returns what the last create asked for of sandbox id: its
// cpu, memory (GiB) and public flag.
func (f *Fake) Created(id string) (cpu, memory int, public bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		return sb.cpu, sb.memory, sb.public
	}
	return 0, 0, false
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

// writeError answers Daytona's (NestJS's) error body. The document lists
// no error answer of any operation, so each is checked as a fault: its
// status is not the document's.
func writeError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	vendortest.MarkFault(r)
	writeJSON(w, status, map[string]any{"statusCode": status, "message": msg, "error": http.StatusText(status)})
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
		writeError(w, r, http.StatusGatewayTimeout, "timed out")
		return true
	}
	writeError(w, r, ft.Status, ft.Message)
	return true
}

func (f *Fake) authed(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.APIKey {
			writeError(w, r, http.StatusUnauthorized, "Invalid API key")
			return
		}
		h.ServeHTTP(w, r)
	})
}

type createSandbox struct {
	Snapshot         string            `json:"snapshot"`
	Target           string            `json:"target"`
	Labels           map[string]string `json:"labels"`
	Env              map[string]string `json:"env"`
	Public           bool              `json:"public"`
	CPU              int               `json:"cpu"`
	Memory           int               `json:"memory"`
	AutoStopInterval *int              `json:"autoStopInterval"`
}

func (f *Fake) create(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpCreate) {
		return
	}
	var in createSandbox
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if in.CPU > 4 || in.Memory > 8 {
		writeError(w, r, http.StatusForbidden, fmt.Sprintf("CPU request %d exceeds maximum allowed per sandbox (4)", in.CPU))
		return
	}
	box, err := vendortest.NewBox(Home)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	if in.Target == "" {
		in.Target = "us"
	}
	if in.Snapshot == "" {
		in.Snapshot = "daytonaio/sandbox:0.5.0"
	}
	sb := &sandbox{id: randHex(16), snapshot: in.Snapshot, target: in.Target, labels: in.Labels, cpu: in.CPU, memory: in.Memory,
		public: in.Public, created: time.Now().UTC(), sessions: map[string]bool{}, box: box}
	if sb.labels == nil {
		sb.labels = map[string]string{}
	}
	sb.handler = f.toolbox.Handler(f.t, f.toolboxHandler(sb))
	f.mu.Lock()
	f.sandboxes[sb.id] = sb
	for k, v := range in.Env {
		fmt.Fprintf(&f.seen, "%s=%s\n", k, v)
	}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, f.detail(sb, true))
}

// detail is the document's Sandbox (full) or SandboxListItem.
func (f *Fake) detail(sb *sandbox, full bool) map[string]any {
	cpu, mem := sb.cpu, sb.memory
	if cpu == 0 {
		cpu = 1
	}
	if mem == 0 {
		mem = 1
	}
	d := map[string]any{
		"id": sb.id, "organizationId": "org", "name": sb.id, "snapshot": sb.snapshot, "user": "daytona",
		"labels": sb.labels, "public": sb.public, "target": sb.target, "cpu": cpu, "gpu": 0, "memory": mem, "disk": 3,
		"state": "started", "toolboxProxyUrl": f.srv.URL + "/toolbox", "createdAt": sb.created.Format(time.RFC3339),
	}
	if full {
		d["env"] = map[string]string{}
		d["networkBlockAll"] = false
	}
	return d
}

func (f *Fake) lookup(w http.ResponseWriter, r *http.Request, id string) *sandbox {
	f.mu.Lock()
	sb := f.sandboxes[id]
	f.mu.Unlock()
	if sb == nil {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID or name %s not found", id))
	}
	return sb
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpGet) {
		return
	}
	if sb := f.lookup(w, r, r.PathValue("id")); sb != nil {
		writeJSON(w, http.StatusOK, f.detail(sb, true))
	}
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpList) {
		return
	}
	q := r.URL.Query()
	want := map[string]string{}
	if s := q.Get("labels"); s != "" {
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			writeError(w, r, http.StatusBadRequest, "labels: "+err.Error())
			return
		}
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		l, err := strconv.ParseFloat(s, 64)
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "limit: "+err.Error())
			return
		}
		limit = int(l)
	}
	after := q.Get("cursor")
	f.mu.Lock()
	var match []*sandbox
	for _, sb := range f.sandboxes {
		ok := sb.id > after
		for k, v := range want {
			ok = ok && sb.labels[k] == v
		}
		if ok {
			match = append(match, sb)
		}
	}
	f.mu.Unlock()
	sort.Slice(match, func(i, j int) bool { return match[i].id < match[j].id })
	var next any
	if len(match) > limit {
		match = match[:limit]
		next = match[limit-1].id
	}
	items := make([]map[string]any, 0, len(match))
	for _, sb := range match {
		items = append(items, f.detail(sb, false))
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
}

func (f *Fake) delete(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpDelete) {
		return
	}
	sb := f.lookup(w, r, r.PathValue("id"))
	if sb == nil {
		return
	}
	f.mu.Lock()
	delete(f.sandboxes, sb.id)
	f.mu.Unlock()
	sb.box.Kill()
	writeJSON(w, http.StatusOK, f.detail(sb, true))
}

func (f *Fake) preview(w http.ResponseWriter, r *http.Request) {
	if f.fault(w, r, OpPreview) {
		return
	}
	sb := f.lookup(w, r, r.PathValue("id"))
	if sb == nil {
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, http.StatusBadRequest, "invalid port")
		return
	}
	hp, err := sb.box.Port(port)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"sandboxId": sb.id, "url": "http://127.0.0.1:" + strconv.Itoa(hp), "token": randHex(8)})
}

// toolboxProxy routes {toolboxProxyUrl}/{sandboxId}/{endpoint} to the
// sandbox's toolbox, as Daytona's proxy does.
func (f *Fake) toolboxProxy(w http.ResponseWriter, r *http.Request, rest string) {
	id, endpoint, _ := strings.Cut(rest, "/")
	f.mu.Lock()
	sb := f.sandboxes[id]
	f.mu.Unlock()
	if sb == nil {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("Sandbox with ID %s not found", id))
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + endpoint
	r2.URL.RawPath = ""
	sb.handler.ServeHTTP(w, r2)
}

func (f *Fake) toolboxHandler(sb *sandbox) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /files/upload", func(w http.ResponseWriter, r *http.Request) {
		if f.fault(w, r, OpUpload) {
			return
		}
		file, _, err := r.FormFile("file")
		if err != nil {
			writeError(w, r, http.StatusBadRequest, err.Error())
			return
		}
		data, err := io.ReadAll(file)
		file.Close()
		if err == nil {
			_, err = sb.box.WriteFile(r.URL.Query().Get("path"), data)
		}
		if err != nil {
			writeError(w, r, http.StatusBadRequest, err.Error())
			return
		}
		f.mu.Lock()
		f.seen.Write(data)
		f.mu.Unlock()
		// The document's answer is a gin.H whose values are objects.
		writeJSON(w, http.StatusOK, map[string]any{})
	})
	mux.HandleFunc("POST /process/session", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SessionID == "" {
			writeError(w, r, http.StatusBadRequest, "invalid session request")
			return
		}
		f.mu.Lock()
		dup := sb.sessions[in.SessionID]
		sb.sessions[in.SessionID] = true
		f.mu.Unlock()
		if dup {
			writeError(w, r, http.StatusConflict, "session already exists")
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("POST /process/session/{sessionId}/exec", func(w http.ResponseWriter, r *http.Request) {
		if f.fault(w, r, OpExec) {
			return
		}
		f.mu.Lock()
		known := sb.sessions[r.PathValue("sessionId")]
		f.mu.Unlock()
		if !known {
			writeError(w, r, http.StatusNotFound, "session not found")
			return
		}
		var in struct {
			Command  string `json:"command"`
			RunAsync bool   `json:"runAsync"`
			Async    bool   `json:"async"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			writeError(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if !in.RunAsync && !in.Async {
			f.t.Errorf("fake daytona: a synchronous exec (the fake runs commands detached only): %q", in.Command)
		}
		f.mu.Lock()
		f.seen.WriteString(in.Command + "\n")
		f.mu.Unlock()
		if _, err := sb.box.Start([]string{"/bin/sh", "-c", in.Command}, nil, ""); err != nil {
			writeError(w, r, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]string{"cmdId": randHex(8)})
	})
	return mux
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
