package pgwire

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// serverURL is the test server's DSN (scripts/postgres: scram-sha-256
// authentication, no TLS), or the test is skipped.
func serverURL(t *testing.T) *url.URL {
	t.Helper()
	dsn := os.Getenv("AGENTBOX_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("AGENTBOX_TEST_POSTGRES is not set: no PostgreSQL server to test against (scripts/postgres starts one)")
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func connect(t *testing.T, dsn string) *Conn {
	t.Helper()
	cfg, err := ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Connect(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func TestQueryTypes(t *testing.T) {
	c := connect(t, serverURL(t).String())
	res, err := c.ExecParams(t.Context(), "SELECT $1::int8, $2::text, $3::bytea, NULL::text, ''::bytea",
		[][]byte{binary.BigEndian.AppendUint64(nil, 42), []byte("héllo"), {0, 1, 2}}, []uint32{20, 25, 17})
	if err != nil {
		t.Fatal(err)
	}
	row := res.Rows[0]
	if binary.BigEndian.Uint64(row[0]) != 42 || string(row[1]) != "héllo" || string(row[2]) != "\x00\x01\x02" || row[3] != nil || row[4] == nil || len(row[4]) != 0 {
		t.Errorf("row %q", row)
	}
	if res.Tag != "SELECT 1" || c.TxStatus() != 'I' {
		t.Errorf("tag %q, status %c", res.Tag, c.TxStatus())
	}
}

func TestBatchIsOneTransaction(t *testing.T) {
	c := connect(t, serverURL(t).String())
	table := fmt.Sprintf("pgwire_batch_%d", time.Now().UnixNano())
	if err := c.Exec(t.Context(), "CREATE TABLE "+table+" (k text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Exec(context.Background(), "DROP TABLE "+table) })
	ins := "INSERT INTO " + table + " VALUES ($1)"
	var b Batch
	b.Queue(ins, [][]byte{[]byte("a")}, []uint32{25})
	b.Queue(ins, [][]byte{[]byte("b")}, []uint32{25})
	b.Queue(ins, [][]byte{[]byte("a")}, []uint32{25}) // duplicate: the whole batch rolls back
	_, err := c.ExecBatch(t.Context(), &b)
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != "23505" {
		t.Fatalf("ExecBatch: %v, want SQLSTATE 23505", err)
	}
	if c.IsClosed() || c.TxStatus() != 'I' {
		t.Fatalf("after a statement error: closed %v, status %c", c.IsClosed(), c.TxStatus())
	}
	res, err := c.ExecParams(t.Context(), "SELECT count(*) FROM "+table, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.BigEndian.Uint64(res.Rows[0][0]); n != 0 {
		t.Errorf("%d rows after a failed batch, want 0", n)
	}
	// A prepared statement, in a batch of its own.
	if err := c.Prepare(t.Context(), "ins", ins, []uint32{25}); err != nil {
		t.Fatal(err)
	}
	var b2 Batch
	b2.QueuePrepared("ins", [][]byte{[]byte("x")})
	b2.QueuePrepared("ins", [][]byte{[]byte("y")})
	rs, err := c.ExecBatch(t.Context(), &b2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[1].Tag.RowsAffected() != 1 {
		t.Errorf("results %+v", rs)
	}
}

func TestNotify(t *testing.T) {
	dsn := serverURL(t).String()
	cfg, err := ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Notification, 1)
	cfg.OnNotification = func(n *Notification) { got <- n }
	l, err := Connect(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if err := l.Exec(t.Context(), "LISTEN pgwire_test"); err != nil {
		t.Fatal(err)
	}
	c := connect(t, dsn)
	if err := c.Exec(t.Context(), "NOTIFY pgwire_test, 'hello'"); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitForNotification(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n.Channel != "pgwire_test" || n.Payload != "hello" {
		t.Errorf("notification %+v", n)
	}
	// A wait whose context ends closes the connection and says why.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.WaitForNotification(ctx); !errors.Is(err, context.Canceled) || !l.IsClosed() {
		t.Errorf("WaitForNotification with an ended context: %v, closed %v", err, l.IsClosed())
	}
}

func TestCancelClosesConn(t *testing.T) {
	c := connect(t, serverURL(t).String())
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := c.ExecParams(ctx, "SELECT pg_sleep(60) -- pgwire cancel test", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) || !c.IsClosed() {
		t.Fatalf("ExecParams past its deadline: %v, closed %v", err, c.IsClosed())
	}
	// The statement was cancelled on the server too: it does not run on
	// for its minute (30 s is a bound on the wait, far above the few
	// milliseconds a cancel takes and far below the minute).
	other := connect(t, serverURL(t).String())
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := other.ExecParams(t.Context(), "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pgwire cancel test' AND pid <> pg_backend_pid()", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if binary.BigEndian.Uint64(res.Rows[0][0]) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the statement still runs on the server 30 s after its context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRowBound(t *testing.T) {
	cfg, err := ParseConfig(serverURL(t).String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxRow = 1000
	c, err := Connect(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.ExecParams(t.Context(), "SELECT repeat('x', 500)", nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err = c.ExecParams(t.Context(), "SELECT repeat('x', 5000)", nil, nil)
	if !errors.Is(err, errProtocol) || !c.IsClosed() {
		t.Fatalf("a row above MaxRow: %v, closed %v", err, c.IsClosed())
	}
}

func TestAuthentication(t *testing.T) {
	u := serverURL(t)
	pw, _ := u.User.Password()
	wrong := *u
	wrong.User = url.UserPassword(u.User.Username(), "not-"+pw)
	none := *u
	none.User = url.User(u.User.Username())
	clearEnv(t)
	tests := []struct {
		name, dsn, want string
	}{
		{"scram", u.String(), ""},
		{"wrong password", wrong.String(), "28P01"},
		{"no password", none.String(), "none is set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Connect(t.Context(), cfg)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				_ = c.Close(t.Context())
				return
			}
			if err == nil {
				_ = c.Close(t.Context())
				t.Fatal("connected")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), pw) {
				t.Errorf("error shows the password: %v", err)
			}
		})
	}
}

// TestSSLModes: against the test server, which has no TLS, prefer falls
// back to the clear and require and stricter refuse; behind a TLS proxy
// holding a certificate of a test CA, each mode verifies what it names.
func TestSSLModes(t *testing.T) {
	u := serverURL(t)
	clearEnv(t)
	_, caPEM, serverCert := testPKI(t, "localhost")
	dir := t.TempDir()
	root := filepath.Join(dir, "root.crt")
	if err := os.WriteFile(root, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	proxy := tlsProxy(t, u.Host, serverCert)
	_, proxyPort, _ := net.SplitHostPort(proxy)
	with := func(host, query string) string {
		v := *u
		v.Host = host
		v.RawQuery = query
		return v.String()
	}
	tests := []struct {
		name, dsn string
		tls       bool   // the connection is encrypted
		want      string // an error containing this, or "" for success
	}{
		{"plain server, prefer", with(u.Host, "sslmode=prefer"), false, ""},
		{"plain server, require", with(u.Host, "sslmode=require"), false, "does not accept TLS"},
		{"plain server, verify-full", with(u.Host, "sslmode=verify-full&sslrootcert="+root), false, "does not accept TLS"},
		{"proxy, require", with(proxy, "sslmode=require"), true, ""},
		{"proxy, prefer", with(proxy, "sslmode=prefer"), true, ""},
		{"proxy, verify-full", with("localhost:"+proxyPort, "sslmode=verify-full&sslrootcert="+root), true, ""},
		{"proxy, verify-full, wrong name", with(proxy, "sslmode=verify-full&sslrootcert="+root), false, "certificate"},
		{"proxy, verify-ca, wrong name", with(proxy, "sslmode=verify-ca&sslrootcert="+root), true, ""},
		{"proxy, verify-ca, other CA", with(proxy, "sslmode=verify-ca&sslrootcert="+otherCA(t, dir)), false, "certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			c, err := Connect(t.Context(), cfg)
			if tc.want != "" {
				if err == nil {
					_ = c.Close(t.Context())
					t.Fatal("connected")
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(context.Background())
			if _, ok := c.nc.(*tls.Conn); ok != tc.tls {
				t.Errorf("encrypted %v, want %v", ok, tc.tls)
			}
			if _, err := c.ExecParams(t.Context(), "SELECT 1", nil, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// testPKI returns a CA, its PEM and a server certificate it signed for
// name.
func testPKI(t *testing.T, name string) (*x509.Certificate, []byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pgwire test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func otherCA(t *testing.T, dir string) string {
	_, p, _ := testPKI(t, "localhost")
	path := filepath.Join(dir, "other.crt")
	if err := os.WriteFile(path, p, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tlsProxy listens on 127.0.0.1, accepts PostgreSQL's SSLRequest, ends TLS
// with cert and relays the session to the real server at addr in the
// clear; it returns its address.
func tlsProxy(t *testing.T, addr string, cert tls.Certificate) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer nc.Close()
				var req [8]byte
				if _, err := io.ReadFull(nc, req[:]); err != nil || binary.BigEndian.Uint32(req[4:]) != 80877103 {
					return
				}
				if _, err := nc.Write([]byte{'S'}); err != nil {
					return
				}
				tc := tls.Server(nc, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
				if err := tc.Handshake(); err != nil {
					return
				}
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, tc); _ = up.Close() }()
				_, _ = io.Copy(tc, up)
			})
		}
	})
	return ln.Addr().String()
}

// TestSCRAMNonASCII: a role whose password needs SASLprep (the server
// prepares it when it is set) logs in, and one SASLprep leaves as it is
// too.
func TestSCRAMNonASCII(t *testing.T) {
	u := serverURL(t)
	clearEnv(t)
	admin := connect(t, u.String())
	for i, pw := range []string{
		"päss wörd",           // NFC already
		"\ufb01x\u00adé",      // ligature to "fi" (NFKC), soft hyphen mapped to nothing
		"x\u00a0y\u2168",      // non-ASCII space to a space, Roman numeral nine to "IX"
		"bell\u0007é",         // a control character: prohibited, so used as it is
		"\u0627\u0031\u0628x", // right-to-left with a left-to-right letter: used as it is
	} {
		role := fmt.Sprintf("pgwire_scram_%d_%d", time.Now().UnixNano(), i)
		quoted := "'" + strings.ReplaceAll(pw, "'", "''") + "'"
		if err := admin.Exec(t.Context(), "SET password_encryption = 'scram-sha-256'; CREATE ROLE "+role+" LOGIN PASSWORD "+quoted); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = admin.Exec(context.Background(), "DROP ROLE "+role) })
		v := *u
		v.User = url.UserPassword(role, pw)
		cfg, err := ParseConfig(v.String())
		if err != nil {
			t.Fatal(err)
		}
		c, err := Connect(t.Context(), cfg)
		if err != nil {
			t.Errorf("password %q: %v", pw, err)
			continue
		}
		_ = c.Close(t.Context())
	}
}

func TestSASLprep(t *testing.T) {
	// RFC 4013's examples, and the cases PostgreSQL uses as they are.
	for in, want := range map[string]string{
		"I\u00adX":     "IX",
		"user":         "user",
		"USER":         "USER",
		"\u00aa":       "a",
		"\u2168":       "IX",
		"a\u0007":      "a\u0007",      // ASCII: itself
		"é\u0007":      "é\u0007",      // prohibited: itself
		"\u0627\u0031": "\u0627\u0031", // must end right-to-left: itself
		"\u0627\u0628": "\u0627\u0628",
		"\xff\u00aa":   "\xff\u00aa", // not UTF-8: itself
	} {
		if got := saslprep(in); got != want {
			t.Errorf("saslprep(%q) = %q, want %q", in, got, want)
		}
	}
}
