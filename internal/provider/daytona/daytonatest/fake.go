// Package daytonatest is an in-repo fake of Daytona: its control plane
// (create, get, list, delete sandboxes; a port's preview URL) and the
// toolbox of each sandbox behind the toolbox proxy (file upload, sessions
// and their asynchronous commands), every request and answer validated
// against the vendored documents in internal/provider/daytona/testdata.
// The data plane is real: a sandbox is a vendortest.Box.
package daytonatest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/provider/vendortest"
)

// Home is the sandbox user's home.
const Home = "/home/daytona"

// Fault is an injected failure of one operation (its Code is unused:
// Daytona's error is a status and a message).
type Fault = vendortest.Fault

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
	*vendortest.Fake[*sandbox]
	// APIKey is the key the API and the toolbox proxy accept.
	APIKey string

	toolbox *vendortest.Spec
}

type sandbox struct {
	*vendortest.Box
	id, snapshot, target string
	labels               map[string]string
	cpu, memory          int
	public               bool
	created              time.Time
	handler              http.Handler // the toolbox, validated

	mu       sync.Mutex
	sessions map[string]bool
}

// New starts a fake Daytona, closed with every sandbox at the test's end.
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{
		Fake:    vendortest.NewFake[*sandbox](t, "daytona", writeError, "Sandbox with ID or name %s not found"),
		APIKey:  "dtn_" + vendortest.RandHex(24),
		toolbox: vendortest.LoadSpec(t, vendortest.Testdata("toolbox.yaml"), ""),
	}
	ctrl := http.NewServeMux()
	ctrl.HandleFunc("POST /sandbox", f.create)
	ctrl.HandleFunc("GET /sandbox", f.list)
	ctrl.HandleFunc("GET /sandbox/{id}", f.get)
	ctrl.HandleFunc("DELETE /sandbox/{id}", f.delete)
	ctrl.HandleFunc("GET /sandbox/{id}/ports/{port}/preview-url", f.preview)
	validated := vendortest.LoadSpec(t, vendortest.Testdata("api.yaml"), "").Handler(t, ctrl)
	f.Serve(f.Authed(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/toolbox/"); ok {
			f.toolboxProxy(w, r, rest)
			return
		}
		validated.ServeHTTP(w, r)
	}), http.StatusUnauthorized, "", func(r *http.Request) string {
		if r.Header.Get("Authorization") != "Bearer "+f.APIKey {
			return "Invalid API key"
		}
		return ""
	}))
	return f
}

// Created returns what the last create asked for of sandbox id: its
// cpu, memory (GiB) and public flag.
func (f *Fake) Created(id string) (cpu, memory int, public bool) {
	if sb, ok := f.Get(id); ok {
		return sb.cpu, sb.memory, sb.public
	}
	return 0, 0, false
}

// writeError answers Daytona's (NestJS's) error body. The document lists
// no error answer of any operation, so each is checked as a fault: its
// status is not the document's.
func writeError(w http.ResponseWriter, r *http.Request, status int, _, msg string) {
	vendortest.MarkFault(r)
	vendortest.WriteJSON(w, status, map[string]any{"statusCode": status, "message": msg, "error": http.StatusText(status)})
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
	var in createSandbox
	if !f.Decode(w, r, OpCreate, &in) {
		return
	}
	if in.CPU > 4 || in.Memory > 8 {
		writeError(w, r, http.StatusForbidden, "", fmt.Sprintf("CPU request %d exceeds maximum allowed per sandbox (4)", in.CPU))
		return
	}
	box, err := vendortest.NewBox(Home)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "", err.Error())
		return
	}
	if in.Target == "" {
		in.Target = "us"
	}
	if in.Snapshot == "" {
		in.Snapshot = "daytonaio/sandbox:0.5.0"
	}
	sb := &sandbox{Box: box, id: vendortest.RandHex(16), snapshot: in.Snapshot, target: in.Target, labels: in.Labels, cpu: in.CPU, memory: in.Memory,
		public: in.Public, created: time.Now().UTC(), sessions: map[string]bool{}}
	if sb.labels == nil {
		sb.labels = map[string]string{}
	}
	sb.handler = f.toolbox.Handler(f.T, f.toolboxHandler(sb))
	f.Add(sb.id, sb)
	f.SentEnv(in.Env)
	vendortest.WriteJSON(w, http.StatusOK, f.detail(sb, true))
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
		"state": "started", "toolboxProxyUrl": f.URL() + "/toolbox", "createdAt": sb.created.Format(time.RFC3339),
	}
	if full {
		d["env"] = map[string]string{}
		d["networkBlockAll"] = false
	}
	return d
}

func (f *Fake) get(w http.ResponseWriter, r *http.Request) {
	if sb, ok := f.Sandbox(w, r, OpGet, r.PathValue("id")); ok {
		vendortest.WriteJSON(w, http.StatusOK, f.detail(sb, true))
	}
}

func (f *Fake) list(w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpList) {
		return
	}
	q := r.URL.Query()
	want := map[string]string{}
	if s := q.Get("labels"); s != "" {
		if err := json.Unmarshal([]byte(s), &want); err != nil {
			writeError(w, r, http.StatusBadRequest, "", "labels: "+err.Error())
			return
		}
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		l, err := strconv.ParseFloat(s, 64)
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "", "limit: "+err.Error())
			return
		}
		limit = int(l)
	}
	page, next := f.Page(q.Get("cursor"), limit, func(sb *sandbox) bool { return vendortest.Labelled(sb.labels, want) })
	items := make([]map[string]any, 0, len(page))
	for _, sb := range page {
		items = append(items, f.detail(sb, false))
	}
	var cursor any
	if next != "" {
		cursor = next
	}
	vendortest.WriteJSON(w, http.StatusOK, map[string]any{"items": items, "nextCursor": cursor})
}

func (f *Fake) delete(w http.ResponseWriter, r *http.Request) {
	if f.Fault(w, r, OpDelete) {
		return
	}
	if sb, ok := f.Remove(w, r, r.PathValue("id")); ok {
		vendortest.WriteJSON(w, http.StatusOK, f.detail(sb, true))
	}
}

func (f *Fake) preview(w http.ResponseWriter, r *http.Request) {
	sb, ok := f.Sandbox(w, r, OpPreview, r.PathValue("id"))
	if !ok {
		return
	}
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		writeError(w, r, http.StatusBadRequest, "", "invalid port")
		return
	}
	hp, err := sb.Port(port)
	if err != nil {
		writeError(w, r, http.StatusInternalServerError, "", err.Error())
		return
	}
	vendortest.WriteJSON(w, http.StatusOK, map[string]string{"sandboxId": sb.id, "url": "http://127.0.0.1:" + strconv.Itoa(hp), "token": vendortest.RandHex(8)})
}

// toolboxProxy routes {toolboxProxyUrl}/{sandboxId}/{endpoint} to the
// sandbox's toolbox, as Daytona's proxy does.
func (f *Fake) toolboxProxy(w http.ResponseWriter, r *http.Request, rest string) {
	id, endpoint, _ := strings.Cut(rest, "/")
	sb, ok := f.Get(id)
	if !ok {
		writeError(w, r, http.StatusNotFound, "", fmt.Sprintf("Sandbox with ID %s not found", id))
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
		if f.Fault(w, r, OpUpload) {
			return
		}
		file, _, err := r.FormFile("file")
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "", err.Error())
			return
		}
		data, err := io.ReadAll(file)
		file.Close()
		if err == nil {
			_, err = sb.WriteFile(r.URL.Query().Get("path"), data)
		}
		if err != nil {
			writeError(w, r, http.StatusBadRequest, "", err.Error())
			return
		}
		f.Sent(data)
		// The document's answer is a gin.H whose values are objects.
		vendortest.WriteJSON(w, http.StatusOK, map[string]any{})
	})
	mux.HandleFunc("POST /process/session", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.SessionID == "" {
			writeError(w, r, http.StatusBadRequest, "", "invalid session request")
			return
		}
		sb.mu.Lock()
		dup := sb.sessions[in.SessionID]
		sb.sessions[in.SessionID] = true
		sb.mu.Unlock()
		if dup {
			writeError(w, r, http.StatusConflict, "", "session already exists")
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("POST /process/session/{sessionId}/exec", func(w http.ResponseWriter, r *http.Request) {
		if f.Fault(w, r, OpExec) {
			return
		}
		sb.mu.Lock()
		known := sb.sessions[r.PathValue("sessionId")]
		sb.mu.Unlock()
		if !known {
			writeError(w, r, http.StatusNotFound, "", "session not found")
			return
		}
		var in struct {
			Command  string `json:"command"`
			RunAsync bool   `json:"runAsync"`
			Async    bool   `json:"async"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			writeError(w, r, http.StatusBadRequest, "", err.Error())
			return
		}
		if !in.RunAsync && !in.Async {
			f.T.Errorf("fake daytona: a synchronous exec (the fake runs commands detached only): %q", in.Command)
		}
		f.Sent([]byte(in.Command + "\n"))
		if _, err := sb.Start([]string{"/bin/sh", "-c", in.Command}, nil, ""); err != nil {
			writeError(w, r, http.StatusBadRequest, "", err.Error())
			return
		}
		vendortest.WriteJSON(w, http.StatusAccepted, map[string]string{"cmdId": vendortest.RandHex(8)})
	})
	return mux
}
