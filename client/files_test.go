package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/stacktest"
)

// readString returns what reads all of an SDK call's reader.
func readString(t *testing.T) func(io.ReadCloser, error) string {
	return func(r io.ReadCloser, err error) string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// TestFiles drives every files call of the SDK against the real stack.
func TestFiles(t *testing.T) {
	stk := newStack(t, stacktest.Options{})
	c, ctx := stk.Client, t.Context()
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	changes := make(chan client.FileChange, 64)
	go func() {
		defer close(changes)
		for ch, err := range c.WatchFiles(wctx, s.ID, ".") {
			if err != nil {
				return
			}
			changes <- ch
		}
	}()
	// The watch starts some time after the call: write until it reports
	// the write (bounded by wctx).
	seen := false
	for !seen {
		e, err := c.WriteFile(ctx, s.ID, "a.txt", []byte("hello"))
		if err != nil || e.Size != 5 || e.Type != "file" || e.Mode != "0644" || e.MTime.IsZero() {
			t.Fatalf("write %+v %v", e, err)
		}
		tick := time.NewTimer(100 * time.Millisecond)
		for waiting := true; waiting && !seen; {
			select {
			case ch, ok := <-changes:
				if !ok {
					t.Fatal("the watch ended")
				}
				seen = ch == client.FileChange{Path: "a.txt", Op: "write"}
			case <-tick.C:
				waiting = false
			}
		}
		tick.Stop()
	}
	if got := readString(t)(c.ReadFile(ctx, s.ID, "a.txt", 1, 3)); got != "ell" {
		t.Fatalf("range %q", got)
	}
	if _, err := c.MakeDir(ctx, s.ID, "d/e", true); err != nil {
		t.Fatal(err)
	}
	if e, err := c.MoveFile(ctx, s.ID, "a.txt", "d/e/a.txt", false); err != nil || e.Path != "d/e/a.txt" {
		t.Fatal(e, err)
	}
	if e, err := c.StatFile(ctx, s.ID, "d"); err != nil || e.Type != "dir" {
		t.Fatal(e, err)
	}
	l, err := c.ListFiles(ctx, s.ID, "", 3)
	if err != nil || len(l.Entries) != 3 {
		t.Fatalf("list %+v %v", l, err)
	}
	tarball := readString(t)(c.DownloadArchive(ctx, s.ID, "d"))
	if _, err := c.UploadArchive(ctx, s.ID, "copy", []byte(tarball)); err != nil {
		t.Fatal(err)
	}
	if got := readString(t)(c.ReadFile(ctx, s.ID, "copy/e/a.txt", 0, 0)); got != "hello" {
		t.Fatalf("copy %q", got)
	}
	if err := c.DeleteFile(ctx, s.ID, "copy", true); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	_ = tw.WriteHeader(&tar.Header{Name: "../x", Typeflag: tar.TypeReg})
	_ = tw.Close()
	for _, tc := range []struct {
		err  error
		kind string
	}{
		{func() error { _, err := c.StatFile(ctx, s.ID, "copy"); return err }(), "file-not-found"},
		{func() error { _, err := c.ReadFile(ctx, s.ID, "../x", 0, 0); return err }(), "outside-workspace"},
		{func() error { _, err := c.UploadArchive(ctx, s.ID, ".", b.Bytes()); return err }(), "outside-workspace"},
		{func() error { _, err := c.MakeDir(ctx, s.ID, "d", false); return err }(), "file-exists"},
		{func() error { _, err := c.ListFiles(ctx, "ses_unknown", "", 0); return err }(), "not-found"},
	} {
		var ae *client.APIError
		if !errors.As(tc.err, &ae) || ae.Kind() != tc.kind {
			t.Errorf("error %v, want kind %s", tc.err, tc.kind)
		}
	}
}

// TestStopWatchingEndsTheStream: a caller that stops reading an event
// stream (a break out of WatchFiles) ends the request at once, rather than
// waiting for the stream's end, which a watch may never reach. The files
// methods reach a process's workspace with ProcessWorkspace.
func TestStopWatchingEndsTheStream(t *testing.T) {
	ended := make(chan string, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/processes/prc_1/files/watch" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: change\ndata: {\"path\":\"a.txt\",\"op\":\"create\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			ended <- "by the client"
		case <-time.After(time.Minute): // a backstop: the stream would go on
			ended <- "by the server's backstop"
		}
	}))
	defer ts.Close()
	c, err := client.New(ts.URL, client.WithToken("t"))
	if err != nil {
		t.Fatal(err)
	}
	for ch, err := range c.WatchFiles(t.Context(), client.ProcessWorkspace("prc_1"), ".") {
		if err != nil {
			t.Fatal(err)
		}
		if ch.Path != "a.txt" {
			t.Fatalf("change %+v", ch)
		}
		break
	}
	if how := <-ended; how != "by the client" {
		t.Fatalf("the stream ended %s, not when the caller stopped reading", how)
	}
}
