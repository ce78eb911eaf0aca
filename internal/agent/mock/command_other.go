//go:build !unix

package mock

import "os/exec"

// killGroupOnCancel keeps exec's default: only the shell is killed.
func killGroupOnCancel(*exec.Cmd) {}
