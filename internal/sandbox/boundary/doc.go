// Package boundary is the isolation runtime of an agentbox daemon whose
// outer boundary is a provider's container (serve --boundary container):
// it builds no sandbox of its own (in an unprivileged container it could
// not), and runs each process directly in the container, in a process
// group of its own, with the spec's environment, working directory and
// timeout. What the container enforces (resources, the read-only root,
// writable paths, no capabilities, network none) was checked by the host
// when it mapped the policy onto the container (internal/provider/docker,
// Map); this runtime refuses every part of a Spec the container does not
// enforce and it cannot either: fail closed.
//
// A daemon only has this runtime when it was started with the flag, which
// no API request can set, and only where the process is in such a
// boundary (Verify): not root, no capabilities, no privilege gain, a
// read-only root.
package boundary

// Container is the boundary serve --boundary names: a provider's
// container.
const Container = "container"

// RuntimeName is what Info.Runtime reports.
const RuntimeName = "container"
