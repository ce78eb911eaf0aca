package mock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// maxFileRead bounds the old content a write step reads for its diff.
const maxFileRead = 1 << 20

// fileTimeout bounds each command a sandboxed file step starts.
const fileTimeout = 30 * time.Second

// Scripts of the sandboxed file steps, run by /bin/sh with the path as $1
// (never interpolated): read prints the file or exits 3 when there is
// none; write creates the parent directories and writes stdin.
const (
	readScript  = `if [ -e "$1" ] || [ -L "$1" ]; then exec cat -- "$1"; fi; exit 3`
	writeScript = `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`
)

// sandboxFiles runs file steps inside the session's sandbox, as the
// sandbox's user, in the working directory as the sandbox shows it.
type sandboxFiles struct {
	sb  sandbox.Sandbox
	cwd string
}

func (f sandboxFiles) read(ctx context.Context, rel string) ([]byte, bool, error) {
	var out bytes.Buffer
	lw := &sandbox.LimitedWriter{W: &out, N: maxFileRead}
	code, msg, err := f.run(ctx, readScript, rel, nil, lw)
	switch {
	case err != nil:
		return nil, false, err
	case code == 3:
		return nil, true, nil
	case code != 0:
		return nil, false, fmt.Errorf("cannot read %s in the sandbox: %s", rel, msg)
	case lw.Truncated():
		return nil, false, fmt.Errorf("%s is larger than %d bytes", rel, maxFileRead)
	}
	return out.Bytes(), false, nil
}

func (f sandboxFiles) write(ctx context.Context, rel, content string) error {
	code, msg, err := f.run(ctx, writeScript, rel, strings.NewReader(content), nil)
	switch {
	case err != nil:
		return err
	case code != 0:
		return fmt.Errorf("cannot write %s in the sandbox: %s", rel, msg)
	}
	return nil
}

// run runs script with rel as $1 in the sandbox and returns its exit code
// and what it wrote to stderr.
func (f sandboxFiles) run(ctx context.Context, script, rel string, stdin *strings.Reader, stdout *sandbox.LimitedWriter) (int, string, error) {
	var errOut bytes.Buffer
	cmd := sandbox.Cmd{
		Args: []string{"/bin/sh", "-c", script, "sh", rel}, Dir: f.cwd,
		Stderr: &sandbox.LimitedWriter{W: &errOut, N: 4 << 10}, Timeout: fileTimeout,
	}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if stdout != nil {
		cmd.Stdout = stdout
	}
	p, err := f.sb.Start(ctx, cmd)
	if err != nil {
		return 0, "", err
	}
	stop := context.AfterFunc(ctx, func() { _ = p.Signal(syscall.SIGKILL) })
	ex, err := p.Wait()
	stop()
	switch {
	case err != nil:
		return 0, "", err
	case ctx.Err() != nil:
		return 0, "", ctx.Err()
	case ex.Reason != "":
		return 0, "", errors.New("stopped by the sandbox: " + ex.Reason + ": " + ex.Message)
	}
	return ex.Code, strings.TrimSpace(errOut.String()), nil
}
