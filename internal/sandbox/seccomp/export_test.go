package seccomp

import "slices"

// Rules returns every rule of profile: the argument rules, then the
// unconditional denies. It returns nil for an unknown profile.
func Rules(profile string) []Rule {
	names := Denied(profile)
	if names == nil {
		return nil
	}
	out := slices.Clone(argRules)
	for _, n := range names {
		out = append(out, Rule{Syscall: n, Errno: "EPERM"})
	}
	return out
}
