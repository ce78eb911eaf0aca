package process

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/internal/sandbox"
)

// The supervisor and the sandbox init talk over two inherited descriptors:
//
//   - fd 3, a pipe carrying one JSON initConfig. The init does nothing
//     before it arrives, and the supervisor writes it only after the init's
//     pid is in the sandbox's cgroup: this is the start gate (cgroup v1 has
//     no CLONE_INTO_CGROUP).
//   - fd 4, a SOCK_SEQPACKET socket carrying one JSON message per packet.
//     Start messages carry the command's stdin, stdout and stderr as
//     SCM_RIGHTS; "started" replies carry a pidfd of the command.
//
// The init inherits nothing else: the detached mounts made on the host
// side (see host_linux.go) come after the config, over the control
// socket, as "fds" packets of at most fdBatch descriptors each, in the
// order of initConfig.Mounts; with the egress proxy, the descriptor after
// the mounts is the init's end of the egress socket pair. So an init can
// be started before its sandbox's policy is known (a spare, see
// spare_linux.go), and a cold start is the same steps without the wait.
const (
	fdConfig  = 3
	fdControl = 4
	fdBatch   = 64
)

// initConfig is everything the init needs to build the sandbox.
type initConfig struct {
	WorkspaceDir         string   `json:"workspace_dir"`
	ReadOutsideWorkspace bool     `json:"read_outside_workspace"`
	HideDirs             []string `json:"hide_dirs,omitempty"`
	// Mounts are the detached host mounts passed over the control socket
	// after the config, each moved to Target inside.
	Mounts  []detachedMount `json:"mounts"`
	Overlay *overlayConfig  `json:"overlay,omitempty"`
	// StateOverlays are the state directories' overlays, from the
	// "state-lower" and "state-upper" mounts of the same Index.
	StateOverlays []overlayConfig `json:"state_overlays,omitempty"`
	Home          string          `json:"home"`
	Hostname      string          `json:"hostname"`
	NetNone       bool            `json:"net_none"`
	// EgressPort, when not 0, makes the init listen on 127.0.0.1:port
	// and pass each connection to the supervisor over the descriptor
	// sent after the mounts (EgressFD, inside the init; see
	// egress_linux.go).
	EgressPort int `json:"egress_port,omitempty"`
	EgressFD   int `json:"-"`
	// mountFDs are the init's descriptors of Mounts, as received.
	mountFDs []int
	ShmBytes int64            `json:"shm_bytes"`
	ShmFiles int64            `json:"shm_files,omitempty"`
	Syscalls sandbox.Syscalls `json:"syscalls"`
	// Degraded lists mechanisms the supervisor already knows are missing
	// and which the spec allowed to go without.
	AllowDegraded bool `json:"allow_degraded"`
	// Landlock is required unless AllowDegraded.
	WritableDirs []string `json:"writable_dirs"`
}

// detachedMount is one host-side mount handed to the init.
type detachedMount struct {
	// Target is the path inside the sandbox; empty for overlay layers,
	// which the init attaches to a staging directory.
	Target string `json:"target"`
	// Role is "lower", "upper", "state-lower", "state-upper", "root", or
	// "" for a plain mount.
	Role string `json:"role,omitempty"`
	// Index is the state overlay a state layer belongs to.
	Index int `json:"index,omitempty"`
}

// overlayConfig says how to assemble the workspace overlay from the
// "lower" and "upper" detached mounts.
type overlayConfig struct {
	Target string `json:"target"`
	Index  int    `json:"index,omitempty"`
}

// message is one control packet, in either direction.
type message struct {
	Op string `json:"op"`
	ID uint64 `json:"id,omitempty"`

	// start (supervisor → init)
	Args []string `json:"args,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// TTY: the three descriptors are one terminal, to become the
	// command's controlling terminal.
	TTY bool `json:"tty,omitempty"`

	// ready, started (init → supervisor)
	Error string `json:"error,omitempty"`
	// Missing names the mechanism the init could not apply (ready).
	Missing    string   `json:"missing,omitempty"`
	Mechanisms []string `json:"mechanisms,omitempty"`
	Degraded   []string `json:"degraded,omitempty"`
	Pid        int      `json:"pid,omitempty"`
	// NoCommand (started): the program was not found (the error says
	// which); the host wraps sandbox.ErrNoCommand.
	NoCommand bool `json:"no_command,omitempty"`

	// exit (init → supervisor)
	Code        int   `json:"code"`
	Signal      int   `json:"signal,omitempty"`
	MaxRSSBytes int64 `json:"max_rss,omitempty"`
	CPUMillis   int64 `json:"cpu_ms,omitempty"`
}

// Control operations.
const (
	opReady   = "ready"
	opStart   = "start"
	opStarted = "started"
	opExit    = "exit"
	// opFDs carries descriptors of the init's config (supervisor → init).
	opFDs = "fds"
)

// maxPacket bounds one control packet; a start message with a large
// environment must fit.
const maxPacket = 1 << 20

// maxReply bounds a packet from the init (ready, started, exit), which
// holds no caller data: the supervisor reads them into a buffer of this
// size for the sandbox's whole life, so it is kept small (a 1 MiB buffer
// per sandbox cost a page fault per 4 KiB and the GC's time, on every
// Create). The init shortens a longer error to fit; a packet that does
// not fit anyway is a confused init, and ends the sandbox.
const maxReply = 16 << 10

// decodeMessage parses one control packet. The supervisor treats the
// init's packets as untrusted input: a compromised init must not be able
// to do more than end its own sandbox.
func decodeMessage(b []byte) (message, error) {
	var m message
	if len(b) == 0 {
		return m, errors.New("empty control packet")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("decode control packet: %w", err)
	}
	switch m.Op {
	case opReady, opStart, opStarted, opExit, opFDs:
	default:
		return m, fmt.Errorf("unknown control op %q", m.Op)
	}
	if m.Pid < 0 {
		return m, fmt.Errorf("control packet: negative pid %d", m.Pid)
	}
	return m, nil
}
