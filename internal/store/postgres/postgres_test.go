package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"
	"go.uber.org/goleak"

	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/storetest"
)

// envDSN names the server the tests use: scripts/test starts a private
// cluster (scripts/postgres) and sets it, so the default test run runs
// these tests. Unset, they skip; set to a server that does not answer,
// they fail.
const envDSN = "AGENTBOX_TEST_POSTGRES"

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// serverDSN returns the test server's DSN, skipping the test when none is
// configured.
func serverDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(envDSN)
	if dsn == "" {
		t.Skipf("%s is not set: no PostgreSQL server to test against (scripts/test starts one with scripts/postgres and sets it)", envDSN)
	}
	return dsn
}

// withSchema returns dsn with search_path set to schema: the store's tables
// live in the first schema of the search path.
func withSchema(t testing.TB, dsn, schema string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("%s: %v", envDSN, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}

// admin runs one statement on the server's maintenance database.
func admin(t testing.TB, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := connectDSN(ctx, serverDSN(t))
	if err != nil {
		t.Fatalf("%s is set but the server does not answer: %v", envDSN, err)
	}
	defer closeConn(c)
	if err := c.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// connectDSN opens one connection to dsn.
func connectDSN(ctx context.Context, dsn string) (*pgwire.Conn, error) {
	cfg, err := pgwire.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return pgwire.Connect(ctx, cfg)
}

var created sync.Map // schema name -> true

// database returns the DSN of a state of its own for key (a directory of
// the suite): a schema of the test server's database (cheaper than a
// database), created on first use and dropped when t ends.
func database(t testing.TB, key string) string {
	t.Helper()
	dsn := serverDSN(t)
	sum := sha256.Sum256([]byte(key))
	name := "agentbox_test_" + hex.EncodeToString(sum[:8])
	if _, loaded := created.LoadOrStore(name, true); !loaded {
		admin(t, "DROP SCHEMA IF EXISTS "+name+" CASCADE; CREATE SCHEMA "+name)
		t.Cleanup(func() {
			admin(t, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
			created.Delete(name)
		})
	}
	return withSchema(t, dsn, name)
}

func open(t testing.TB, dsn string, opts Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), dsn, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

func factory(opts Options) storetest.Factory {
	return storetest.FactoryFunc(func(t *testing.T, dir string) store.Store {
		return open(t, database(t, dir), opts)
	})
}

func TestConformance(t *testing.T) {
	storetest.Run(t, factory(Options{}))
}

// TestConformanceSmall runs the suite with one pooled connection and
// batches of one event, so that every append waits for the writer and
// subscribers contend with it.
func TestConformanceSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite already ran with the default options")
	}
	storetest.Run(t, factory(Options{PoolSize: 2, MaxBatch: 1}))
}

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{"postgres://u:s3cret@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db", "postgresql://u@h/db"},
		{"postgres://u:pw@h/db?password=s3cret", "postgres://u:xxxxx@h/db?password=xxxxx"},
		{"host=h user=u password=s3cret dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password='s3 cret' dbname=db", "host=h password=xxxxx dbname=db"},
		{"postgres://u:s3cret@h:bad port/db", "(unparsable URL)"},
		{"mysql://u:s3cret@h/db", "mysql://u:xxxxx@h/db"},
	}
	for _, tc := range tests {
		if got := Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestOpenBadDSN(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:s3cret@h:notaport/db",
		"postgres://u:s3cret@h/db?sslmode=bogus",
		"host=h password=s3cret sslmode=bogus",
	} {
		_, err := Open(t.Context(), dsn, Options{})
		if err == nil {
			t.Errorf("Open(%q) succeeded", dsn)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) error shows the password: %v", dsn, err)
		}
	}
	// A server that does not answer: a clear error, without the password.
	_, err := Open(t.Context(), "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=5", Options{})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open(no server) = %v; want an error without the password", err)
	}
}

// TestMigrateConcurrent opens several stores on a fresh database at once,
// as daemons starting together do: the advisory lock makes them apply
// each migration once, and all open.
func TestMigrateConcurrent(t *testing.T) {
	dsn := database(t, t.TempDir())
	var wg sync.WaitGroup
	stores := make([]*Store, 4)
	for i := range stores {
		wg.Go(func() {
			s, err := Open(t.Context(), dsn, Options{})
			if err != nil {
				t.Errorf("Open %d: %v", i, err)
				return
			}
			stores[i] = s
		})
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			s.Close()
		}
	}
	c, err := connectDSN(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn(c)
	res, err := c.ExecParams(t.Context(), "SELECT count(*)::int8, max(version)::int8 FROM schema_migrations", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := store.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := getInt8(res.Rows[0][0])
	v, _ := getInt8(res.Rows[0][1])
	if int(n) != len(ms) || int(v) != len(ms) {
		t.Errorf("schema_migrations has %d rows up to version %d, want %d", n, v, len(ms))
	}

	// A database from a newer program is refused.
	if err := c.Exec(t.Context(), fmt.Sprintf("INSERT INTO schema_migrations VALUES (%d, 'future', 0)", len(ms)+1)); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(t.Context(), dsn, Options{}); err == nil {
		s.Close()
		t.Error("Open of a database with a newer schema succeeded")
	}
}

// TestMigrationsParallelSQLite: one migration scheme for both stores, the
// same versions under the same names, so that a schema change is made in
// both or in neither.
func TestMigrationsParallelSQLite(t *testing.T) {
	pg, err := store.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	lite, err := store.LoadMigrations(os.DirFS("../sqlite"), "migrations")
	if err != nil {
		t.Fatal(err)
	}
	names := func(ms []store.Migration) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Name)
		}
		return out
	}
	if !slices.Equal(names(pg), names(lite)) {
		t.Errorf("postgres migrations %v, sqlite %v: want the same versions and names", names(pg), names(lite))
	}
}
