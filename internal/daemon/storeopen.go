package daemon

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/sqlite"
)

// storeKind says which store Config.Store selects: "sqlite" (empty, or
// "sqlite") or "postgres" (a postgres:// or postgresql:// URL, or a libpq
// key=value string naming a host or dbname); anything else is an error.
func storeKind(spec string) (string, error) {
	switch s := strings.TrimSpace(spec); {
	case s == "" || s == "sqlite":
		return "sqlite", nil
	case strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://"):
		return "postgres", nil
	case strings.Contains(s, "=") && (strings.Contains(s, "host=") || strings.Contains(s, "dbname=")):
		return "postgres", nil
	}
	return "", fmt.Errorf("--store %q: want sqlite (the default) or a PostgreSQL DSN (postgres://user:password@host:port/database)", store.RedactDSN(spec))
}

// storeName describes the configured store for logs: the SQLite file, or
// the PostgreSQL DSN without its password.
func storeName(cfg Config) string {
	if kind, _ := storeKind(cfg.Store); kind == "postgres" {
		return store.RedactDSN(cfg.Store)
	}
	return cfg.DBPath
}

// openBackend opens the store cfg selects: SQLite at DBPath by default,
// PostgreSQL when Store is a DSN. Errors name the store without a password.
func openBackend(ctx context.Context, cfg Config) (store.Store, error) {
	kind, err := storeKind(cfg.Store)
	if err != nil {
		return nil, err
	}
	if kind == "postgres" {
		st, err := openPostgres(ctx, cfg.Store)
		if err != nil {
			return nil, fmt.Errorf("open store %s: %w", store.RedactDSN(cfg.Store), err)
		}
		return st, nil
	}
	opts := sqlite.Options{}
	if cfg.SyncNormal {
		opts.Sync = sqlite.SyncNormal
	}
	st, err := sqlite.Open(ctx, cfg.DBPath, opts)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", cfg.DBPath, err)
	}
	return st, nil
}
