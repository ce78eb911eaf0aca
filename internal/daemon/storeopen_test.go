package daemon_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"
)

// TestStoreBadDSN: a --store that is neither sqlite nor a PostgreSQL DSN,
// or a DSN whose server does not answer, fails New with an error that
// names the store without its password.
func TestStoreBadDSN(t *testing.T) {
	tests := []struct{ name, store, want string }{
		{"unknown scheme", "mysql://u:s3cret@h/db", "--store"},
		{"unparsable", "postgres://u:s3cret@h:notaport/db", "invalid DSN"},
		{"no server", "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=5", "open store postgres://u:xxxxx@127.0.0.1:1/db"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := daemon.New(t.Context(), daemon.Config{
				Listen: "127.0.0.1:0", DataDir: t.TempDir(), InsecureNoAuth: true, Store: tc.store,
				Log: slog.New(slog.DiscardHandler),
			})
			if err == nil {
				_ = d.Shutdown(t.Context())
				t.Fatal("New succeeded")
			}
			if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want an error with %q and without the password", err, tc.want)
			}
		})
	}
}

// TestStorePostgresTwoDaemons runs two daemons on one PostgreSQL database
// (AGENTBOX_TEST_POSTGRES, a schema of its own): a session created through
// one is listed by the other, and a client streaming through the other
// sees the turn the first one runs, every event once and in order.
func TestStorePostgresTwoDaemons(t *testing.T) {
	dsn := os.Getenv("AGENTBOX_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("AGENTBOX_TEST_POSTGRES is not set: no PostgreSQL server (scripts/test starts one with scripts/postgres and sets it)")
	}
	// A schema of this run's own: test runs may share the server.
	schema := fmt.Sprintf("agentbox_daemon_%d_%d", os.Getpid(), time.Now().UnixNano())
	admin := withSearchPath(t, dsn, "public")
	adminDaemon := func(sql string) {
		// The first daemon's migrations make the tables; the schema is
		// made (and dropped) through a store-less connection.
		t.Helper()
		execSQL(t, admin, sql)
	}
	adminDaemon("DROP SCHEMA IF EXISTS " + schema + " CASCADE; CREATE SCHEMA " + schema)
	t.Cleanup(func() { execSQL(t, admin, "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	store := withSearchPath(t, dsn, schema)

	start := func() *client.Client {
		d, err := daemon.New(t.Context(), daemon.Config{
			Listen: "127.0.0.1:0", DataDir: t.TempDir(), InsecureNoAuth: true, Store: store,
			Log: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatalf("New with --store postgres: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- d.Serve(ctx) }()
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
			defer scancel()
			_ = d.Shutdown(sctx)
			cancel()
			<-done
		})
		c, err := client.New(d.URL())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := start(), start()

	ses, err := a.CreateSession(t.Context(), client.CreateSession{Agent: "mock"})
	if err != nil {
		t.Fatalf("CreateSession through A: %v", err)
	}
	if got, err := b.GetSession(t.Context(), ses.ID); err != nil || got.ID != ses.ID {
		t.Fatalf("GetSession through B = %+v, %v", got, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	stream := b.Stream(ctx, ses.ID, 0)
	defer stream.Close()
	if _, err := a.SendMessage(t.Context(), ses.ID, client.SendMessage{Text: "hello"}); err != nil {
		t.Fatalf("SendMessage through A: %v", err)
	}
	var last int64
	for stream.Next() {
		e := stream.Event()
		if e.Seq != last+1 {
			t.Fatalf("streamed seq %d after %d", e.Seq, last)
		}
		last = e.Seq
		if e.Type == event.TypeTurnCompleted {
			break
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream through B: %v (after seq %d)", err, last)
	}
	page, err := a.Events(t.Context(), ses.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) < int(last) {
		t.Errorf("A has %d events, B streamed %d", len(page.Events), last)
	}
}

func withSearchPath(t testing.TB, dsn, schema string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("AGENTBOX_TEST_POSTGRES: want a postgres:// URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// execSQL runs sql on the server of dsn.
func execSQL(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgwire.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("AGENTBOX_TEST_POSTGRES: %v", err)
	}
	c, err := pgwire.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("AGENTBOX_TEST_POSTGRES is set but the server does not answer: %v", err)
	}
	defer c.Close(context.Background())
	if err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestOwnershipConfigRefused: an --advertise that is not a base URL, or a
// --lease-ttl too short to renew, stops New with an error naming the flag.
func TestOwnershipConfigRefused(t *testing.T) {
	tests := []struct {
		name      string
		advertise string
		ttl       time.Duration
		want      string
	}{
		{"no scheme", "10.0.0.5:7777", 0, "--advertise"},
		{"other scheme", "ftp://10.0.0.5", 0, "--advertise"},
		{"a path", "http://10.0.0.5:7777/api", 0, "--advertise"},
		{"credentials", "http://u:s3cret@10.0.0.5:7777", 0, "--advertise"},
		{"ttl too short", "http://10.0.0.5:7777", 100 * time.Millisecond, "--lease-ttl"},
		{"negative ttl", "", -time.Second, "--lease-ttl"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := daemon.New(t.Context(), daemon.Config{
				Listen: "127.0.0.1:0", DataDir: t.TempDir(), InsecureNoAuth: true, Advertise: tc.advertise, LeaseTTL: tc.ttl,
				Log: slog.New(slog.DiscardHandler),
			})
			if err == nil {
				_ = d.Shutdown(t.Context())
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("New: %v; want an error naming %s, without the password", err, tc.want)
			}
		})
	}
}
