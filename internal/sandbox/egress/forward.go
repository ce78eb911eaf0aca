package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Dialer makes the connection a forwarded client connection is carried
// on: for the inner daemon of a provider's sandbox, a connection to the
// host daemon's egress proxy for that sandbox (a unix socket the provider
// bind-mounts into it). It is the only way out of such a sandbox.
type Dialer interface {
	DialContext(ctx context.Context) (net.Conn, error)
}

// UnixDialer dials the unix socket at its path.
type UnixDialer string

// DialContext implements Dialer.
func (u UnixDialer) DialContext(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", string(u))
}

// DefaultForwardMax bounds the connections Forward carries at once.
const DefaultForwardMax = 256

// Forward carries every connection ln yields, byte for byte, to a
// connection d makes, until ctx ends or ln closes: the proxy a sandbox's
// processes reach on its loopback is then the host's, which decides each
// connection (nothing is decided here, and nothing here holds a secret).
// At most max connections (DefaultForwardMax when max <= 0) are carried at
// once; a connection past it is closed at once. It returns nil when ctx
// ends or ln is closed, and closes every connection it carries then.
func Forward(ctx context.Context, ln net.Listener, d Dialer, max int) error {
	if max <= 0 {
		max = DefaultForwardMax
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()
	slots := make(chan struct{}, max)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return fmt.Errorf("egress: forward: accept: %w", err)
		}
		select {
		case slots <- struct{}{}:
		default:
			_ = c.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-slots }()
			carry(ctx, c, d)
		})
	}
}

// carry joins c to a connection d makes, both ways, until either side
// ends or ctx does; each half-close is passed on.
func carry(ctx context.Context, c net.Conn, d Dialer) {
	defer c.Close()
	dctx, cancel := context.WithTimeout(ctx, DefaultDialTimeout)
	up, err := d.DialContext(dctx)
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close(); _ = up.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}
