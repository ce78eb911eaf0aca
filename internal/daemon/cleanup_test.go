package daemon

import (
	"slices"
	"testing"
)

func TestCleanup(t *testing.T) {
	var got []int
	push := func(c *cleanup, n int) { c.add(func() { got = append(got, n) }) }

	var c cleanup
	push(&c, 1)
	push(&c, 2)
	push(&c, 3)
	c.run()
	c.run() // once only
	if want := []int{3, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("run undid %v, want %v (last first, once)", got, want)
	}

	got = nil
	var kept cleanup
	push(&kept, 1)
	kept.release()
	kept.run()
	if len(got) != 0 {
		t.Errorf("run after release undid %v, want nothing", got)
	}
}
