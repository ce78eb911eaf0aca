// Package postgres is the PostgreSQL implementation of store.Store, for
// several daemons sharing one state: sessions, event logs and requests live
// in a PostgreSQL database that every daemon opens.
//
// It keeps the guarantees of the SQLite store across processes:
//   - seqs are gapless per session under concurrent writers in any number of
//     processes: an append bumps sessions.last_seq in the transaction that
//     inserts the events, and the row lock orders the writers;
//   - an event is committed before any subscriber sees it: subscribers only
//     ever read the events table;
//   - group commit: appends from many goroutines wait in a queue and one
//     writer sends each batch of them as one implicit transaction in one
//     round trip.
//
// Subscribe reads the table, which is the truth; LISTEN/NOTIFY is only the
// wake-up. Each store holds one listening connection; every commit that
// appends notifies "<session id> <last seq>" on one channel, and a
// subscriber behind that seq reads the table again. When the listening
// connection is lost, the store listens again and wakes every subscriber to
// re-read, so nothing is missed, only delayed.
//
// The store is built on pgwire, a small client of the wire protocol of its
// own, with a small pool; parameters and results use the binary format.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"

	"github.com/agentbox/agentbox/internal/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// channel is the NOTIFY channel of appends and deletes.
const channel = "agentbox_events"

// Options tune a Store; the zero value is the default.
type Options struct {
	// PoolSize bounds the connections the store opens besides the
	// listening one (default 8).
	PoolSize int
	// MaxBatch bounds the events one group commit writes (default 4096).
	MaxBatch int
}

// Store is a store.Store on PostgreSQL.
type Store struct {
	pool *pool
	cfg  *pgwire.Config
	opts Options

	mu     sync.RWMutex // closed, and calls entering
	closed bool
	calls  sync.WaitGroup

	ctx    context.Context // ends at Close, after the writer stopped
	cancel context.CancelFunc
	bg     sync.WaitGroup // subscribers and the listener

	w   writer
	hub hub
}

var _ store.Store = (*Store)(nil)

// Open connects to the database of dsn (a libpq URL or key=value string),
// applies the migrations it lacks and starts listening for other stores'
// appends. Errors never contain the DSN's password.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgwire.ParseConfig(dsn)
	if err != nil {
		// The parser's errors never quote a value; ours names the DSN redacted.
		return nil, fmt.Errorf("postgres: invalid DSN %s: %w (expected postgres://user:password@host:port/database?sslmode=... or key=value pairs)", Redact(dsn), err)
	}
	if _, ok := cfg.Params["application_name"]; !ok {
		cfg.Params["application_name"] = "agentbox"
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = 8
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 4096
	}
	s := &Store{pool: newPool(cfg, opts.PoolSize), cfg: cfg, opts: opts}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.hub.subs = map[string]map[*sub]struct{}{}

	if err := s.migrate(ctx); err != nil {
		s.pool.close()
		s.cancel()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	ln, err := s.listen(ctx)
	if err != nil {
		s.pool.close()
		s.cancel()
		return nil, fmt.Errorf("postgres: listen: %w", err)
	}
	s.w.init()
	s.bg.Go(func() { s.listener(ln) })
	go s.writeLoop()
	return s, nil
}

// enter admits a call unless the store is closed; leave ends it.
func (s *Store) enter() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	s.calls.Add(1)
	return true
}

func (s *Store) leave() { s.calls.Done() }

// Close stops the store: appends waiting for the writer fail with
// ErrClosed, the batch in flight completes, calls in progress end, then
// subscriptions close and the connections with them.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	s.closed = true
	s.mu.Unlock()
	s.w.stop()
	s.calls.Wait()
	s.cancel()
	s.bg.Wait()
	s.pool.close()
	return nil
}

// migrate applies the embedded migrations the database lacks, in one
// transaction under a transaction-scoped advisory lock, so that daemons
// starting together apply each once; a database written by a newer program
// is refused.
func (s *Store) migrate(ctx context.Context) (err error) {
	ms, err := store.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	c, err := s.pool.acquire(ctx)
	if err != nil {
		return err
	}
	defer s.pool.release(c)
	current := func() (int, error) {
		res, err := c.ExecParams(ctx, "SELECT COALESCE(MAX(version), 0)::int8 FROM schema_migrations", nil, nil)
		if err != nil {
			return 0, err
		}
		n, err := getInt8(res.Rows[0][0])
		return int(n), err
	}
	// Up to date, as on every start but the first after an upgrade: one
	// read. Any failure (no table yet) takes the locked path.
	if v, err := current(); err == nil && v == len(ms) {
		return nil
	}
	if err := c.Exec(ctx, "BEGIN"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			_ = c.Exec(context.WithoutCancel(ctx), "ROLLBACK")
			err = fmt.Errorf("migrate: %w", err)
		}
	}()
	// hashtext('agentbox schema_migrations'): any fixed key will do.
	if err := c.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('agentbox schema_migrations'));
		CREATE TABLE IF NOT EXISTS schema_migrations (
			version    integer NOT NULL PRIMARY KEY,
			name       text    NOT NULL,
			applied_at bigint  NOT NULL
		)`); err != nil {
		return err
	}
	v, err := current()
	if err != nil {
		return err
	}
	if v > len(ms) {
		return fmt.Errorf("database schema version %d is newer than this program's %d", v, len(ms))
	}
	for _, m := range ms[v:] {
		if err := c.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		vals, oids := split([]param{int8p(int64(m.Version)), text(m.Name), int8p(time.Now().UnixNano())})
		if _, err := c.ExecParams(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1::int8, $2, $3)",
			vals, oids); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	if err := c.Exec(ctx, "COMMIT"); err != nil {
		return err
	}
	return nil
}

// Redact returns dsn with its password replaced (store.RedactDSN).
func Redact(dsn string) string { return store.RedactDSN(dsn) }

// closedErr is ErrClosed when the store closed under a call, else err.
func (s *Store) closedErr(err error) error {
	if err != nil && s.ctx.Err() != nil && !errors.Is(err, store.ErrClosed) {
		return fmt.Errorf("%w: %w", store.ErrClosed, err)
	}
	return err
}
