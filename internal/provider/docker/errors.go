package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/agentbox/agentbox/internal/provider"
)

// mapErr maps an error of the Docker client for op onto the contract's
// sentinels, keeping Docker's message: a missing container is ErrGone, a
// missing image or a daemon that does not answer ErrUnavailable (naming
// the daemon's address), a refusal for credentials ErrCredentials, a
// resource limit ErrQuota.
func (p *Provider) mapErr(op string, err error) error {
	var kind error
	switch {
	case errors.As(err, new(*connError)):
		return fmt.Errorf("%w: the Docker daemon at %s does not answer (%s): %w", provider.ErrUnavailable, p.host, op, err)
	case errors.Is(err, errNotFound) && strings.HasPrefix(op, "image "):
		return fmt.Errorf("%w: %s: not in the Docker daemon at %s (nothing is pulled: build or load it there first): %w", provider.ErrUnavailable, op, p.host, err)
	case errors.Is(err, errNotFound):
		kind = provider.ErrGone
	case errors.Is(err, errUnauthorized), errors.Is(err, errForbidden):
		kind = provider.ErrCredentials
	case errors.Is(err, errExhausted):
		kind = provider.ErrQuota
	case errors.Is(err, errInvalid):
		kind = errOption
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %s on the Docker daemon at %s: %w", provider.ErrUnavailable, op, p.host, err)
	default:
		kind = provider.ErrUnavailable
	}
	return fmt.Errorf("%w: %s: %w", kind, op, err)
}

// logTail is the last lines of a container's log, for an error message;
// what fails to be read is said instead.
func (p *Provider) logTail(ctx context.Context, id string) string {
	rc, err := p.cli.containerLogs(ctx, id, 20)
	if err != nil {
		return "(its log: " + err.Error() + ")"
	}
	defer rc.Close()
	var out bytes.Buffer
	w := &capped{buf: &out, n: 4 << 10}
	if err := demux(w, io.LimitReader(rc, 1<<20)); err != nil {
		fmt.Fprintf(&out, " (reading its log: %v)", err)
	}
	s := strings.TrimSpace(out.String())
	if s == "" {
		return "(its log is empty)"
	}
	return "its log: " + s
}

// capped keeps at most n bytes and drops the rest.
type capped struct {
	buf *bytes.Buffer
	n   int
}

func (c *capped) Write(b []byte) (int, error) {
	if room := c.n - c.buf.Len(); room > 0 {
		c.buf.Write(b[:min(room, len(b))])
	}
	return len(b), nil
}
