package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestUploadBudget holds uploads whose bodies are still coming and sends
// more: past the budget (two file uploads of unknown length here) the
// next is refused at once with 429 and Retry-After, before its body is
// read; once the held uploads end, the budget is free again.
func TestUploadBudget(t *testing.T) {
	srv := httptest.NewServer(New(Config{MaxFileBytes: 1000, MaxArchiveBytes: 1000, MaxUploadBytes: 2002}, newFakeEngine(), nil, nil))
	t.Cleanup(srv.Close)
	put := func(body io.Reader, length int64) (*http.Response, error) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, srv.URL+"/v1/sessions/ses_1/files/content?path=a", body)
		if err != nil {
			return nil, err
		}
		req.ContentLength = length
		req.Header.Set("Content-Type", "application/octet-stream")
		return http.DefaultClient.Do(req)
	}
	// Two uploads of unknown length take 1001 bytes each and hold them
	// while their bodies do not end.
	var held []*io.PipeWriter
	done := make(chan struct{}, 2)
	for range 2 {
		pr, pw := io.Pipe()
		held = append(held, pw)
		go func() {
			defer func() { done <- struct{}{} }()
			if resp, err := put(pr, -1); err == nil {
				resp.Body.Close()
			}
		}()
		_, _ = pw.Write([]byte("x")) // the handler reads: it holds its share
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := put(strings.NewReader("y"), -1)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("Retry-After") == "" || !bytes.Contains(b, []byte(client.ProblemTooManyRequests)) {
				t.Errorf("429 without Retry-After or its type: %v %s", resp.Header, b)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("uploads past the budget answer %d %s, want 429", resp.StatusCode, b)
		}
	}
	for _, pw := range held {
		_ = pw.Close()
	}
	for range 2 {
		<-done
	}
	// Free again: the upload gets past the budget (to the 503 of a daemon
	// without files).
	resp, err := put(strings.NewReader("z"), 1)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("an upload after the held ones ended: %d, want 503", resp.StatusCode)
	}
}
