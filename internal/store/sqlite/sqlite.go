// Package sqlite implements store.Store on an embedded SQLite database file
// (pure Go driver, WAL mode): the daemon's default store.
//
// One writer goroutine owns the only write connection. It takes whatever
// operations are queued, never waiting for more, writes them in one
// transaction and commits (group commit). With SyncFull a syncer goroutine
// then syncs the write-ahead log, and only after that are the callers
// answered and the events published to subscribers (durable.go). Checkpoints
// run off the writer's path (checkpoint.go). Reads use a pool of read-only
// connections, and live subscribers are served from an in-memory ring of
// recent events per session.
//
// One Store must own a database file: two processes writing the same file
// would assign conflicting seqs.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/internal/store"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Sync says when a write is acknowledged.
type Sync int

const (
	// SyncFull acknowledges a write only once the write-ahead log is
	// synced to disk: it survives a power failure. The default.
	SyncFull Sync = iota
	// SyncNormal acknowledges a write once committed and leaves syncing
	// to checkpoints: it survives a crash of the process, but the last
	// writes may be lost if the machine loses power.
	SyncNormal
)

// ErrInUse is returned by Open when another process has the database open.
var ErrInUse = errors.New("database in use")

// Options tunes a Store. The zero value is the production default.
type Options struct {
	Sync Sync
	// BusyTimeout is how long a connection waits for a lock held by
	// another connection; default 5s.
	BusyTimeout time.Duration
	// ReadConns bounds the read pool; default max(4, GOMAXPROCS).
	ReadConns int
	// RingSize is how many recent events per subscribed session are kept in
	// memory for live subscribers; default 4096. Subscribers behind the
	// ring read from the database.
	RingSize int

	// Tests only: batchHook sees every batch before it is written;
	// syncHook runs before every sync of the log and fails it by
	// returning an error; fileSyncHook sees every other sync the store
	// makes itself (of the database file, the log, the directory) and
	// fails it by returning an error; checkpointHook sees the
	// checkpointer's steps ("written back" after each write-back of the
	// database file, "finish" before it asks the writer to finish a
	// restart); checkpointPages and restartPages replace the constants of
	// checkpoint.go.
	batchHook                     func(batch []*op)
	checkpointHook                func(step string)
	syncHook                      func() error
	fileSyncHook                  func(name string) error
	checkpointPages, restartPages int
	indexRows                     int
}

const (
	defaultBusyTimeout = 5 * time.Second
	defaultRingSize    = 4096
	// ringBytes bounds the payload bytes one ring holds, so sessions with
	// large events (diffs, file contents) do not pin much memory.
	ringBytes = 8 << 20
	// maxBatch bounds the operations committed in one transaction.
	maxBatch = 1024
	// pageSize is how many events a subscriber reads from the database at
	// a time when it is behind the ring.
	pageSize = 512
	// subBuffer is the capacity of a subscription channel.
	subBuffer = 64
)

// Store is a store.Store on a SQLite file. Create it with Open.
type Store struct {
	path  string
	lock  *os.File // held while open; see lockFile
	opts  Options
	wdb   *sql.DB // the writer's database: one connection
	rdb   *sql.DB // read-only pool
	cdb   *sql.DB // the checkpointer's connection
	reads readStmts
	w     *writer // owned by its goroutine once started

	ops         chan *op
	writerDone  chan struct{}
	syncQ       chan int64 // the batch just committed, for a syncer; nil with SyncNormal
	syncDone    chan struct{}
	wal         *os.File     // the write-ahead log, for the writer (grow.go) and the first syncer
	dbFile      *os.File     // the database file, for the checkpointer's write-back (checkpoint.go)
	syncWAL     []*os.File   // the log again, one file description per further syncer
	syncMu      sync.Mutex   // guards pending
	pending     []syncItem   // committed batches not yet answered, in commit order
	finishMu    sync.Mutex   // held while answering batches, so that they are answered in order
	synced      atomic.Int64 // the last batch whose rows readers may see
	broken      atomic.Pointer[error]
	ckptRequest chan bool            // the writer asks the checkpointer (see checkpoint.go)
	ckptFinish  chan chan<- struct{} // the checkpointer asks the writer to finish
	ckptDone    chan struct{}
	quit        chan struct{} // closed when the store closes; stops subscribers

	// closeMu guards closed and orders inflight.Add before Close's Wait.
	closeMu  sync.RWMutex
	closed   bool
	inflight sync.WaitGroup // public calls in progress
	subs     sync.WaitGroup // subscriber goroutines

	hubsMu sync.RWMutex
	hubs   map[string]*hub // sessions with at least one subscriber

	updates keyedMutex // serialises UpdateSession per session

	leases leaseTable // see lease.go

	// gate is held shared by every read for as long as it has the log
	// open, and exclusively by the writer when the log must start over
	// (checkpoint.go), so that no reader pins it.
	gate sync.RWMutex
}

// readGate takes the read side of gate; call the result when the read is
// done (its rows closed).
func (s *Store) readGate() (unlock func()) {
	s.gate.RLock()
	return s.gate.RUnlock
}

var _ store.Store = (*Store)(nil)

// DefaultPath returns where the daemon keeps its database:
// $AGENTBOX_DATA_DIR/agentbox.db if set, else
// $XDG_DATA_HOME/agentbox/agentbox.db (an absolute XDG_DATA_HOME only, as the
// XDG spec asks), else ~/.local/share/agentbox/agentbox.db.
func DefaultPath() (string, error) {
	if dir := os.Getenv("AGENTBOX_DATA_DIR"); dir != "" {
		return filepath.Join(dir, "agentbox.db"), nil
	}
	if dir := os.Getenv("XDG_DATA_HOME"); dir != "" && filepath.IsAbs(dir) {
		return filepath.Join(dir, "agentbox", "agentbox.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("default database path: %w", err)
	}
	return filepath.Join(home, ".local", "share", "agentbox", "agentbox.db"), nil
}

// Open opens (creating it and its parent directories if needed) the database
// at path, brings its schema up to date and starts the writer.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite store: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	// The driver reads everything after the first '?' as parameters.
	if strings.ContainsRune(abs, '?') {
		return nil, fmt.Errorf("open sqlite store %s: path must not contain '?'", path)
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = defaultBusyTimeout
	}
	if opts.ReadConns <= 0 {
		opts.ReadConns = max(4, runtime.GOMAXPROCS(0))
	}
	if opts.RingSize <= 0 {
		opts.RingSize = defaultRingSize
	}
	if opts.checkpointPages <= 0 {
		opts.checkpointPages = checkpointPages
	}
	if opts.restartPages <= 0 {
		opts.restartPages = restartPages
	}
	if opts.indexRows <= 0 {
		opts.indexRows = defaultIndexRows
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	// Create the file ourselves so it is private; SQLite gives the -wal and
	// -shm files the database file's permissions.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}
	fi, err := f.Stat()
	if err := errors.Join(err, f.Close()); err != nil {
		return nil, fmt.Errorf("open sqlite store: %w", err)
	}

	lock, err := lockFile(abs)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	clean := takeCleanMark(lock)
	s := &Store{
		lock:        lock,
		path:        abs,
		opts:        opts,
		ops:         make(chan *op, maxBatch),
		writerDone:  make(chan struct{}),
		ckptRequest: make(chan bool, 1),
		ckptFinish:  make(chan chan<- struct{}),
		ckptDone:    make(chan struct{}),
		syncDone:    make(chan struct{}),
		quit:        make(chan struct{}),
		hubs:        make(map[string]*hub),
		leases:      leaseTable{m: make(map[string]store.Lease)},
	}
	// An empty file is a new database (SQLite too sees no database in
	// it, whatever else lies beside it): see fresh.go.
	if err := s.open(ctx, fi.Size() == 0, clean); err != nil {
		_ = s.closeDBs(false) // best effort: the open error is the one to report
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	return s, nil
}

func (s *Store) open(ctx context.Context, fresh, clean bool) error {
	busy := strconv.FormatInt(s.opts.BusyTimeout.Milliseconds(), 10)

	pragmas := []string{"busy_timeout(" + busy + ")"}
	if !fresh {
		// A new database switches to WAL below, without syncing
		// (fresh.go); the mode then stays with the file.
		pragmas = append(pragmas, "journal_mode(WAL)")
	}
	var err error
	s.wdb, err = sql.Open("sqlite", dsn(s.path, append(pragmas,
		// Commits do not wait for the disk; see durable.go.
		"synchronous(NORMAL)",
		"foreign_keys(1)",
		// Statement journals stay in memory instead of spilling to
		// temporary files.
		"temp_store(MEMORY)",
		// See checkpoint.go.
		"wal_autocheckpoint(0)",
		"journal_size_limit("+strconv.Itoa(s.opts.restartPages*pageBytes)+")",
	)...))
	if err != nil {
		return err
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	s.wdb.SetConnMaxIdleTime(0)
	conn, err := s.wdb.Conn(ctx)
	if err != nil {
		return err
	}
	// conn is the writer's once newWriter is called (it closes conn on
	// failure); failures before close it here, best effort: the failure is
	// the error to report.
	handedOver := false
	defer func() {
		if !handedOver {
			_ = conn.Close()
		}
	}()
	if fresh {
		// The switch to WAL is the new database's first write.
		if _, err := conn.ExecContext(ctx, "PRAGMA synchronous=OFF"); err != nil {
			return fmt.Errorf("synchronous: %w", err)
		}
		if _, err := conn.ExecContext(ctx, "PRAGMA journal_mode=WAL"); err != nil {
			return fmt.Errorf("journal mode: %w", err)
		}
	}
	var mode string
	if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, want wal (is the file system local?)", mode)
	}
	if err := keepLogFiles(conn); err != nil {
		return err
	}
	if err := migrate(ctx, conn); err != nil {
		return err
	}
	first, err := s.openEpoch(ctx, conn, fresh || clean)
	if err != nil {
		return err
	}
	if fresh {
		if _, err := conn.ExecContext(ctx, "PRAGMA synchronous=NORMAL"); err != nil {
			return fmt.Errorf("synchronous: %w", err)
		}
	}
	s.synced.Store(first - 1)
	if s.opts.Sync == SyncFull {
		if s.wal, err = os.OpenFile(s.path+"-wal", os.O_RDWR|os.O_CREATE, 0o600); err != nil {
			return err
		}
		if err := s.openSyncFiles(); err != nil {
			return err
		}
	}
	handedOver = true
	w, err := newWriter(ctx, s, conn, first) // closes conn on failure
	if err != nil {
		return err
	}
	w.epochPending = true
	w.settlePending = fresh

	s.rdb, err = sql.Open("sqlite", dsn(s.path,
		"busy_timeout("+busy+")",
		"query_only(1)",
	))
	if err != nil {
		w.close()
		return err
	}
	s.rdb.SetMaxOpenConns(s.opts.ReadConns)
	s.rdb.SetMaxIdleConns(s.opts.ReadConns)
	s.rdb.SetConnMaxIdleTime(0)
	s.reads.init(s.rdb)
	s.cdb, err = sql.Open("sqlite", dsn(s.path,
		"busy_timeout("+busy+")",
		"synchronous(NORMAL)", // which syncs around checkpoints
	))
	if err != nil {
		w.close()
		return err
	}
	s.cdb.SetMaxOpenConns(1)
	if s.dbFile, err = os.Open(s.path); err != nil { // read-only: sync_file_range needs no write access
		w.close()
		return err
	}
	s.w = w
	go w.run()
	go s.checkpointer(context.WithoutCancel(ctx))
	if s.syncQ != nil {
		s.startSyncers()
	}
	return nil
}

// dsn builds a driver data source name for a plain file path.
func dsn(path string, pragmas ...string) string {
	q := url.Values{"_pragma": pragmas}
	return path + "?" + q.Encode()
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Close stops accepting calls, lets the ones in progress finish (queued
// writes are committed), closes every subscription and the database. It is
// safe to call more than once.
func (s *Store) Close() error {
	s.closeMu.Lock()
	if s.closed {
		s.closeMu.Unlock()
		return nil
	}
	s.closed = true
	s.closeMu.Unlock()

	s.inflight.Wait() // no more senders on ops after this
	close(s.ops)
	<-s.writerDone
	if s.syncQ != nil {
		close(s.syncQ)
		<-s.syncDone
	}
	close(s.ckptRequest)
	<-s.ckptDone
	close(s.quit)
	s.subs.Wait()
	return s.closeDBs(true)
}

// closeDBs closes the connections, the log file and the lock; clean (a
// Close, not a failed Open) marks the lock file first (clean.go).
func (s *Store) closeDBs(clean bool) error {
	var errs []error
	s.reads.close()
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.cdb != nil {
		errs = append(errs, s.cdb.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.wal != nil {
		errs = append(errs, s.wal.Close())
	}
	for _, f := range s.syncWAL {
		errs = append(errs, f.Close())
	}
	if s.dbFile != nil {
		errs = append(errs, s.dbFile.Close())
	}
	if clean && errors.Join(errs...) == nil {
		s.putCleanMark()
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
		s.lock = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close sqlite store: %w", err)
	}
	return nil
}

// enter registers a public call; it reports false once the store is closed.
// Every successful enter must be paired with leave.
func (s *Store) enter() bool {
	s.closeMu.RLock()
	defer s.closeMu.RUnlock()
	if s.closed {
		return false
	}
	s.inflight.Add(1)
	return true
}

func (s *Store) leave() { s.inflight.Done() }

// keyedMutex is a mutex per key, forgotten when unlocked by its last user.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	sync.Mutex
	users int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.m == nil {
		k.m = make(map[string]*keyedEntry)
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.users++
	k.mu.Unlock()

	e.Lock()
	return func() {
		e.Unlock()
		k.mu.Lock()
		if e.users--; e.users == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
