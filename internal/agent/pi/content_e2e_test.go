package pi

import "testing"

// TestE2EContent proves the adapter's Images and Files flags with the real
// CLI: an image part reaches the fake model with its bytes, a file part
// with its content, and a part the flags exclude is refused 422
// (agenttest.Stack.CheckContent).
func TestE2EContent(t *testing.T) {
	s := newStack(t)
	s.CheckContent(t)
}
