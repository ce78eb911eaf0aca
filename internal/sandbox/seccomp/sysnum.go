package seccomp

import (
	"fmt"
	"runtime"
	"sort"

	"golang.org/x/sys/unix"
)

// The syscall tables are static data generated from golang.org/x/sys/unix's
// zsysnum_linux_*.go (the kernel's own unistd headers): one file per
// supported architecture, built only for it, so nothing is built at init
// and a binary carries only its own table. TestSyscallTables fails when
// they drift from the x/sys version in go.mod.
//
//go:generate go test . -run ^TestSyscallTables$ -update

// sysEntry is one row of sysTable: a syscall of the build architecture.
type sysEntry struct {
	name string
	nr   uint16
}

// sysnum returns the number of syscall name on the build architecture
// (sysTable is sorted by name).
func sysnum(name string) (uint32, bool) {
	i := sort.Search(len(sysTable), func(i int) bool { return sysTable[i].name >= name })
	if i < len(sysTable) && sysTable[i].name == name {
		return uint32(sysTable[i].nr), true
	}
	return 0, false
}

// known reports whether name is a syscall of any supported architecture
// (x86_64, aarch64): the build architecture's table, or foreignNames, the
// names only the other one has.
func known(name string) bool {
	if _, ok := sysnum(name); ok {
		return true
	}
	i := sort.SearchStrings(foreignNames[:], name)
	return i < len(foreignNames) && foreignNames[i] == name
}

// x32Bit marks a syscall of the x32 ABI, which enters the kernel with
// AUDIT_ARCH_X86_64 and its own numbers (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000

// nativeArch returns the build architecture's AUDIT_ARCH value and its
// Linux name.
func nativeArch() (uint32, string, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, "x86_64", nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, "aarch64", nil
	}
	return 0, "", fmt.Errorf("seccomp: architecture %s is not supported (x86_64 and aarch64 are)", runtime.GOARCH)
}
