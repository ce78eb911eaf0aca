//go:build nopostgres

package daemon

import (
	"context"
	"errors"

	"github.com/agentbox/agentbox/internal/store"
)

// openPostgres: this build left the PostgreSQL store out.
func openPostgres(context.Context, string) (store.Store, error) {
	return nil, errors.New("this agentbox was built without the PostgreSQL store (build tag nopostgres)")
}
