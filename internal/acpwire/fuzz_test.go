package acpwire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"

	"github.com/agentbox/agentbox/internal/acpwire"
)

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// FuzzConn feeds arbitrary bytes to a connection as its peer's output:
// it must never panic, never hand its handler a message over the limit,
// and end when the input does.
func FuzzConn(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"session/update","params":{"update":{}}}`,
		"{\"jsonrpc\":\"2.0\",\"method\":\"n\",\"params\":[1]}\n{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":{}}\n",
		`{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":1e2}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"m","data":[{}]}}`,
		"\n\n\r\n{}",
		`{"id":null,"method":"m"}`,
		`{"jsonrpc":"2.0","id":[1],"method":"m"}`,
	} {
		f.Add([]byte(s))
	}
	const max = 256
	f.Fuzz(func(t *testing.T, in []byte) {
		c := acpwire.NewConn(func(ctx context.Context, method string, params json.RawMessage) (any, *acpwire.RequestError) {
			if len(params) > max {
				t.Errorf("params of %d bytes passed the %d byte limit", len(params), max)
			}
			return params, nil
		}, io.Discard, bytes.NewReader(in), acpwire.Options{Limits: acpwire.Limits{MaxMessage: max, MaxInbound: 2, MaxQueued: 2}})
		<-c.Done()
		// A call after the end fails, it does not hang.
		if _, err := c.Call(context.Background(), "m", nil); err == nil {
			t.Fatal("a call on an ended connection succeeded")
		}
	})
}
