package install

// Known returns the agents this package can install, with their pins.
func Known() []Spec { return known() }

// Status is Lookup for /v1/agents: whether the agent is installed, its
// installed version and the absolute path of its binary (both empty when it
// is not installed).
func Status(name string) (installed bool, version, path string) {
	in, ok, err := Lookup(name)
	if err != nil || !ok {
		return false, "", ""
	}
	return true, in.Version, in.Binary
}
