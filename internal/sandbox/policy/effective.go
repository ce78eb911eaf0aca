package policy

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// Effective intersects an operator's global policy with a request's and
// fills in the defaults. The result is never looser than global:
//
//   - limits: the smaller of the two, where zero is "no limit" (so a limit
//     either side sets applies); resources.files is DefaultFiles when
//     neither side sets it; the proxy's connection bounds
//     (network.max_connections, max_connection_rate) are never unlimited:
//     the smaller of the two after defaults;
//   - isolation and syscall profile: the stronger; workspace: ro if either
//     says ro; network.default: deny;
//   - protected patterns, syscall and network denials: the union (with the
//     built-in patterns, which nothing removes);
//   - permissions the request asks for — a network.mode beyond global's
//     (none < proxy < host), network.default ask, read_outside_workspace,
//     extra read and write paths, env.pass names, network.allow rules
//     (each covered by a global rule), filesystem.review_exempt patterns
//     (each in global's list, or the defaults when global has none),
//     allow_degraded — must each be granted by global, else Effective
//     fails naming the field and the global rule; a request that says no
//     mode gets proxy, or global's mode if that is none; one that says no
//     review_exempt gets the defaults global grants;
//   - env.set and env.secrets: the request's, with global's winning on
//     conflicts;
//   - filesystem.workspace_roots: the global policy's alone (a request
//     setting it is refused); it is not part of the result.
//
// A nil global grants everything (there is no operator policy); a nil
// request asks for nothing. Both are validated first.
func Effective(global, req *Policy) (*Policy, error) {
	if req == nil {
		req = &Policy{Version: Version}
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if global == nil {
		return req.withDefaults(), nil
	}
	if err := global.Validate(); err != nil {
		return nil, fmt.Errorf("global policy: %w", err)
	}
	g, r := global.withDefaults(), req.withDefaults()
	e := r.Clone()
	var errs []error
	deny := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}

	if isolationRank(g.IsolationLevel) > isolationRank(r.IsolationLevel) {
		e.IsolationLevel = g.IsolationLevel
	}
	if r.AllowDegraded && !g.AllowDegraded {
		deny("allow_degraded", "not permitted by the global policy (global allow_degraded: false)")
	}
	e.AllowDegraded = r.AllowDegraded && g.AllowDegraded

	e.Resources = Resources{
		Memory:  minLimit(g.Resources.Memory, r.Resources.Memory),
		CPUs:    minLimit(g.Resources.CPUs, r.Resources.CPUs),
		Pids:    minLimit(g.Resources.Pids, r.Resources.Pids),
		Timeout: minLimit(g.Resources.Timeout, r.Resources.Timeout),
		Disk:    minLimit(g.Resources.Disk, r.Resources.Disk),
		Output:  minLimit(g.Resources.Output, r.Resources.Output),
		// As said, not as defaulted: DefaultFiles applies only when
		// neither side sets a number.
		Files: cmp.Or(minLimit(global.Resources.Files, req.Resources.Files), DefaultFiles),
	}

	if g.Filesystem.Workspace == WorkspaceRO {
		e.Filesystem.Workspace = WorkspaceRO
	}
	if len(r.Filesystem.WorkspaceRoots) > 0 {
		deny("filesystem.workspace_roots", "only the operator's global policy says where workspaces may be")
	}
	e.Filesystem.WorkspaceRoots = nil
	if r.Filesystem.ReadOutsideWorkspace && !g.Filesystem.ReadOutsideWorkspace {
		deny("filesystem.read_outside_workspace", "not permitted by the global policy (global filesystem.read_outside_workspace: false)")
	}
	for i, p := range r.Filesystem.Write {
		if !under(p, g.Filesystem.Write) {
			deny("filesystem.write["+strconv.Itoa(i)+"]", "%q is not within a path the global policy makes writable (global filesystem.write: %s)", p, list(g.Filesystem.Write))
		}
	}
	for i, p := range r.Filesystem.Read {
		if !g.Filesystem.ReadOutsideWorkspace && !under(p, slices.Concat(g.Filesystem.Read, g.Filesystem.Write)) {
			deny("filesystem.read["+strconv.Itoa(i)+"]", "%q is not within a path the global policy makes readable (global filesystem.read: %s, write: %s, read_outside_workspace: false)", p, list(g.Filesystem.Read), list(g.Filesystem.Write))
		}
	}
	e.Filesystem.Protected = union(g.Filesystem.Protected, r.Filesystem.Protected)
	granted := g.reviewExempt()
	if req.Filesystem.ReviewExempt == nil {
		// Not said: the defaults, as far as global grants them.
		e.Filesystem.ReviewExempt = []string{}
		for _, p := range DefaultReviewExempt() {
			if slices.Contains(granted, p) {
				e.Filesystem.ReviewExempt = append(e.Filesystem.ReviewExempt, p)
			}
		}
	}
	for i, p := range req.Filesystem.ReviewExempt {
		if !slices.Contains(granted, p) {
			deny("filesystem.review_exempt["+strconv.Itoa(i)+"]", "%q is not granted by the global policy (global filesystem.review_exempt: %s)", p, list(granted))
		}
	}

	switch {
	case req.Network.Mode == "":
		// Not said: the default (proxy), or what the global policy
		// permits if that is less.
		if modeRank(g.Network.Mode) < modeRank(sandbox.NetworkProxy) {
			e.Network.Mode = g.Network.Mode
		}
	case modeRank(r.Network.Mode) > modeRank(g.Network.Mode):
		deny("network.mode", "%s is not permitted by the global policy (global network.mode: %s)", r.Network.Mode, g.Network.Mode)
	}
	if r.Network.Default == NetworkAsk && g.Network.Default != NetworkAsk {
		deny("network.default", "ask is not permitted by the global policy (global network.default: %s)", g.Network.Default)
	}
	for i, s := range r.Network.Allow {
		if !covered(s, g.Network.Allow) {
			deny("network.allow["+strconv.Itoa(i)+"]", "%q is not covered by the global policy's allow rules (global network.allow: %s)", s, list(g.Network.Allow))
		}
	}
	e.Network.Deny = union(g.Network.Deny, r.Network.Deny)
	e.Network.MaxConnections = min(g.Network.MaxConnections, r.Network.MaxConnections)
	e.Network.MaxConnectionRate = min(g.Network.MaxConnectionRate, r.Network.MaxConnectionRate)

	for i, name := range r.Env.Pass {
		if !slices.Contains(g.Env.Pass, name) {
			deny("env.pass["+strconv.Itoa(i)+"]", "%s may not be passed: the global policy does not list it (global env.pass: %s)", name, list(g.Env.Pass))
		}
	}
	if len(g.Env.Set) > 0 {
		if e.Env.Set == nil {
			e.Env.Set = map[string]string{}
		}
		maps.Copy(e.Env.Set, g.Env.Set)
	}
	if len(g.Env.Secrets) > 0 {
		if e.Env.Secrets == nil {
			e.Env.Secrets = map[string]string{}
		}
		maps.Copy(e.Env.Secrets, g.Env.Secrets)
	}

	if g.Syscalls.Profile == ProfileStrict {
		e.Syscalls.Profile = ProfileStrict
	}
	e.Syscalls.Deny = union(g.Syscalls.Deny, r.Syscalls.Deny)

	if len(errs) > 0 {
		return nil, fmt.Errorf("policy exceeds the global policy: %w", errors.Join(errs...))
	}
	return e, nil
}

// covered reports whether the rule s lies within one of the rules of
// global (see egress.Rule.Covers). Rules that do not parse cover nothing.
func covered(s string, global []string) bool {
	r, err := ParseRule(s)
	if err != nil {
		return false
	}
	for _, gs := range global {
		if g, err := ParseRule(gs); err == nil && g.Covers(r) {
			return true
		}
	}
	return false
}

// CheckAllow checks allow rules that replace a running sandbox's (PUT
// /v1/sessions/{id}/network) against the global policy, as Effective
// checks a request's; every refusal is listed.
func CheckAllow(global *Policy, allow []string) error {
	var errs []error
	for i, s := range allow {
		field := "network.allow[" + strconv.Itoa(i) + "]"
		if _, err := ParseRule(s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
			continue
		}
		if global != nil && !covered(s, global.Network.Allow) {
			errs = append(errs, fmt.Errorf("%s: %q is not covered by the global policy's allow rules (global network.allow: %s)", field, s, list(global.Network.Allow)))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("policy exceeds the global policy: %w", errors.Join(errs...))
	}
	return nil
}

// under reports whether p is one of roots or below one of them.
func under(p string, roots []string) bool {
	p = path.Clean(p)
	for _, r := range roots {
		if sandbox.Within(p, path.Clean(r)) {
			return true
		}
	}
	return false
}

func list(s []string) string {
	if len(s) == 0 {
		return "[]"
	}
	return "[" + strings.Join(s, ", ") + "]"
}
