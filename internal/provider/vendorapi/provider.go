package vendorapi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/provider"
)

// OwnerKey is the label (metadata, tag) holding Spec.Owner on a vendor's
// sandbox, which List filters on.
const OwnerKey = "agentbox-owner"

// DaemonPort is the port the inner agentbox daemon listens on in a
// vendor's sandbox.
const DaemonPort = 49999

// Paths inside a vendor's sandbox, relative to the directory the inner
// daemon runs in (the user's home, or the session's working directory).
const (
	BinaryPath = "agentbox"
	DataDir    = ".agentbox"
	TokenPath  = DataDir + "/" + client.TokenFileName
)

// maxPages bounds List: a vendor answering more pages than this fails.
const maxPages = 1000

// Vendor is a vendor's own part of a provider: its checks of a Spec, its
// endpoints and the shapes of its requests and answers. Provider does the
// rest. R is its create request, S what its create answers.
type Vendor[R, S any] interface {
	// Request checks spec and makes the create request; what the vendor
	// cannot do is refused naming the field (ErrUnsupported). Owner,
	// token and the owner's label are checked already.
	Request(spec provider.Spec) (R, error)
	// Create asks for a sandbox; the id is not empty without an error.
	Create(ctx context.Context, req R) (id string, created S, err error)
	// Start puts bin and the token file into the sandbox created, starts
	// `agentbox serve` there (ServeScript) and returns the inner daemon's
	// address once it answers (Client.WaitHealthy).
	Start(ctx context.Context, created S, bin []byte, token string) (address string, err error)
	// Address finds a running sandbox's inner daemon; a sandbox that is
	// not running is ErrGone.
	Address(ctx context.Context, id string) (string, error)
	// Delete removes a sandbox; one that is gone is ErrGone.
	Delete(ctx context.Context, id string) error
	// ListPage is one page, of at most limit, of the ids of the sandboxes
	// labelled with owner (of any sandbox when owner is empty), after
	// cursor, and the next page's cursor (empty at the end).
	ListPage(ctx context.Context, owner, cursor string, limit int) (ids []string, next string, err error)
}

// Provider is a vendor's provider.Provider and provider.Lister, the same
// for every vendor: the spec's common checks, destroy-on-failure, errors
// naming the vendor and the sandbox, List across pages. A vendor's
// package embeds it.
type Provider[R, S any] struct {
	c      *Client
	vendor Vendor[R, S]
	page   int
}

var (
	_ provider.Provider = (*Provider[int, int])(nil)
	_ provider.Lister   = (*Provider[int, int])(nil)
)

// NewProvider is the provider of vendor through c, listing pages of
// pageSize.
func NewProvider[R, S any](c *Client, vendor Vendor[R, S], pageSize int) *Provider[R, S] {
	return &Provider[R, S]{c: c, vendor: vendor, page: pageSize}
}

// Name implements provider.Provider.
func (p *Provider[R, S]) Name() string { return p.c.Vendor }

// Capabilities implements provider.Provider. The vendors pause, snapshot
// and enforce egress rules, but their clients do not drive those yet:
// only what they implement is reported.
func (p *Provider[R, S]) Capabilities() provider.Capabilities {
	return provider.Capabilities{PreviewURLs: true}
}

// Health implements provider.Provider: an authenticated list of one.
func (p *Provider[R, S]) Health(ctx context.Context) error {
	_, _, err := p.listPage(ctx, "", "", 1)
	return err
}

// Create implements provider.Provider: checks, the create call, the
// vendor's start; a sandbox whose start failed is destroyed.
func (p *Provider[R, S]) Create(ctx context.Context, spec provider.Spec) (provider.Sandbox, error) {
	name := p.c.Vendor
	switch {
	case spec.Owner == "":
		return provider.Sandbox{}, fmt.Errorf("%s: spec: owner is empty", name)
	case spec.Token == "":
		return provider.Sandbox{}, fmt.Errorf("%s: spec: token is empty", name)
	}
	if _, ok := spec.Labels[OwnerKey]; ok {
		return provider.Sandbox{}, fmt.Errorf("%s: label %q is the provider's own", name, OwnerKey)
	}
	req, err := p.vendor.Request(spec)
	if err != nil {
		return provider.Sandbox{}, err
	}
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return provider.Sandbox{}, fmt.Errorf("%s: the agentbox binary: %w", name, err)
	}
	id, created, err := p.vendor.Create(ctx, req)
	if err != nil {
		return provider.Sandbox{}, fmt.Errorf("%s: create sandbox: %w", name, err)
	}
	addr, err := p.vendor.Start(ctx, created, bin, spec.Token)
	if err != nil {
		err = fmt.Errorf("%s: sandbox %s: %w", name, id, err)
		// Never a half-created sandbox: delete it on a context of its
		// own, since ctx may be what failed.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.c.RequestTimeout)
		defer cancel()
		if derr := p.Destroy(dctx, id); derr != nil {
			return provider.Sandbox{}, fmt.Errorf("%w (and deleting sandbox %s failed: %w; the next start's reconciliation removes it)", err, id, derr)
		}
		return provider.Sandbox{}, err
	}
	return provider.Sandbox{ID: id, Address: addr, Token: spec.Token}, nil
}

// Connect implements provider.Provider.
func (p *Provider[R, S]) Connect(ctx context.Context, id, token string) (provider.Sandbox, error) {
	addr, err := p.vendor.Address(ctx, id)
	if err != nil {
		return provider.Sandbox{}, fmt.Errorf("%s: sandbox %s: %w", p.c.Vendor, id, err)
	}
	return provider.Sandbox{ID: id, Address: addr, Token: token}, nil
}

// Destroy implements provider.Provider; gone is no error.
func (p *Provider[R, S]) Destroy(ctx context.Context, id string) error {
	if err := p.vendor.Delete(ctx, id); err != nil && !errors.Is(err, provider.ErrGone) {
		return fmt.Errorf("%s: delete sandbox %s: %w", p.c.Vendor, id, err)
	}
	return nil
}

// List implements provider.Lister: every sandbox labelled with owner,
// across pages.
func (p *Provider[R, S]) List(ctx context.Context, owner string) ([]string, error) {
	var all []string
	cursor := ""
	for range maxPages {
		ids, next, err := p.listPage(ctx, owner, cursor, p.page)
		if err != nil {
			return nil, err
		}
		all = append(all, ids...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
	return nil, fmt.Errorf("%w: %s: list: more than %d pages", provider.ErrUnavailable, p.c.Vendor, maxPages)
}

func (p *Provider[R, S]) listPage(ctx context.Context, owner, cursor string, limit int) ([]string, string, error) {
	ids, next, err := p.vendor.ListPage(ctx, owner, cursor, limit)
	if err != nil {
		return nil, "", fmt.Errorf("%s: list sandboxes: %w", p.c.Vendor, err)
	}
	return ids, next, nil
}

// WaitHealthy polls the inner daemon at address with token until it
// answers, within the client's StartTimeout.
func (c *Client) WaitHealthy(ctx context.Context, address, token string) error {
	ic, err := client.New(address, client.WithToken(token), client.WithHTTPClient(c.HTTP))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := ic.Health(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: the inner daemon did not answer within %s: %w", provider.ErrUnavailable, c.StartTimeout, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Poll waits, within the client's StartTimeout, until ready reports done
// or fails, calling refresh (which reads the state ready looks at) every
// interval; running out of time is ErrUnavailable saying what() was not
// reached.
func (c *Client) Poll(ctx context.Context, interval time.Duration, ready func() (bool, error), refresh func(context.Context) error, what func() string) error {
	ctx, cancel := context.WithTimeout(ctx, c.StartTimeout)
	defer cancel()
	for {
		if done, err := ready(); err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s within %s", provider.ErrUnavailable, what(), c.StartTimeout)
		case <-time.After(interval):
		}
		if err := refresh(ctx); err != nil {
			return err
		}
	}
}

// Serve is how a vendor's sandbox starts the inner daemon: the binary and
// its data directory (BinaryPath, DataDir, TokenPath) are in Dir.
type Serve struct {
	// Dir is the directory, as a shell word ("$HOME", "$PWD").
	Dir string
	// Cd changes into Dir first (a process that does not start there).
	Cd bool
	// Listen is the host part of the daemon's address (its port is
	// DaemonPort): 127.0.0.1 where the vendor reaches the port through
	// the sandbox's loopback, 0.0.0.0 where through its interface.
	Listen string
	// TokenEnv gives the daemon its token in AGENTBOX_TOKEN, read from
	// the token file by the shell (a listener that is not loopback needs
	// it given); else the daemon reads the file itself.
	TokenEnv bool
}

// Script is the shell script that starts the inner daemon. The token is
// never on a command line; the modes are the ones the daemon insists on;
// the binary is executable by all, as the inner daemon's own sandboxes
// run it again as their users.
func (s Serve) Script() string {
	script := "chmod 755 " + BinaryPath + " && chmod 700 " + DataDir + " && chmod 600 " + TokenPath + " && "
	if s.Cd {
		script = "cd \"" + s.Dir + "\" && " + script
	}
	if s.TokenEnv {
		script += "AGENTBOX_TOKEN=\"$(cat " + TokenPath + ")\" "
	}
	return script + "exec ./" + BinaryPath + " serve --listen " + s.Listen + ":" + strconv.Itoa(DaemonPort) +
		" --allowed-hosts '*' --data-dir \"" + s.Dir + "/" + DataDir + "\""
}
