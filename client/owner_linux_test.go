package client

import (
	"encoding/binary"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// nobody is the user another local user's listener is made as.
const nobody = 65534

// listenAs listens with the effective user uid, on one thread of this
// process: the socket belongs to uid as a socket of another user's process
// would. The thread is left locked, and so discarded, if it cannot be
// given back its user.
func listenAs(t *testing.T, uid int, network, addr string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		const keep = ^uintptr(0) // -1: leave this id as it is
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
			ch <- result{err: e}
			return
		}
		ln, err := net.Listen(network, addr)
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, keep, 0, keep); e == 0 {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listen %s %s as %d: %v", network, addr, uid, r.err)
	}
	return r.ln
}

// TestLocalTokenOtherUser is another local user listening where the
// daemon should be (its port, while it is down): a client sending the
// token of the data directory refuses the connection and the listener
// never sees the token; an explicit token is still sent; a listener of
// this user gets the token.
func TestLocalTokenOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make a socket of another user")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, TokenFileName), []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(k string) string {
		if k == "AGENTBOX_DATA_DIR" {
			return dir
		}
		return ""
	}
	sockDir, err := os.MkdirTemp("", "agentbox-owner-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	if err := os.Chmod(sockDir, 0o777); err != nil {
		t.Fatal(err)
	}
	type listener struct{ network, addr string }
	listeners := []listener{{"tcp", "127.0.0.1:0"}, {"unix", filepath.Join(sockDir, "d.sock")}}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		_ = ln.Close()
		listeners = append(listeners, listener{"tcp6", "[::1]:0"})
	}
	for _, l := range listeners {
		for _, uid := range []int{nobody, 0} {
			ln := listenAs(t, uid, l.network, l.addr)
			var seen atomic.Value
			seen.Store("")
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen.Store(r.Header.Get("Authorization"))
				_, _ = w.Write([]byte(`{"status":"ok"}`))
			})}
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = srv.Serve(ln)
			}()
			url := "http://" + ln.Addr().String()
			if l.network == "unix" {
				url = "unix://" + l.addr
			}
			c, err := New(url, WithLocalToken(env))
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Health(t.Context())
			switch {
			case uid == nobody && (err == nil || !strings.Contains(err.Error(), "belongs to user 65534")):
				t.Errorf("%s as user %d: %v, want a refusal naming the user", url, uid, err)
			case uid != nobody && err != nil:
				t.Errorf("%s as user %d: %v", url, uid, err)
			}
			if got := seen.Load().(string); uid == nobody && got != "" {
				t.Errorf("%s as user %d got the token: %q", url, uid, got)
			}
			c.CloseIdleConnections()

			// An explicit token is the caller's choice: sent unchecked.
			c, err = New(url, WithLocalToken(env), WithToken("given"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Health(t.Context()); err != nil || seen.Load().(string) != "Bearer given" {
				t.Errorf("%s as user %d with a token: %v, saw %q", url, uid, err, seen.Load())
			}
			c.CloseIdleConnections()
			_ = srv.Close()
			<-done
			if l.network == "unix" {
				_ = os.Remove(l.addr)
			}
		}
	}
}

func TestParseProcAddr(t *testing.T) {
	t.Parallel()
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the examples are of a little-endian host")
	}
	for in, want := range map[string]string{
		"0100007F:1E61":                         "127.0.0.1:7777",
		"0000000000000000FFFF00000100007F:1E61": "127.0.0.1:7777", // IPv4-mapped, on a dual-stack listener
		"00000000000000000000000001000000:0050": "[::1]:80",
		"B80D0120000000000000000001000000:01BB": "[2001:db8::1]:443",
	} {
		got, err := parseProcAddr(in)
		if err != nil || got != netip.MustParseAddrPort(want) {
			t.Errorf("parseProcAddr(%s) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:", "01007F:1E61", "ZZ00007F:1E61", "0100007F:10000"} {
		if got, err := parseProcAddr(bad); err == nil {
			t.Errorf("parseProcAddr(%q) = %v, want an error", bad, got)
		}
	}
}
