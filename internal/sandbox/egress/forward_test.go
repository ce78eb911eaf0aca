package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// echoUnix serves a unix socket that answers each line with "echo: "
// and the line, and counts what it accepted on accepted.
func echoUnix(t *testing.T) (string, chan net.Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "up.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := io.WriteString(c, "echo: "+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	return path, accepted
}

// TestForward: each connection is carried both ways to one of its own
// upstream; one past the bound is closed without an upstream; a
// half-close reaches the upstream; the end of ctx ends everything and
// Forward returns nil.
func TestForward(t *testing.T) {
	path, accepted := echoUnix(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Forward(ctx, ln, UnixDialer(path), 2) }()

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	roundTrip := func(c net.Conn, r *bufio.Reader, s string) string {
		t.Helper()
		if _, err := io.WriteString(c, s+"\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the answer to %q: %v", s, err)
		}
		return strings.TrimSuffix(line, "\n")
	}
	a, ar := dial()
	b, br := dial()
	if got := roundTrip(a, ar, "one"); got != "echo: one" {
		t.Fatalf("a got %q", got)
	}
	if got := roundTrip(b, br, "two"); got != "echo: two" {
		t.Fatalf("b got %q", got)
	}
	<-accepted
	<-accepted
	// Past the bound of 2: closed at once, nothing dialled.
	c, cr := dial()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := cr.ReadByte(); !errors.Is(err, io.EOF) {
		var ne net.Error
		if !errors.As(err, &ne) || ne.Timeout() {
			t.Fatalf("a connection past the bound: %v, want it closed", err)
		}
	}
	select {
	case <-accepted:
		t.Fatal("a connection past the bound reached the upstream")
	default:
	}
	// A half-close is passed on: the upstream ends its side, and the
	// client reads the end.
	if err := a.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if rest, err := io.ReadAll(ar); err != nil || len(rest) != 0 {
		t.Fatalf("after a half-close: %q, %v; want the end", rest, err)
	}
	// Its slot is free again.
	d, dr := dial()
	if got := roundTrip(d, dr, "three"); got != "echo: three" {
		t.Fatalf("d got %q", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Forward: %v", err)
	}
	_ = b.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		var ne net.Error
		if !errors.As(err, &ne) || ne.Timeout() {
			t.Fatalf("a carried connection after the end: %v, want it closed", err)
		}
	}
}

// TestForwardNoUpstream: when nothing answers the upstream, a client's
// connection is closed (fail closed), and Forward goes on.
func TestForwardNoUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Forward(ctx, ln, UnixDialer(filepath.Join(t.TempDir(), "none.sock")), 0) }()
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var ne net.Error
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("read from a connection with no upstream")
		} else if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("a connection with no upstream stayed open")
		}
		_ = c.Close()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Forward: %v", err)
	}
}
