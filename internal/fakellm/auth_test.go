package fakellm_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/fakellm"
)

// withQuery appends a query parameter to a path that may have a query.
func withQuery(p, k, v string) string {
	sep := "?"
	if strings.Contains(p, "?") {
		sep = "&"
	}
	return p + sep + k + "=" + url.QueryEscape(v)
}

// TestRequireKey checks that with Options.RequireKey the model APIs answer
// only the right key, wherever the client puts it, and refuse a wrong or
// missing one with 401 in the API's own shape.
func TestRequireKey(t *testing.T) {
	const (
		realKey     = "sk-real-key-0123456789"
		placeholder = "sk-placeholder"
		replyText   = "hello with the real key"
	)
	logFile := filepath.Join(t.TempDir(), "requests.jsonl")
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{{Text: replyText}}}
	srv := start(t, fakellm.Options{RequireKey: realKey, Default: "k", LogFile: logFile,
		Scenarios: map[string]*fakellm.Scenario{"k": sc}})
	tools := map[string]string{"anthropic": "claude", "responses": "codex", "chat": "opencode", "gemini": "gemini"}

	type where int
	const (
		xAPIKey where = iota
		bearer
		googHeader
		azureHeader
		queryKey
	)
	tests := []struct {
		name   string
		proto  string
		where  where
		key    string // "" sends none
		stream bool
		status int
	}{
		{"anthropic right", "anthropic", xAPIKey, realKey, true, 200},
		{"anthropic right bearer", "anthropic", bearer, realKey, false, 200},
		{"anthropic wrong", "anthropic", xAPIKey, placeholder, true, 401},
		{"anthropic missing", "anthropic", xAPIKey, "", false, 401},
		{"responses right", "responses", bearer, realKey, true, 200},
		{"responses wrong", "responses", bearer, placeholder, true, 401},
		{"responses missing", "responses", bearer, "", false, 401},
		{"chat right azure", "chat", azureHeader, realKey, false, 200},
		{"chat wrong", "chat", bearer, placeholder, false, 401},
		{"chat missing", "chat", bearer, "", true, 401},
		{"gemini right", "gemini", googHeader, realKey, true, 200},
		{"gemini right query", "gemini", queryKey, realKey, false, 200},
		{"gemini wrong", "gemini", googHeader, placeholder, false, 401},
		{"gemini wrong query", "gemini", queryKey, placeholder, true, 401},
		{"gemini missing", "gemini", googHeader, "", true, 401},
	}
	refused := 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := protocolByName(tc.proto)
			path, header := p.path(tc.stream), map[string]string{}
			if tc.key != "" {
				switch tc.where {
				case xAPIKey:
					header["x-api-key"] = tc.key
				case bearer:
					header["Authorization"] = "Bearer " + tc.key
				case googHeader:
					header["x-goog-api-key"] = tc.key
				case azureHeader:
					header["api-key"] = tc.key
				case queryKey:
					path = withQuery(path, "key", tc.key)
				}
			}
			body := p.body(agents(t)[tools[tc.proto]].Tools, []msg{{role: "user", text: "hi"}}, tc.stream)
			status, h, b, err := tryPost(t.Context(), srv.URL()+path, body, header)
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, b)
			}
			// A request is recorded before it is answered.
			reqs := srv.Requests()
			last := reqs[len(reqs)-1]
			if tc.status == 200 {
				res, err := p.read(b, tc.stream)
				if err != nil || res.Text != replyText {
					t.Errorf("reply %q, %v: %s", res.Text, err, b)
				}
				if last.Status != 200 || !last.HasKey(realKey) {
					t.Errorf("recorded %+v", last)
				}
				return
			}
			refused++
			msg, err := errorShape(tc.proto, status, b)
			if err != nil {
				t.Error(err)
			}
			want := "wrong API key"
			if tc.key == "" {
				want = "no API key"
			}
			if !strings.Contains(msg, want) {
				t.Errorf("message %q, want %q in it", msg, want)
			}
			if !strings.HasPrefix(h.Get("Content-Type"), "application/json") || h.Get("X-Should-Retry") != "false" {
				t.Errorf("headers %v", h)
			}
			if last.Status != 401 || !strings.Contains(last.Reply, want) || last.Step != -1 {
				t.Errorf("recorded status %d reply %q step %d", last.Status, last.Reply, last.Step)
			}
			if tc.key != "" && !last.HasKey(tc.key) {
				t.Errorf("the refused key's hash is not recorded")
			}
			if got := srv.KeyMismatches(); got != refused {
				t.Errorf("KeyMismatches %d, want %d", got, refused)
			}
		})
	}

	// Count-tokens calls are model API calls; health, HEAD, telemetry,
	// model lists and unknown routes need no key.
	before := srv.KeyMismatches()
	if st, _, b := post(t, srv.URL()+"/v1/messages/count_tokens", map[string]any{"messages": []any{}}, nil); st != 401 {
		t.Errorf("count_tokens without a key: %d %s", st, b)
	}
	if st, _, b := post(t, srv.URL()+"/v1beta/models/g:countTokens", map[string]any{}, map[string]string{"x-goog-api-key": realKey}); st != 200 {
		t.Errorf("countTokens with the key: %d %s", st, b)
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/", 200},
		{http.MethodGet, "/healthz", 200},
		{http.MethodHead, "/v1/messages", 200},
		{http.MethodPost, "/api/event_logging/batch", 200},
		{http.MethodGet, "/v1/models", 200},
		{http.MethodGet, "/v1beta/models/gemini-x", 200},
		{http.MethodPost, "/v1/nothing", 404},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, srv.URL()+tc.path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s without a key: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
	}
	if got := srv.KeyMismatches(); got != before+1 {
		t.Errorf("KeyMismatches %d, want %d", got, before+1)
	}

	// No key is ever stored, right or wrong.
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{realKey, placeholder} {
		if strings.Contains(string(raw), k) {
			t.Errorf("the log file holds %q", k)
		}
		for _, r := range srv.Requests() {
			if j, _ := json.Marshal(r); strings.Contains(string(j), k) {
				t.Errorf("request %d holds %q", r.Seq, k)
			}
		}
	}
	if n := bytes.Count(raw, []byte(`"status":401`)); n != before+1 {
		t.Errorf("%d log lines with status 401, want %d", n, before+1)
	}
}

// TestTLS checks HTTPS over HTTP/1.1 and HTTP/2: a client that trusts
// CertPool (or CertPEM) gets a streamed answer, flushed event by event; a
// client that does not fails verification.
func TestTLS(t *testing.T) {
	const key = "sk-tls-key"
	const delay = 80 * time.Millisecond
	sc := &fakellm.Scenario{Turns: []fakellm.Turn{{Chunks: []string{"a", "b", "c", "d"}, Delay: fakellm.Duration(delay)}}}
	srv := start(t, fakellm.Options{TLS: true, RequireKey: key, Scenarios: map[string]*fakellm.Scenario{"slow4": sc}})
	if !strings.HasPrefix(srv.URL(), "https://127.0.0.1:") {
		t.Fatalf("URL %q", srv.URL())
	}
	block, _ := pem.Decode(srv.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("CertPEM %q", srv.CertPEM())
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !ca.IsCA {
		t.Fatalf("CA: %v", err)
	}
	fromPEM := x509.NewCertPool()
	fromPEM.AppendCertsFromPEM(srv.CertPEM())

	tests := []struct {
		name      string
		roots     *x509.CertPool // nil: the system's
		http2     bool
		wantProto int
	}{
		{"http1 CertPool", srv.CertPool(), false, 1},
		{"http2 CertPool", srv.CertPool(), true, 2},
		{"http2 CertPEM", fromPEM, true, 2},
		{"http1 untrusted", nil, false, 0},
		{"http2 untrusted", nil, true, 0},
	}
	p := protocolByName("anthropic")
	body := p.body(agents(t)["claude"].Tools, []msg{{role: "user", text: "hi"}}, true)
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: tc.roots}, Protocols: new(http.Protocols)}
			tr.Protocols.SetHTTP1(!tc.http2)
			tr.Protocols.SetHTTP2(tc.http2)
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.ScenarioURL("slow4")+p.path(true), bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("x-api-key", key)
			t0 := time.Now()
			resp, err := c.Do(req)
			if tc.wantProto == 0 {
				var unknown x509.UnknownAuthorityError
				if err == nil {
					resp.Body.Close()
					t.Fatal("an untrusting client connected")
				}
				if !errors.As(err, &unknown) {
					t.Fatalf("error %v, want an unknown authority", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != 200 || resp.ProtoMajor != tc.wantProto {
				t.Fatalf("status %d proto %s", resp.StatusCode, resp.Proto)
			}
			peer := resp.TLS.PeerCertificates[0]
			for _, host := range []string{"127.0.0.1", "::1", "localhost"} {
				if err := peer.VerifyHostname(host); err != nil {
					t.Errorf("certificate: %v", err)
				}
			}
			// Read line by line, noting when the first text delta came:
			// a flushed stream delivers it long before the last chunk.
			var all bytes.Buffer
			var first time.Duration
			br := bufio.NewReader(resp.Body)
			for {
				line, err := br.ReadString('\n')
				all.WriteString(line)
				if first == 0 && strings.Contains(line, `"text_delta"`) {
					first = time.Since(t0)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			total := time.Since(t0)
			if first == 0 || total < 4*delay || first > total-2*delay {
				t.Errorf("first delta at %v of %v: not flushed", first, total)
			}
			res, err := readAnthropicStream(all.Bytes())
			if err != nil || res.Text != "abcd" {
				t.Errorf("answer %q, %v", res.Text, err)
			}
		})
	}
	// Plain HTTP to the TLS port gets no answer from the model API.
	if resp, err := client.Get(strings.Replace(srv.URL(), "https://", "http://", 1) + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP was answered 200")
		}
	}
	if srv.KeyMismatches() != 0 {
		t.Errorf("KeyMismatches %d", srv.KeyMismatches())
	}
	// Without Options.TLS there is no certificate.
	plain := start(t, fakellm.Options{})
	if plain.CertPool() != nil || plain.CertPEM() != nil || !strings.HasPrefix(plain.URL(), "http://") {
		t.Errorf("plain server: %v %q %q", plain.CertPool(), plain.CertPEM(), plain.URL())
	}
}
