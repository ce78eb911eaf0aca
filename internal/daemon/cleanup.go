package daemon

// cleanup is the stack of what a constructor has opened so far (gVisor's
// cleanup.Cleanup, containerd's retErr defers): each step adds how to
// undo what it opened; run undoes everything, last first, unless release
// was called once the whole construction succeeded. Undoing is best
// effort: the step's own error is the one the constructor reports.
type cleanup struct {
	undo []func()
}

// add pushes f, run before everything added earlier.
func (c *cleanup) add(f func()) { c.undo = append(c.undo, f) }

// release keeps everything: run does nothing after it.
func (c *cleanup) release() { c.undo = nil }

// run undoes everything added since the last release, last first.
func (c *cleanup) run() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i]()
	}
	c.undo = nil
}
