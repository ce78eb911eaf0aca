package docker

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"

	"github.com/agentbox/agentbox/internal/provider"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
	"github.com/agentbox/agentbox/internal/sandbox/policy"
)

// What the container holds for its inner daemon beyond the policy's
// limits: the inner daemon shares the container's cgroup with what it
// runs, so its own memory and tasks are added to the policy's.
const (
	InnerMemoryAllowance = 128 << 20
	InnerPidsAllowance   = 64
)

// Who enforces a field of a policy in a Docker sandbox (Fields).
const (
	ByDocker = "Docker"       // set on the container at create, checked from the host
	ByHost   = "host"         // the host daemon: the sandbox's directory, its egress gate
	ByInner  = "inner daemon" // serve --boundary container, in the container
	ByNobody = "refused"      // nothing does: provider-unsupported naming the field
)

// Field is one row of the mapping: a policy field, who enforces it in a
// Docker sandbox, how, and the step that checks and applies it.
type Field struct {
	Name, By, How string
	apply         func(p *policy.Policy, pl *plan) error
}

// plan is how one container enforces a policy: what Docker sets at
// create, what the host mounts, and the policy the inner daemon still
// enforces.
type plan struct {
	cpus    float64
	memory  int64
	pids    int64
	runtime string // "runsc" for isolation gvisor
	// disk and files bound each writable filesystem of the container:
	// its /tmp (a Docker tmpfs) and the sandbox's directory (a tmpfs the
	// host mounts), 0 disk meaning no size limit.
	disk, files int64
	inner       *policy.Policy
}

// unsupported is the refusal of a field nothing enforces in a Docker
// sandbox.
func unsupported(field, why string) error {
	return fmt.Errorf("%w: %s: %s: %s", provider.ErrUnsupported, Name, field, why)
}

// Fields is the mapping of every field of the policy model (docs/policy.md)
// onto a Docker sandbox, in the order Map applies them. docs/sandbox.md
// has it as a table (TestFieldsDocumented), and every field of
// policy.Policy is in it (TestFieldsComplete).
var Fields = []Field{
	{"isolation", ByDocker, "process: the container (namespaces, cgroups, Docker's default seccomp profile, no capabilities); gvisor: the container under runsc; microvm: refused",
		func(p *policy.Policy, pl *plan) error {
			switch p.Isolation() {
			case policy.IsolationProcess:
			case policy.IsolationGVisor:
				pl.runtime = "runsc"
			default:
				return unsupported("isolation "+p.Isolation(), "a container cannot be a microVM")
			}
			return nil
		}},
	{"allow_degraded", ByDocker, "nothing degrades: the container is made as asked, checked from the host, or not at all", nil},
	{"resources.memory", ByDocker, "the container's memory limit (no swap), plus 128 MiB for the inner daemon", func(p *policy.Policy, pl *plan) error {
		if m := int64(p.Resources.Memory); m > 0 {
			pl.memory = m + InnerMemoryAllowance
		}
		return nil
	}},
	{"resources.cpus", ByDocker, "the container's CPU quota", func(p *policy.Policy, pl *plan) error {
		pl.cpus = p.Resources.CPUs
		return nil
	}},
	{"resources.pids", ByDocker, "the container's task limit, plus 64 for the inner daemon", func(p *policy.Policy, pl *plan) error {
		if n := p.Resources.Pids; n > 0 {
			pl.pids = n + InnerPidsAllowance
		}
		return nil
	}},
	{"resources.timeout", ByInner, "kills the process (its group) when it runs past it", func(p *policy.Policy, pl *plan) error {
		pl.inner.Resources.Timeout = p.Resources.Timeout
		return nil
	}},
	{"resources.disk", ByDocker + ", " + ByHost, "the size of /tmp (a Docker tmpfs) and of the sandbox's directory (the inner daemon's data, the workspaces, the agent's home: a tmpfs the host mounts), each", func(p *policy.Policy, pl *plan) error {
		pl.disk = int64(p.Resources.Disk)
		return nil
	}},
	{"resources.output", ByInner, "keeps at most that much of each output stream", func(p *policy.Policy, pl *plan) error {
		pl.inner.Resources.Output = p.Resources.Output
		return nil
	}},
	{"resources.files", ByDocker + ", " + ByHost, "the inodes of the same two filesystems, each", func(p *policy.Policy, pl *plan) error {
		pl.files = p.Resources.Files
		if pl.files <= 0 {
			pl.files = policy.DefaultFiles
		}
		return nil
	}},
	{"filesystem.workspace", ByDocker, "rw and ro both hold: the sandbox's workspace is its own, nothing of it is copied to a host directory", nil},
	{"filesystem.read", ByNobody, "no host path is mounted into a provider's sandbox", func(p *policy.Policy, _ *plan) error {
		if len(p.Filesystem.Read) > 0 {
			return unsupported("filesystem.read", "no host path is mounted into a provider's sandbox")
		}
		return nil
	}},
	{"filesystem.write", ByNobody, "no host path is mounted into a provider's sandbox", func(p *policy.Policy, _ *plan) error {
		if len(p.Filesystem.Write) > 0 {
			return unsupported("filesystem.write", "no host path is mounted into a provider's sandbox")
		}
		return nil
	}},
	{"filesystem.read_outside_workspace", ByDocker, "either way the root is the image's, read-only; the host's is never visible", nil},
	{"filesystem.protected", ByDocker, "holds: nothing in the sandbox is copied to a host directory", nil},
	{"filesystem.review_exempt", ByDocker, "holds: nothing in the sandbox is copied to a host directory, so nothing is reviewed", nil},
	{"filesystem.workspace_roots", ByHost, "global policy only: the host checks the session's working directory", nil},
	{"network.mode", ByDocker + ", " + ByHost, "none: nothing is carried (the container has network none); proxy: the host's egress gate decides every connection carried out of the container; host: refused", func(p *policy.Policy, pl *plan) error {
		switch p.Network.Mode {
		case "", "proxy":
			// The inner daemon runs no proxy: its forwarder carries
			// the container's connections to the host's gate, and
			// what runs gets the proxy's variables.
			maps.Copy(pl.inner.Env.Set, policy.ProxyEnv(provider.EgressPort))
		case "none":
		default:
			return unsupported("network.mode "+p.Network.Mode, "the container has no host network to give (use proxy)")
		}
		return nil
	}},
	{"network.default", ByHost, "the host's egress gate: a destination no rule settles is denied, or asked for", nil},
	{"network.allow", ByHost, "the host's egress gate", nil},
	{"network.deny", ByHost, "the host's egress gate", nil},
	{"network.max_connections", ByHost, "the host's egress gate", nil},
	{"network.max_connection_rate", ByHost, "the host's egress gate", nil},
	{"env.pass", ByHost, "not passed: no variable of the host's environment enters a provider's sandbox", nil},
	{"env.set", ByInner, "the processes' environment", func(p *policy.Policy, pl *plan) error {
		maps.Copy(pl.inner.Env.Set, p.Env.Set)
		return nil
	}},
	{"env.secrets", ByHost + ", " + ByInner, "the variables hold placeholders (inner daemon); the host's egress gate adds the values", func(p *policy.Policy, pl *plan) error {
		for k, name := range p.Env.Secrets {
			pl.inner.Env.Set[k] = egress.Placeholder(name)
		}
		return nil
	}},
	{"syscalls.profile", ByDocker, "default: Docker's default seccomp profile (checked from the host); strict: refused", func(p *policy.Policy, _ *plan) error {
		if pr := p.Syscalls.Profile; pr != "" && pr != policy.ProfileDefault {
			return unsupported("syscalls.profile "+pr, "the container has Docker's default seccomp profile only")
		}
		return nil
	}},
	{"syscalls.deny", ByNobody, "the container has Docker's default seccomp profile only", func(p *policy.Policy, _ *plan) error {
		if len(p.Syscalls.Deny) > 0 {
			return unsupported("syscalls.deny", "the container has Docker's default seccomp profile only")
		}
		return nil
	}},
}

// Map is the one checkpoint between a policy and a Docker sandbox: it
// takes the host-resolved effective policy and returns how the container
// enforces it (the plan Create applies) and the policy the inner daemon
// still enforces there, or the refusal of the first field nothing
// enforces (provider.ErrUnsupported, naming it). Every path that makes a
// container for a policy passes it: Create with Spec.Policy, and
// MapPolicy, which the relay calls before it makes anything.
func Map(raw json.RawMessage) (*plan, error) {
	p, err := policy.Parse("policy", raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: the policy handed to the provider: %w", provider.ErrUnsupported, Name, err)
	}
	pl := &plan{inner: &policy.Policy{
		Version:        policy.Version,
		IsolationLevel: policy.IsolationProcess,
		Filesystem:     policy.Filesystem{Workspace: p.Filesystem.Workspace},
		Network:        policy.Network{Mode: "none"},
		Env:            policy.Env{Set: map[string]string{}},
	}}
	for _, f := range Fields {
		if f.apply == nil {
			continue
		}
		if err := f.apply(p, pl); err != nil {
			return nil, err
		}
	}
	if len(pl.inner.Env.Set) == 0 {
		pl.inner.Env.Set = nil
	}
	if err := pl.inner.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: the inner daemon's policy: %w", provider.ErrUnsupported, Name, err)
	}
	return pl, nil
}

// MapPolicy implements provider.PolicyMapper.
func (p *Provider) MapPolicy(raw json.RawMessage) (json.RawMessage, error) {
	pl, err := Map(raw)
	if err != nil {
		return nil, err
	}
	return json.Marshal(pl.inner)
}

// tmpfsOptions are the mount options of a tmpfs bounded by the plan.
func (pl *plan) tmpfsOptions() string {
	return "size=" + strconv.FormatInt(pl.disk, 10) + ",nr_inodes=" + strconv.FormatInt(pl.files, 10)
}
