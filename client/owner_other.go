//go:build !linux

package client

import (
	"errors"
	"net"
)

// checksOwner: this system cannot tell who owns a local daemon's socket,
// so a token from the data directory is sent to whatever listens there
// (see WithLocalToken).
const checksOwner = false

func daemonOwner(net.Conn) (int, error) {
	return 0, errors.New("the owner of a daemon's socket is known on Linux only")
}
