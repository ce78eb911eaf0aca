// Package reexec is the registry of the helper processes this binary
// becomes when it re-executes itself (/proc/self/exe) under another name:
// the sandbox init, the agent-tree supervisor, the deathwatch, the probe
// helpers. Each helper registers its main from its own package's init;
// nothing runs until the program's main calls Init, first, which runs the
// helper argv names and exits. cmd/agentbox/main.go lists every name.
//
// Every path that re-executes the binary calls Check first, so a program
// that never called Init gets an error rather than a child running its own
// main. A test binary that re-executes itself as one of these helpers must
// call Init from its TestMain (internal/reexec/reexectest.Main does).
package reexec

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

var (
	mu      sync.Mutex
	helpers = map[string]func() int{}
	called  atomic.Bool
)

// Register makes name (a helper's argv[0]) run main, whose result is the
// process's exit code. It panics on an empty or duplicate name.
func Register(name string, main func() int) {
	mu.Lock()
	defer mu.Unlock()
	if name == "" || main == nil {
		panic("reexec: Register with an empty name or a nil main")
	}
	if _, dup := helpers[name]; dup {
		panic(fmt.Sprintf("reexec: helper %q registered twice", name))
	}
	helpers[name] = main
}

// Init runs the helper that os.Args names and exits with its code; when
// argv names no helper it returns false. A helper is named by the base
// name of argv[0] or, for PID 1 started by a kernel with exactly one
// argument (its argv[0] is the init path, which it cannot choose), by
// that argument. Call it first in main, before anything else starts.
func Init() bool {
	called.Store(true)
	if main := lookup(os.Getpid(), os.Args); main != nil {
		os.Exit(main())
	}
	return false
}

// Initialized reports whether Init has run in this process: an entry
// point that will re-execute the binary refuses to start without it.
func Initialized() bool { return called.Load() }

// Check is what every code path calls before it re-executes the binary as
// helper name: it fails unless Init ran in this process (otherwise the
// child would run the program's own main, or a test binary its tests) and
// name is registered.
func Check(name string) error {
	if !called.Load() {
		return fmt.Errorf("reexec: cannot start helper %s: the program did not call reexec.Init (agentbox.Init) first in main (a test binary: in TestMain)", name)
	}
	mu.Lock()
	defer mu.Unlock()
	if helpers[name] == nil {
		return fmt.Errorf("reexec: no helper %s is registered", name)
	}
	return nil
}

// lookup returns the main args names, or nil.
func lookup(pid int, args []string) func() int {
	if len(args) == 0 {
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	if main := helpers[filepath.Base(args[0])]; main != nil {
		return main
	}
	if pid == 1 && len(args) == 2 {
		return helpers[args[1]]
	}
	return nil
}

// Names returns the registered names, for listing.
func Names() []string {
	mu.Lock()
	defer mu.Unlock()
	names := make([]string, 0, len(helpers))
	for n := range helpers {
		names = append(names, n)
	}
	return names
}
