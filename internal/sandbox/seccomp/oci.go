package seccomp

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// OCI returns the same profile as an OCI runtime-spec seccomp section, for
// runtimes that install the filter themselves (runsc --oci-seccomp). The
// foreign-ABI kill has no OCI form (listing only the native architecture
// makes the runtime refuse other ABIs), nor has personality's allowlist
// (one comparison per argument), which is left out.
func OCI(profile string, extraDeny []string) (*specs.LinuxSeccomp, error) {
	if err := Check(profile, extraDeny); err != nil {
		return nil, err
	}
	_, archName, err := nativeArch()
	if err != nil {
		return nil, err
	}
	scmpArch := map[string]specs.Arch{"x86_64": specs.ArchX86_64, "aarch64": specs.ArchAARCH64}[archName]
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	deny := func(name string, args ...specs.LinuxSeccompArg) specs.LinuxSyscall {
		return specs.LinuxSyscall{Names: []string{name}, Action: specs.ActErrno, ErrnoRet: &eperm, Args: args}
	}
	eq := func(i uint, v uint64) specs.LinuxSeccompArg {
		return specs.LinuxSeccompArg{Index: i, Value: v, Op: specs.OpEqualTo}
	}
	s := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: []specs.Arch{scmpArch},
		Syscalls: []specs.LinuxSyscall{
			{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
		},
	}
	// OCI rules are ANDed within an entry and ORed across entries, and
	// have no "any of these bits" test: one entry per CLONE_NEW* flag.
	for bit := uint64(1); bit != 0 && bit <= cloneNewMask; bit <<= 1 {
		if cloneNewMask&bit != 0 {
			s.Syscalls = append(s.Syscalls, deny("clone", specs.LinuxSeccompArg{Index: 0, Value: bit, ValueTwo: bit, Op: specs.OpMaskedEqual}))
		}
	}
	s.Syscalls = append(s.Syscalls,
		deny("socket", eq(2, ipprotoMPTCP)),
		deny("socket", eq(0, afPacket)),
		deny("ioctl", eq(1, tiocsti)),
		deny("ioctl", eq(1, tioclinux)),
	)
	var names []string
	seen := map[string]bool{}
	for _, n := range append(Denied(profile), extraDeny...) {
		if _, ok := sysnum(n); ok && !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("seccomp: empty deny list")
	}
	s.Syscalls = append(s.Syscalls, specs.LinuxSyscall{Names: names, Action: specs.ActErrno, ErrnoRet: &eperm})
	return s, nil
}
