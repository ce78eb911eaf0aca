//go:build !nopostgres

package daemon

import (
	"context"

	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/store/postgres"
)

// openPostgres opens the PostgreSQL store of dsn. The build tag nopostgres
// leaves the store (about 0.2 MiB of the binary) out.
func openPostgres(ctx context.Context, dsn string) (store.Store, error) {
	st, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		return nil, err
	}
	return st, nil
}
