package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/internal/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

func migrations() ([]store.Migration, error) {
	return store.LoadMigrations(migrationFS, "migrations")
}

// migrate applies the embedded migrations the database has not seen yet, all
// in one immediate transaction, and refuses a database written by a newer
// version of the program. A database that is up to date, as it is on
// every start but the first after an upgrade, takes one read and no write
// transaction.
func migrate(ctx context.Context, conn *sql.Conn) error {
	ms, err := migrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return migrateTo(ctx, conn, ms)
}

// migrateTo is migrate with the program's migrations ms (tests make the
// databases of older programs with the first of them).
func migrateTo(ctx context.Context, conn *sql.Conn, ms []store.Migration) (err error) {
	// Only the single writer connection writes the file, so a version
	// read here stays true; any failure (no table yet) takes the full
	// path, which reads it again inside its transaction.
	var current int
	if conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&current) == nil &&
		current == len(ms) {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer func() {
		if err != nil {
			// Best effort: SQLite may have rolled back already, and
			// the caller closes conn on error anyway.
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
			err = fmt.Errorf("migrate: %w", err)
		}
	}()
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER NOT NULL PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return err
	}
	if err := conn.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&current); err != nil {
		return err
	}
	if current > len(ms) {
		return fmt.Errorf("database schema version %d is newer than this program's %d", current, len(ms))
	}
	for _, m := range ms[current:] {
		if _, err := conn.ExecContext(ctx, m.SQL); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		if _, err := conn.ExecContext(ctx,
			"INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
			m.Version, m.Name, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	return nil
}
