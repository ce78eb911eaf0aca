package acpwire_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/agentbox/agentbox/internal/acpwire"
)

// pipes connects two sides: what one writes the other reads.
func pipes(t *testing.T) (aIn io.Reader, aOut io.WriteCloser, bIn io.Reader, bOut io.WriteCloser) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	t.Cleanup(func() { aw.Close(); bw.Close(); ar.Close(); br.Close() })
	return ar, aw, br, bw
}

// TestConnWithSDK runs acpwire's connection against the reference SDK's
// on the other end: requests, results and errors with their codes both
// ways, notifications before an answer, cancellation both ways, and many
// requests at once.
func TestConnWithSDK(t *testing.T) {
	ctx := t.Context()
	ourIn, ourOut, sdkIn, sdkOut := pipes(t)

	var notified atomic.Int64
	sdkCancelled := make(chan struct{}, 2)
	ourCancelled := make(chan struct{})
	var peer *sdk.Connection
	peer = sdk.NewConnection(func(ctx context.Context, method string, params json.RawMessage) (any, *sdk.RequestError) {
		switch method {
		case "echo":
			return params, nil
		case "fail":
			return nil, sdk.NewInvalidParams(map[string]any{"error": "no"})
		case "chatty": // notifications, then the answer
			for i := range 50 {
				_ = peer.SendNotification(ctx, "note", map[string]int{"i": i})
			}
			return map[string]string{"stopReason": "end_turn"}, nil
		case "block":
			<-ctx.Done()
			sdkCancelled <- struct{}{}
			return nil, sdk.NewInternalError(nil)
		case "ask": // the peer asks us, and reports what it got
			res, err := sdk.SendRequest[json.RawMessage](peer, ctx, "whoami", map[string]string{"q": "?"})
			if err != nil {
				return nil, sdk.NewInternalError(map[string]any{"error": err.Error()})
			}
			_, ferr := sdk.SendRequest[json.RawMessage](peer, ctx, "refuse", nil)
			return map[string]any{"result": res, "error": ferr}, nil
		case "ask-and-cancel":
			cctx, cancel := context.WithCancel(ctx)
			go func() { <-ourCancelled; cancel() }()
			_, err := sdk.SendRequest[json.RawMessage](peer, cctx, "slow", nil)
			return map[string]any{"error": err.Error()}, nil
		}
		return nil, sdk.NewMethodNotFound(method)
	}, sdkOut, sdkIn)
	peer.SetLogger(discard())

	c := acpwire.NewConn(func(ctx context.Context, method string, params json.RawMessage) (any, *acpwire.RequestError) {
		switch method {
		case "note":
			notified.Add(1)
			return nil, nil
		case "whoami":
			return map[string]string{"name": "agentbox"}, nil
		case "refuse":
			return nil, &acpwire.RequestError{Code: -32000, Message: "Authentication required", Data: map[string]any{"x": 1}}
		case "slow":
			close(ourCancelled)
			<-ctx.Done() // the peer's $/cancel_request
			return nil, acpwire.ToRequestError(context.Cause(ctx))
		}
		return nil, acpwire.NewMethodNotFound(method)
	}, ourOut, ourIn, acpwire.Options{})

	t.Run("result", func(t *testing.T) {
		got, err := acpwire.Request[map[string]string](ctx, c, "echo", map[string]string{"a": "<b>"})
		if err != nil || got["a"] != "<b>" {
			t.Fatalf("%v, %v", got, err)
		}
	})
	t.Run("error codes", func(t *testing.T) {
		_, err := c.Call(ctx, "fail", nil)
		var re *acpwire.RequestError
		if !errors.As(err, &re) || re.Code != acpwire.CodeInvalidParams || re.Message != "Invalid params" || fmt.Sprint(re.Data) != "map[error:no]" {
			t.Fatalf("%#v", err)
		}
		_, err = c.Call(ctx, "nope", nil)
		if !errors.As(err, &re) || re.Code != acpwire.CodeMethodNotFound {
			t.Fatalf("%#v", err)
		}
	})
	t.Run("notifications come first", func(t *testing.T) {
		before := notified.Load()
		if _, err := c.Call(ctx, "chatty", nil); err != nil {
			t.Fatal(err)
		}
		if n := notified.Load() - before; n != 50 {
			t.Fatalf("%d notifications handled when the answer returned, want 50", n)
		}
	})
	t.Run("the peer's requests", func(t *testing.T) {
		got, err := acpwire.Request[map[string]json.RawMessage](ctx, c, "ask", nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(got["result"]) != `{"name":"agentbox"}` || string(got["error"]) != `{"code":-32000,"message":"Authentication required","data":{"x":1}}` {
			t.Fatalf("%s", got)
		}
	})
	t.Run("we cancel", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { _, err := c.Call(cctx, "block", nil); done <- err }()
		cancel()
		var re *acpwire.RequestError
		if err := <-done; !errors.As(err, &re) || re.Code != acpwire.CodeRequestCancelled {
			t.Fatalf("%#v", err)
		}
		<-sdkCancelled // the peer's handler saw $/cancel_request
	})
	t.Run("the peer cancels", func(t *testing.T) {
		got, err := acpwire.Request[map[string]string](ctx, c, "ask-and-cancel", nil)
		if err != nil || !strings.Contains(got["error"], "-32800") {
			t.Fatalf("%v, %v", got, err)
		}
	})
	t.Run("many at once", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				got, err := acpwire.Request[int](ctx, c, "echo", i)
				if err != nil || got != i {
					t.Errorf("request %d: %d, %v", i, got, err)
				}
			})
		}
		wg.Wait()
	})
	t.Run("the peer goes away", func(t *testing.T) {
		done := make(chan error, 1)
		go func() { _, err := c.Call(ctx, "block", nil); done <- err }()
		sdkOut.Close()
		<-c.Done()
		if err := <-done; err == nil || !strings.Contains(err.Error(), "peer disconnected") {
			t.Fatalf("%v", err)
		}
	})
}

// rawPeer is a hostile peer speaking raw lines.
type rawPeer struct {
	out   io.WriteCloser // to the Conn
	lines *bufio.Scanner // from the Conn
}

func newRawPeer(t *testing.T, h acpwire.Handler, lim acpwire.Limits) (*acpwire.Conn, *rawPeer) {
	ourIn, ourOut, peerIn, peerOut := pipes(t)
	c := acpwire.NewConn(h, ourOut, ourIn, acpwire.Options{Limits: lim})
	sc := bufio.NewScanner(peerIn)
	sc.Buffer(nil, 1<<20)
	return c, &rawPeer{out: peerOut, lines: sc}
}

func (p *rawPeer) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(p.out, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

func (p *rawPeer) next(t *testing.T) string {
	t.Helper()
	if !p.lines.Scan() {
		t.Fatalf("no message: %v", p.lines.Err())
	}
	return p.lines.Text()
}

func block(ctx context.Context, _ string, _ json.RawMessage) (any, *acpwire.RequestError) {
	<-ctx.Done()
	return nil, nil
}

// TestConnBounds: what a hostile peer sends cannot make a Conn hold more
// than its limits.
func TestConnBounds(t *testing.T) {
	t.Run("message size", func(t *testing.T) {
		got := make(chan int, 1)
		c, p := newRawPeer(t, func(_ context.Context, _ string, params json.RawMessage) (any, *acpwire.RequestError) {
			got <- len(params)
			return nil, nil
		}, acpwire.Limits{MaxMessage: 100})
		prefix := `{"jsonrpc":"2.0","method":"n","params":"`
		fits := prefix + strings.Repeat("x", 100-len(prefix)-2) + `"}`
		p.send(t, fits) // exactly the limit
		if n := <-got; n != 100-len(prefix) {
			t.Fatalf("params of %d bytes", n)
		}
		p.send(t, prefix+strings.Repeat("x", 1000)+`"}`)
		<-c.Done()
		if !errors.Is(c.Err(), acpwire.ErrMessageTooLarge) {
			t.Fatalf("%v", c.Err())
		}
	})
	t.Run("requests at once", func(t *testing.T) {
		var running, most atomic.Int64
		release := make(chan struct{})
		c, p := newRawPeer(t, func(ctx context.Context, _ string, _ json.RawMessage) (any, *acpwire.RequestError) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			<-release
			return "ok", nil
		}, acpwire.Limits{MaxInbound: 4})
		// Sent while the answers are read: a refusal is written before the
		// next message is read, so a peer that does not read stalls itself.
		go func() {
			for i := range 10 {
				if _, err := fmt.Fprintf(p.out, `{"jsonrpc":"2.0","id":%d,"method":"m"}`+"\n", i); err != nil {
					return
				}
			}
		}()
		// Six refusals come at once, while four requests are held.
		for range 6 {
			if l := p.next(t); !strings.Contains(l, `"code":-32603`) || !strings.Contains(l, "more than 4 requests at once") {
				t.Fatalf("%s", l)
			}
		}
		close(release)
		for range 4 {
			if l := p.next(t); !strings.Contains(l, `"result":"ok"`) {
				t.Fatalf("%s", l)
			}
		}
		if most.Load() > 4 {
			t.Fatalf("%d requests handled at once", most.Load())
		}
		_ = c
	})
	t.Run("same id twice", func(t *testing.T) {
		_, p := newRawPeer(t, block, acpwire.Limits{})
		p.send(t, `{"jsonrpc":"2.0","id":"a","method":"m"}`)
		p.send(t, `{"jsonrpc":"2.0","id":"a","method":"m"}`)
		if l := p.next(t); l != `{"jsonrpc":"2.0","id":"a","error":{"code":-32600,"message":"Invalid request","data":{"error":"the request id is already in use"}}}` {
			t.Fatalf("%s", l)
		}
	})
	t.Run("queued notifications", func(t *testing.T) {
		c, p := newRawPeer(t, block, acpwire.Limits{MaxQueued: 3})
		go func() {
			for range 10 {
				if _, err := io.WriteString(p.out, `{"jsonrpc":"2.0","method":"n"}`+"\n"); err != nil {
					return
				}
			}
		}()
		<-c.Done()
		if !errors.Is(c.Err(), acpwire.ErrQueueFull) {
			t.Fatalf("%v", c.Err())
		}
	})
	t.Run("our pending requests", func(t *testing.T) {
		c, p := newRawPeer(t, block, acpwire.Limits{MaxPending: 2})
		go func() {
			for p.lines.Scan() { // never answered
			}
		}()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var wg sync.WaitGroup
		started := make(chan struct{}, 2)
		for range 2 {
			wg.Go(func() {
				started <- struct{}{}
				_, _ = c.Call(ctx, "m", nil)
			})
		}
		<-started
		<-started
		// The two calls may not be registered yet: wait until a third is refused.
		for {
			_, err := c.Call(ctx, "m", nil)
			if err != nil && strings.Contains(err.Error(), "more than 2 requests awaiting an answer") {
				break
			}
		}
		cancel()
		wg.Wait()
	})
	t.Run("garbage is skipped", func(t *testing.T) {
		_, p := newRawPeer(t, func(context.Context, string, json.RawMessage) (any, *acpwire.RequestError) { return 1, nil }, acpwire.Limits{})
		for _, l := range []string{`nonsense`, `[1,2]`, `{"jsonrpc":"2.0"}`, `{"id":{}}`, ``, `   `, `{"jsonrpc":"2.0","id":7,"result":1}`} {
			p.send(t, l)
		}
		p.send(t, `{"jsonrpc":"2.0","id":1.0,"method":"m"}`)
		if l := p.next(t); l != `{"jsonrpc":"2.0","id":1.0,"result":1}` {
			t.Fatalf("%s", l)
		}
	})
}
