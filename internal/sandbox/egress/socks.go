package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"time"
)

// SOCKS5 (RFC 1928), the subset a sandboxed client needs: no
// authentication, CONNECT, and addresses as IPv4, IPv6 or a domain name
// (socks5h: the proxy resolves). BIND and UDP ASSOCIATE are refused.
const (
	socksVersion = 0x05

	socksNoAuth       = 0x00
	socksNoAcceptable = 0xff

	socksConnect = 0x01

	atypIPv4   = 0x01
	atypDomain = 0x03
	atypIPv6   = 0x04

	repSuccess         = 0x00
	repGeneralFailure  = 0x01
	repNotAllowed      = 0x02
	repNetUnreachable  = 0x03
	repHostUnreachable = 0x04
	repRefused         = 0x05
	repCmdUnsupported  = 0x07
	repAtypUnsupported = 0x08
)

// socksError is a handshake failure with the reply code to send.
type socksError struct {
	rep byte
	msg string
}

func (e *socksError) Error() string { return "socks5: " + e.msg }

// ReadSOCKSGreeting reads a client's greeting (VER NMETHODS METHODS) and
// returns the offered methods.
func ReadSOCKSGreeting(r io.Reader) ([]byte, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("socks5: greeting: %w", err)
	}
	if hdr[0] != socksVersion {
		return nil, fmt.Errorf("socks5: version %d", hdr[0])
	}
	if hdr[1] == 0 {
		return nil, errors.New("socks5: no methods offered")
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return nil, fmt.Errorf("socks5: methods: %w", err)
	}
	return methods, nil
}

// ReadSOCKSRequest reads a request (VER CMD RSV ATYP DST.ADDR DST.PORT)
// and returns its destination, normalised like every other target (a
// domain that is an address literal counts as that address). On failure
// the error is a *socksError carrying the reply code.
func ReadSOCKSRequest(r io.Reader) (Target, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Target{}, &socksError{repGeneralFailure, "request: " + err.Error()}
	}
	if hdr[0] != socksVersion {
		return Target{}, &socksError{repGeneralFailure, fmt.Sprintf("request version %d", hdr[0])}
	}
	if hdr[2] != 0 {
		return Target{}, &socksError{repGeneralFailure, "reserved byte is not zero"}
	}
	var t Target
	switch hdr[3] {
	case atypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Target{}, &socksError{repGeneralFailure, "address: " + err.Error()}
		}
		t.Addr = netip.AddrFrom4(b)
	case atypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Target{}, &socksError{repGeneralFailure, "address: " + err.Error()}
		}
		t.Addr = netip.AddrFrom16(b).Unmap()
	case atypDomain:
		var n [1]byte
		if _, err := io.ReadFull(r, n[:]); err != nil || n[0] == 0 {
			return Target{}, &socksError{repGeneralFailure, "domain length"}
		}
		b := make([]byte, n[0])
		if _, err := io.ReadFull(r, b); err != nil {
			return Target{}, &socksError{repGeneralFailure, "domain: " + err.Error()}
		}
		name, addr, err := ParseHost(string(b))
		if err != nil {
			return Target{}, &socksError{repHostUnreachable, err.Error()}
		}
		t.Host, t.Addr = name, addr
	default:
		return Target{}, &socksError{repAtypUnsupported, fmt.Sprintf("address type %d", hdr[3])}
	}
	var p [2]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		return Target{}, &socksError{repGeneralFailure, "port: " + err.Error()}
	}
	t.Port = binary.BigEndian.Uint16(p[:])
	if t.Port == 0 {
		return Target{}, &socksError{repHostUnreachable, "port 0"}
	}
	if hdr[1] != socksConnect {
		return t, &socksError{repCmdUnsupported, fmt.Sprintf("command %d (only CONNECT)", hdr[1])}
	}
	return t, nil
}

// socksReply is a reply with an all-zero bound address: the client needs
// none, and the proxy's own addresses are not the sandbox's business.
func socksReply(rep byte) []byte { return []byte{socksVersion, rep, 0, atypIPv4, 0, 0, 0, 0, 0, 0} }

// socks serves one SOCKS5 client connection.
func (g *Gate) socks(c *bufConn) {
	methods, err := ReadSOCKSGreeting(c)
	if err != nil {
		return
	}
	hasNoAuth := false
	for _, m := range methods {
		hasNoAuth = hasNoAuth || m == socksNoAuth
	}
	if !hasNoAuth {
		_, _ = c.Write([]byte{socksVersion, socksNoAcceptable})
		return
	}
	if _, err := c.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return
	}
	t, err := ReadSOCKSRequest(c)
	if err != nil {
		var se *socksError
		if errors.As(err, &se) {
			_, _ = c.Write(socksReply(se.rep))
		}
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	req := request{via: "socks5", target: t, client: c}
	d := g.decide(g.ctx, req)
	if !d.allow {
		_, _ = c.Write(socksReply(repNotAllowed))
		return
	}
	if g.intercepts(t) {
		if _, err := c.Write(socksReply(repSuccess)); err != nil {
			return
		}
		g.intercept(c, req, d)
		return
	}
	ctx, cancel := context.WithTimeout(g.ctx, g.s.opts.DialTimeout+5*time.Second)
	up, addr, err := g.dialTarget(ctx, t)
	cancel()
	if err != nil {
		var den *denied
		if errors.As(err, &den) {
			d.allow, d.by, d.rule, d.reason = false, "policy", den.rule, den.reason
			g.deny(req, d, den.addr)
			_, _ = c.Write(socksReply(repNotAllowed))
			return
		}
		// Allowed, and failed upstream.
		g.s.metrics.decisions.WithLabelValues(req.via, "allow", d.by).Inc()
		_, _ = c.Write(socksReply(dialReply(err)))
		return
	}
	g.allowed(req, d, addr.String())
	if _, err := c.Write(socksReply(repSuccess)); err != nil {
		_ = up.Close()
		return
	}
	splice(g.ctx, c, up)
}

// dialReply maps a dial error onto a reply code.
func dialReply(err error) byte {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return repRefused
	case errors.Is(err, syscall.ENETUNREACH):
		return repNetUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH):
		return repHostUnreachable
	}
	return repGeneralFailure
}
