// Package pgwire is a small client of PostgreSQL's wire protocol (version
// 3), as much of it as the PostgreSQL store uses: start-up with TLS
// (sslmode as libpq reads it) and password, MD5 or SCRAM-SHA-256
// authentication; simple queries; the extended protocol with every
// parameter and result column in the binary format, one statement or a
// pipelined batch under one Sync (one implicit transaction, one round
// trip); named prepared statements; LISTEN/NOTIFY. Every message the server
// sends is bounded in size and parsed defensively: a malformed one ends the
// connection.
//
// A Conn is used by one goroutine at a time. When a call's context ends,
// the connection is closed under it and the server is asked (a
// CancelRequest) to cancel the statement it runs, which would otherwise
// run on, holding its locks, until it wrote to the closed connection.
package pgwire

import (
	"bufio"
	"context"
	"crypto/md5" //nolint:gosec // PostgreSQL's md5 authentication is defined with it
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Error is an error the server sent (an ErrorResponse).
type Error struct {
	Severity       string
	Code           string // SQLSTATE
	Message        string
	Detail         string
	Hint           string
	Where          string
	SchemaName     string
	TableName      string
	ColumnName     string
	ConstraintName string
}

func (e *Error) Error() string {
	return e.Severity + ": " + e.Message + " (SQLSTATE " + e.Code + ")"
}

// fatal reports whether the server ends the session after e.
func (e *Error) fatal() bool { return e.Severity == "FATAL" || e.Severity == "PANIC" }

// CommandTag is a CommandComplete's tag, such as "INSERT 0 1".
type CommandTag string

// RowsAffected is the tag's count of rows (0 when it has none).
func (t CommandTag) RowsAffected() int64 {
	i := strings.LastIndexByte(string(t), ' ')
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseInt(string(t[i+1:]), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// Result is one statement's rows (binary columns, nil for NULL) and tag.
type Result struct {
	Rows [][][]byte
	Tag  CommandTag
}

// Conn is one connection.
type Conn struct {
	cfg    *Config
	nc     net.Conn
	br     *bufio.Reader
	rbuf   []byte
	wbuf   []byte
	tx     byte // the last ReadyForQuery's status: 'I', 'T' or 'E'
	closed bool

	// Where the connection goes and its cancel key, for a CancelRequest.
	network, addr string
	cancelKey     []byte // process id and secret, as BackendKeyData sent them
}

// Connect opens a connection to the first of cfg's hosts that accepts it.
func Connect(ctx context.Context, cfg *Config) (*Conn, error) {
	var errs []error
	for _, h := range cfg.Hosts {
		c, err := connectHost(ctx, cfg, h)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("pgwire: no host to connect to")
	}
	return nil, errors.Join(errs...)
}

func connectHost(ctx context.Context, cfg *Config, h Host) (*Conn, error) {
	if cfg.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.ConnectTimeout)
		defer cancel()
	}
	unix := strings.HasPrefix(h.Host, "/")
	useTLS := !unix && cfg.SSLMode != "disable" && cfg.SSLMode != "allow"
	c, err := dial(ctx, cfg, h, useTLS)
	if err == nil || ctx.Err() != nil || unix {
		return c, err
	}
	var tlsErr *tlsFailure
	var se *Error
	switch {
	case cfg.SSLMode == "prefer" && errors.As(err, &tlsErr):
		// prefer: TLS if it works, else in the clear, as libpq does.
		return dial(ctx, cfg, h, false)
	case cfg.SSLMode == "allow" && errors.As(err, &se):
		// allow: in the clear, else TLS if the server insists.
		return dial(ctx, cfg, h, true)
	}
	return nil, err
}

// tlsFailure is a failed TLS negotiation.
type tlsFailure struct{ err error }

func (e *tlsFailure) Error() string { return "TLS: " + e.err.Error() }
func (e *tlsFailure) Unwrap() error { return e.err }

func dial(ctx context.Context, cfg *Config, h Host, useTLS bool) (_ *Conn, err error) {
	network, addr := "tcp", net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port)))
	if strings.HasPrefix(h.Host, "/") {
		network, addr = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", h.Host, h.Port)
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("pgwire: connect to %s: %w", addr, err)
	}
	c := &Conn{cfg: cfg, nc: nc, rbuf: make([]byte, 0, 8192), network: network, addr: addr}
	defer func() {
		if err != nil {
			c.fail()
			err = fmt.Errorf("pgwire: connect to %s: %w", addr, err)
		}
	}()
	defer c.watch(ctx)(&err)
	if useTLS {
		if err := c.startTLS(ctx, h); err != nil {
			return nil, err
		}
	}
	c.br = bufio.NewReaderSize(c.nc, 8192)
	if err := c.startup(); err != nil {
		return nil, err
	}
	return c, nil
}

// startTLS asks the server for TLS and negotiates it.
func (c *Conn) startTLS(ctx context.Context, h Host) error {
	var req [8]byte
	binary.BigEndian.PutUint32(req[0:], 8)
	binary.BigEndian.PutUint32(req[4:], 80877103) // SSLRequest
	if _, err := c.nc.Write(req[:]); err != nil {
		return err
	}
	var ans [1]byte
	if _, err := io.ReadFull(c.nc, ans[:]); err != nil {
		return err
	}
	switch ans[0] {
	case 'S':
	case 'N':
		if c.cfg.SSLMode == "prefer" {
			return nil // in the clear, on this connection
		}
		return &tlsFailure{fmt.Errorf("the server does not accept TLS (sslmode=%s)", c.cfg.SSLMode)}
	default:
		return protoErr("answer %q to SSLRequest", ans[0])
	}
	tc := c.cfg.TLS.Clone()
	if !c.cfg.noSNI || c.cfg.SSLMode == "verify-full" {
		tc.ServerName = h.Host // verified against the certificate with verify-full
	}
	t := tls.Client(c.nc, tc)
	if err := t.HandshakeContext(ctx); err != nil {
		return &tlsFailure{err}
	}
	c.nc = t
	return nil
}

// startup sends the start-up message and authenticates.
func (c *Conn) startup() error {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint32(b, 196608) // protocol 3.0
	b = appendCString(appendCString(b, "user"), c.cfg.User)
	b = appendCString(appendCString(b, "database"), c.cfg.Database)
	for k, v := range c.cfg.Params {
		b = appendCString(appendCString(b, k), v)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	if err := c.write(b); err != nil {
		return err
	}
	var sc *scram
	authed := false
	for {
		typ, body, err := c.recv()
		if err != nil {
			return err
		}
		switch typ {
		case 'R':
			kind, data, err := parseAuth(body)
			if err != nil {
				return err
			}
			if kind == 0 {
				if sc != nil && !sc.verified {
					return errors.New("SCRAM: the server skipped its proof")
				}
				authed = true
				continue
			}
			if err := c.authenticate(kind, data, &sc); err != nil {
				return err
			}
		case 'K':
			if len(body) < 8 || len(body) > 4+256 {
				return protoErr("cancel key of %d bytes", len(body))
			}
			c.cancelKey = append([]byte(nil), body...)
		case 'v': // protocol negotiation: we ask for nothing optional
		case 'Z':
			if !authed || len(body) != 1 {
				return protoErr("ready before authentication")
			}
			c.tx = body[0]
			return nil
		case 'E':
			e, err := parseError(body)
			if err != nil {
				return err
			}
			return e
		default:
			return protoErr("message %q during start-up", typ)
		}
	}
}

// authenticate answers one authentication request.
func (c *Conn) authenticate(kind uint32, data []byte, sc **scram) error {
	pw := c.cfg.Password
	if kind != 11 && kind != 12 && pw == "" {
		return errors.New("the server asks for a password and none is set (DSN, PGPASSWORD or ~/.pgpass)")
	}
	switch kind {
	case 3: // cleartext
		return c.sendPassword(appendCString(nil, pw))
	case 5: // md5
		if len(data) != 4 {
			return protoErr("md5 salt of %d bytes", len(data))
		}
		inner := md5.Sum([]byte(pw + c.cfg.User)) //nolint:gosec // the protocol's
		outer := md5.Sum(append([]byte(hex.EncodeToString(inner[:])), data...))
		return c.sendPassword(appendCString(nil, "md5"+hex.EncodeToString(outer[:])))
	case 10: // SASL
		ms, err := parseSASLMechanisms(data)
		if err != nil {
			return err
		}
		found := false
		for _, m := range ms {
			found = found || m == "SCRAM-SHA-256"
		}
		if !found {
			return fmt.Errorf("the server offers SASL mechanisms %v, not SCRAM-SHA-256", ms)
		}
		s, err := newSCRAM(pw)
		if err != nil {
			return err
		}
		*sc = s
		first := s.first()
		b := appendCString(nil, "SCRAM-SHA-256")
		b = binary.BigEndian.AppendUint32(b, uint32(len(first)))
		return c.sendPassword(append(b, first...))
	case 11: // SASL continue
		if *sc == nil || (*sc).serverSig != nil {
			return protoErr("unexpected SASL continuation")
		}
		final, err := (*sc).final(data)
		if err != nil {
			return err
		}
		return c.sendPassword(final)
	case 12: // SASL final
		if *sc == nil || (*sc).serverSig == nil {
			return protoErr("unexpected SASL final message")
		}
		return (*sc).verify(data)
	}
	return fmt.Errorf("authentication method %d is not supported (password, md5 and scram-sha-256 are)", kind)
}

// sendPassword sends a PasswordMessage (or a SASL response) of body.
func (c *Conn) sendPassword(body []byte) error {
	b, start := msgStart(nil, 'p')
	b, err := msgEnd(append(b, body...), start)
	if err != nil {
		return err
	}
	return c.write(b)
}

// watch closes the connection under a call when ctx ends before it
// returns; the returned function, deferred with the call's error, ends the
// watch and reports the context's end.
func (c *Conn) watch(ctx context.Context) func(*error) {
	if ctx.Done() == nil {
		return func(*error) {}
	}
	nc := c.nc // a TLS connection's deadline is its socket's
	key := c.cancelKey
	stop := context.AfterFunc(ctx, func() {
		_ = nc.SetDeadline(time.Unix(1, 0))
		// The server ends the statement running for us too, which would
		// otherwise run (holding its locks) until it wrote to the closed
		// connection.
		c.sendCancel(key)
	})
	return func(err *error) {
		if stop() {
			return
		}
		c.fail()
		if *err != nil {
			*err = fmt.Errorf("%w: %w", ctx.Err(), *err)
		}
	}
}

// sendCancel asks the server, on a connection of its own, to cancel the
// statement of the session whose cancel key is key (best effort, bounded
// in time; nothing when the session has no key yet).
func (c *Conn) sendCancel(key []byte) {
	if key == nil {
		return
	}
	// Detached from the call's context, which has just ended: the cancel
	// has its own bound.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, c.network, c.addr)
	if err != nil {
		return
	}
	defer nc.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(8+len(key)))
	b = binary.BigEndian.AppendUint32(b, 80877102) // CancelRequest
	_, _ = nc.Write(append(b, key...))
	_, _ = nc.Read(make([]byte, 1)) // the server closes it once done
}

// fail closes the connection after an error that leaves it unusable.
func (c *Conn) fail() {
	if !c.closed {
		c.closed = true
		_ = c.nc.Close()
	}
}

func (c *Conn) write(b []byte) error {
	if c.closed {
		return net.ErrClosed
	}
	if _, err := c.nc.Write(b); err != nil {
		c.fail()
		return err
	}
	return nil
}

// recv reads the next message, handling those that may come at any time:
// notices and parameter changes are dropped, notifications go to
// OnNotification.
func (c *Conn) recv() (byte, []byte, error) {
	if c.closed {
		return 0, nil, net.ErrClosed
	}
	for {
		typ, body, err := readMessage(c.br, c.rbuf, c.cfg.MaxRow)
		if err != nil {
			c.fail()
			return 0, nil, err
		}
		switch typ {
		case 'N', 'S':
			continue
		case 'A':
			n, err := parseNotification(body)
			if err != nil {
				c.fail()
				return 0, nil, err
			}
			if c.cfg.OnNotification != nil {
				c.cfg.OnNotification(n)
			}
			return typ, body, nil
		}
		return typ, body, nil
	}
}

// IsClosed reports whether the connection has failed or was closed.
func (c *Conn) IsClosed() bool { return c.closed }

// TxStatus is the transaction status of the last ReadyForQuery: 'I' idle,
// 'T' in a transaction, 'E' in a failed one.
func (c *Conn) TxStatus() byte { return c.tx }

// Close ends the session politely and closes the connection.
func (c *Conn) Close(ctx context.Context) error {
	if c.closed {
		return nil
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.nc.SetWriteDeadline(d)
	}
	_, _ = c.nc.Write(appendSimple(nil, 'X'))
	c.fail()
	return nil
}

// results reads the results of the statements sent, up to ReadyForQuery;
// the error is the first statement's error, if any.
func (c *Conn) results(want int) ([]*Result, error) {
	results := make([]*Result, 0, max(want, 0))
	cur := &Result{}
	var first error
	for {
		typ, body, err := c.recv()
		if err != nil {
			return nil, err
		}
		switch typ {
		case '1', '2', '3', 'n', 't', 'T', 'A':
		case 'D':
			if first != nil {
				continue
			}
			row, err := parseDataRow(body)
			if err != nil {
				c.fail()
				return nil, err
			}
			cur.Rows = append(cur.Rows, row)
		case 'C':
			tag, err := parseCommandComplete(body)
			if err != nil {
				c.fail()
				return nil, err
			}
			cur.Tag = tag
			results = append(results, cur)
			cur = &Result{}
		case 'I':
			results = append(results, cur)
			cur = &Result{}
		case 'E':
			e, err := parseError(body)
			if err != nil {
				c.fail()
				return nil, err
			}
			if e.fatal() {
				c.fail()
				return nil, e
			}
			if first == nil {
				first = e
			}
		case 'Z':
			if len(body) != 1 {
				c.fail()
				return nil, protoErr("malformed ReadyForQuery")
			}
			c.tx = body[0]
			if first != nil {
				return nil, first
			}
			if want >= 0 && len(results) != want {
				c.fail()
				return nil, protoErr("%d results for %d statements", len(results), want)
			}
			return results, nil
		default:
			// COPY and anything else this client never asks for.
			c.fail()
			return nil, protoErr("unexpected message %q", typ)
		}
	}
}

// Exec runs sql, one or more statements, with the simple protocol; rows
// are discarded.
func (c *Conn) Exec(ctx context.Context, sql string) (err error) {
	defer c.watch(ctx)(&err)
	if err := c.write(appendQuery(c.wbuf[:0], sql)); err != nil {
		return err
	}
	_, err = c.results(-1)
	return err
}

// Prepare prepares sql as the statement name, with parameter types oids.
func (c *Conn) Prepare(ctx context.Context, name, sql string, oids []uint32) (err error) {
	defer c.watch(ctx)(&err)
	b, err := appendParse(c.wbuf[:0], name, sql, oids)
	if err != nil {
		return err
	}
	if err := c.write(appendSimple(b, 'S')); err != nil {
		return err
	}
	_, err = c.results(0)
	return err
}

// ExecParams runs one statement with parameters vals of types oids (0:
// the server infers it), every parameter and column binary.
func (c *Conn) ExecParams(ctx context.Context, sql string, vals [][]byte, oids []uint32) (*Result, error) {
	var b Batch
	b.Queue(sql, vals, oids)
	rs, err := c.ExecBatch(ctx, &b)
	if err != nil {
		return nil, err
	}
	return rs[0], nil
}

// Batch is statements sent together, under one Sync: one implicit
// transaction (unless they open one) and one round trip.
type Batch struct {
	buf []byte
	n   int
	err error
}

// Queue adds a statement with parameters vals of types oids.
func (b *Batch) Queue(sql string, vals [][]byte, oids []uint32) {
	if b.err != nil {
		return
	}
	if b.buf, b.err = appendParse(b.buf, "", sql, oids); b.err != nil {
		return
	}
	b.queue("", vals)
}

// QueuePrepared adds a run of the prepared statement name.
func (b *Batch) QueuePrepared(name string, vals [][]byte) {
	if b.err != nil {
		return
	}
	b.queue(name, vals)
}

func (b *Batch) queue(name string, vals [][]byte) {
	if b.buf, b.err = appendBind(b.buf, name, vals); b.err != nil {
		return
	}
	b.buf = appendExecute(b.buf)
	b.n++
}

// Len is the number of statements queued.
func (b *Batch) Len() int { return b.n }

// ExecBatch sends b and returns a result per statement, or the first
// statement's error (the server then skipped the rest and rolled the
// implicit transaction back).
func (c *Conn) ExecBatch(ctx context.Context, b *Batch) (_ []*Result, err error) {
	if b.err != nil {
		return nil, b.err
	}
	defer c.watch(ctx)(&err)
	if err := c.write(appendSimple(b.buf, 'S')); err != nil {
		return nil, err
	}
	return c.results(b.n)
}

// WaitForNotification reads until a notification arrives (passed to
// OnNotification) or ctx ends.
func (c *Conn) WaitForNotification(ctx context.Context) (err error) {
	defer c.watch(ctx)(&err)
	for {
		typ, body, err := c.recv()
		if err != nil {
			return err
		}
		switch typ {
		case 'A':
			return nil
		case 'E':
			e, err := parseError(body)
			if err != nil {
				c.fail()
				return err
			}
			c.fail()
			return e
		default:
			c.fail()
			return protoErr("unexpected message %q while idle", typ)
		}
	}
}
