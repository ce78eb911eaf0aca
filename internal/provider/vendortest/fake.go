package vendortest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"testing"
)

// Fault is an injected failure of one operation of a fake.
type Fault struct {
	Status  int    // the HTTP status answered
	Code    string // the vendor's error code, where its errors have one
	Message string // the vendor's message
	Hang    bool   // no answer until the client gives up
}

// Sandbox is one sandbox of a fake: a vendor's own fields around its Box
// (embedded, so that these are the Box's own methods).
type Sandbox interface {
	Live() int
	Logs() string
	KillProcesses()
	// Kill ends the sandbox: its processes, its directory, and whatever
	// else the vendor's fake gave it.
	Kill()
}

// ErrorWriter answers a vendor's error body: its status, its code (where
// its errors have one) and its message.
type ErrorWriter func(w http.ResponseWriter, r *http.Request, status int, code, message string)

// Fake is what every vendor's fake has alike: its API's server, its
// sandboxes by id, the faults injected into its operations, and every byte
// sent into a sandbox. A vendor's fake embeds it and adds its routes and
// answers; Fail, Running, Processes, SentIntoSandboxes, KillInner, Logs and
// URL are its tests' view.
type Fake[S Sandbox] struct {
	// T is the test the fake reports to.
	T testing.TB

	vendor     string
	writeError ErrorWriter
	notFound   string
	srv        *httptest.Server

	mu        sync.Mutex
	sandboxes map[string]S
	faults    map[string]Fault
	seen      bytes.Buffer
	hang      chan struct{}
}

// NewFake is the common part of vendor's fake for t; its error bodies are
// writeError's, and notFound (a format with the id) is the message of an
// unknown sandbox. Serve starts its server; it is closed, and every
// sandbox killed, at the end of the test.
func NewFake[S Sandbox](t testing.TB, vendor string, writeError ErrorWriter, notFound string) *Fake[S] {
	f := &Fake[S]{T: t, vendor: vendor, writeError: writeError, notFound: notFound,
		sandboxes: map[string]S{}, faults: map[string]Fault{}, hang: make(chan struct{})}
	t.Cleanup(f.close)
	return f
}

// Serve serves h as the fake's API.
func (f *Fake[S]) Serve(h http.Handler) { f.srv = httptest.NewServer(h) }

// URL is the API's base URL.
func (f *Fake[S]) URL() string { return f.srv.URL }

// Fail injects fault into every later call of op; a zero Fault clears it.
func (f *Fake[S]) Fail(op string, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fault == (Fault{}) {
		delete(f.faults, op)
		return
	}
	f.faults[op] = fault
}

// Running returns the ids of the sandboxes alive, sorted.
func (f *Fake[S]) Running() []string {
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
func (f *Fake[S]) Processes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, sb := range f.sandboxes {
		n += sb.Live()
	}
	return n
}

// SentIntoSandboxes is every byte the clients sent into a sandbox: the
// files written, the commands and environments of processes started,
// create-time environments.
func (f *Fake[S]) SentIntoSandboxes() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Clone(f.seen.Bytes())
}

// KillInner kills every process of sandbox id (the inner daemon), as a
// crash inside it would; the sandbox stays (providertest.Harness.KillInner).
func (f *Fake[S]) KillInner(_ context.Context, id string) error {
	sb, ok := f.Get(id)
	if !ok {
		return fmt.Errorf("fake %s: no sandbox %s", f.vendor, id)
	}
	sb.KillProcesses()
	return nil
}

// Logs is what the processes of sandbox id wrote.
func (f *Fake[S]) Logs(id string) string {
	if sb, ok := f.Get(id); ok {
		return sb.Logs()
	}
	return ""
}

func (f *Fake[S]) close() {
	close(f.hang)
	if f.srv != nil {
		f.srv.Close()
	}
	f.mu.Lock()
	sbs := f.sandboxes
	f.sandboxes = map[string]S{}
	f.mu.Unlock()
	for _, sb := range sbs {
		sb.Kill()
	}
}

// Sent records data as sent into a sandbox.
func (f *Fake[S]) Sent(data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen.Write(data)
}

// SentEnv records an environment as sent into a sandbox, a line a
// variable.
func (f *Fake[S]) SentEnv(env map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, v := range env {
		fmt.Fprintf(&f.seen, "%s=%s\n", k, v)
	}
}

// Injected is the fault injected into op, if any.
func (f *Fake[S]) Injected(op string) (Fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft, ok := f.faults[op]
	return ft, ok
}

// Fault answers r with the fault injected into op, if any, and reports
// whether it did. A hanging fault answers only once the client has gone
// (or the test ends), with a gateway timeout nobody reads, but that must
// still be the vendor's error.
func (f *Fake[S]) Fault(w http.ResponseWriter, r *http.Request, op string) bool {
	ft, ok := f.Injected(op)
	if !ok {
		return false
	}
	MarkFault(r)
	if ft.Hang {
		select {
		case <-r.Context().Done():
		case <-f.hang:
		}
		f.writeError(w, r, http.StatusGatewayTimeout, "timeout", "timed out")
		return true
	}
	code := ft.Code
	if code == "" {
		code = "injected"
	}
	f.writeError(w, r, ft.Status, code, ft.Message)
	return true
}

// Authed answers status (with code) and refused's message to a request
// refused (its credential is not the fake's), before h sees it.
func (f *Fake[S]) Authed(h http.Handler, status int, code string, refused func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := refused(r); msg != "" {
			f.writeError(w, r, status, code, msg)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Decode is a route's start: the fault injected into op, else r's JSON
// body decoded into in (400 when it is not JSON); false when answered.
func (f *Fake[S]) Decode(w http.ResponseWriter, r *http.Request, op string, in any) bool {
	if f.Fault(w, r, op) {
		return false
	}
	if err := json.NewDecoder(r.Body).Decode(in); err != nil {
		f.writeError(w, r, http.StatusBadRequest, "bad_request", err.Error())
		return false
	}
	return true
}

// Sandbox is a route's start: the fault injected into op, else sandbox
// id (404 when unknown); false when answered.
func (f *Fake[S]) Sandbox(w http.ResponseWriter, r *http.Request, op, id string) (S, bool) {
	if f.Fault(w, r, op) {
		var none S
		return none, false
	}
	return f.Lookup(w, r, id)
}

// Add adds sandbox sb as id, unless id is taken.
func (f *Fake[S]) Add(id string, sb S) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, taken := f.sandboxes[id]; taken {
		return false
	}
	f.sandboxes[id] = sb
	return true
}

// Get is sandbox id.
func (f *Fake[S]) Get(id string) (S, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sandboxes[id]
	return sb, ok
}

// Find is the first sandbox, in no order, that match reports.
func (f *Fake[S]) Find(match func(S) bool) (S, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sb := range f.sandboxes {
		if match(sb) {
			return sb, true
		}
	}
	var none S
	return none, false
}

// Lookup is sandbox id; an unknown one is answered 404 with the vendor's
// message.
func (f *Fake[S]) Lookup(w http.ResponseWriter, r *http.Request, id string) (S, bool) {
	sb, ok := f.Get(id)
	if !ok {
		f.writeError(w, r, http.StatusNotFound, "not_found", fmt.Sprintf(f.notFound, id))
	}
	return sb, ok
}

// Remove removes sandbox id and kills it; an unknown one is answered 404
// with the vendor's message.
func (f *Fake[S]) Remove(w http.ResponseWriter, r *http.Request, id string) (S, bool) {
	f.mu.Lock()
	sb, ok := f.sandboxes[id]
	delete(f.sandboxes, id)
	f.mu.Unlock()
	if !ok {
		f.writeError(w, r, http.StatusNotFound, "not_found", fmt.Sprintf(f.notFound, id))
		return sb, false
	}
	sb.Kill()
	return sb, true
}

// Page is a list's page: the sandboxes match reports whose ids sort after
// after, by id, at most limit, and the cursor of the next page (the last
// id, when more match; else empty).
func (f *Fake[S]) Page(after string, limit int, match func(S) bool) (page []S, next string) {
	f.mu.Lock()
	var ids []string
	for id, sb := range f.sandboxes {
		if id > after && match(sb) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	if len(ids) > limit {
		ids, next = ids[:limit], ids[limit-1]
	}
	for _, id := range ids {
		page = append(page, f.sandboxes[id])
	}
	f.mu.Unlock()
	return page, next
}

// Labelled reports whether labels has every label of want.
func Labelled(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// RandHex is n random bytes in hex: ids, keys, tokens of a fake.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Testdata is the path of a vendored document in the testdata directory
// of the vendor's package, the parent of the caller's (a fake's) package.
func Testdata(name string) string {
	_, file, _, _ := runtime.Caller(1)
	return filepath.Join(filepath.Dir(file), "..", "testdata", name)
}
