package client

import (
	"context"
	"fmt"
	"net"
	"os"
)

// dialFunc is the signature of http.Transport.DialContext.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// ownerChecked wraps dial so that a connection is kept only when the
// daemon behind it belongs to this user or to root (root can read the
// token file anyway): the token in the data directory is then never sent to
// a port or socket another local user took, for one while the daemon is
// down. It returns dial unchanged where the owner cannot be told
// (checksOwner).
func ownerChecked(dial dialFunc) dialFunc {
	if !checksOwner {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		uid, err := daemonOwner(conn)
		if err == nil && uid != os.Geteuid() && uid != 0 {
			err = fmt.Errorf("it belongs to user %d, not to you or root", uid)
		}
		if err != nil {
			_ = conn.Close() // refused: the error says why
			return nil, fmt.Errorf("client: the token in the data directory is not sent to %s: %w (another user may be listening where the daemon should be; pass a token to send one anyway)", conn.RemoteAddr(), err)
		}
		return conn, nil
	}
}
