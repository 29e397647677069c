package sandbox

import (
	"fmt"

	"golang.org/x/net/bpf"
)

// Address families (linux/socket.h) and the netlink protocol glibc and ip
// need to list interfaces (NETLINK_ROUTE).
const (
	afINET       = 2
	afINET6      = 10
	afNetlink    = 16
	netlinkRoute = 0
	setuidSetgid = 0o6000 // S_ISUID|S_ISGID
	widening     = 0o1002 // S_ISVTX|S_IWOTH: what chmod may not give
	groupWrite   = 0o020  // S_IWGRP
)

// SocketFamilies describes, for documentation and tests, the address
// families the filter lets socket create: AF_INET and AF_INET6 (in a
// private network namespace but in open mode), AF_NETLINK with
// NETLINK_ROUTE only (interface listing; the namespace holds only the
// sandbox's own), and AF_UNIX only with SeccompOptions.AllowUnixSockets.
// Every other family — AF_VSOCK (the hypervisor), AF_PACKET, AF_ALG, AF_KEY,
// AF_XDP, AF_BLUETOOTH… — is refused with EPERM, by socket and socketpair
// alike.
var SocketFamilies = []string{"AF_INET", "AF_INET6", "AF_NETLINK (NETLINK_ROUTE)", "AF_UNIX (AllowUnixSockets)"}

// argCheck is a system call the filter decides on its arguments. body runs
// once the call matched, with the accumulator free; it ends in a return on
// every path.
type argCheck struct {
	name    string
	x86Only bool // the call exists only on x86-64 (the legacy, non-*at ones)
	body    func() ([]bpf.Instruction, error)
}

// argumentChecks lists the calls decided on their arguments:
//   - clone with CLONE_NEWUSER (clone3 gets ENOSYS so libc falls back);
//   - personality other than PER_LINUX or the query;
//   - socket and socketpair outside the allowed families (SocketFamilies);
//   - any call that could create a file or directory, or change a mode,
//     with the setuid or setgid bit: chmod, fchmod, fchmodat, fchmodat2,
//     open, openat, creat, mknod, mknodat, mkdir, mkdirat. (openat2 carries
//     its mode in memory the filter cannot read: it gets ENOSYS, so libc and
//     Go fall back to openat.)
//   - a change of mode (ModeChangeSyscalls) giving others write access or
//     the sticky bit, or the group write access unless
//     SeccompOptions.AllowGroupWrite: the workspace's modes are the
//     owner's (a creation's mode is the umask's: the check after the
//     command takes back what it widened).
func argumentChecks(o SeccompOptions) ([]argCheck, error) {
	checks := []argCheck{
		{name: "clone", body: func() ([]bpf.Instruction, error) {
			return assemble(func(a *asm) {
				a.load(0)
				a.jump(bpf.JumpBitsSet, cloneNewUser, "eperm", "allow")
			})
		}},
		{name: "personality", body: func() ([]bpf.Instruction, error) {
			return assemble(func(a *asm) {
				a.load(0)
				a.jump(bpf.JumpEqual, 0, "allow", "")
				a.jump(bpf.JumpEqual, 0xffffffff, "allow", "eperm")
			})
		}},
		{name: "socket", body: func() ([]bpf.Instruction, error) {
			return assemble(func(a *asm) {
				a.load(0)
				a.jump(bpf.JumpEqual, afINET, "allow", "")
				a.jump(bpf.JumpEqual, afINET6, "allow", "")
				if o.AllowUnixSockets {
					a.jump(bpf.JumpEqual, afUnix, "allow", "")
				}
				a.jump(bpf.JumpEqual, afNetlink, "", "eperm")
				a.load(2)
				a.jump(bpf.JumpEqual, netlinkRoute, "allow", "eperm")
			})
		}},
		{name: "socketpair", body: func() ([]bpf.Instruction, error) {
			return assemble(func(a *asm) {
				a.load(0)
				if o.AllowUnixSockets {
					a.jump(bpf.JumpEqual, afUnix, "allow", "eperm")
				} else {
					a.jump(bpf.JumpEqual, 0xffffffff, "allow", "eperm") // never: every family refused
				}
			})
		}},
	}
	for _, m := range []struct {
		name    string
		arg     int
		x86Only bool
	}{
		{"chmod", 1, true}, {"fchmod", 1, false}, {"fchmodat", 2, false}, {"fchmodat2", 2, false},
		{"open", 2, true}, {"openat", 3, false}, {"creat", 1, true},
		{"mknod", 1, true}, {"mknodat", 2, false}, {"mkdir", 1, true}, {"mkdirat", 2, false},
	} {
		refused := uint32(setuidSetgid)
		if _, ok := ModeChangeSyscalls[m.name]; ok {
			refused |= widening
			if !o.AllowGroupWrite {
				refused |= groupWrite
			}
		}
		checks = append(checks, argCheck{name: m.name, x86Only: m.x86Only, body: func() ([]bpf.Instruction, error) {
			return assemble(func(a *asm) {
				a.load(m.arg)
				a.jump(bpf.JumpBitsSet, refused, "eperm", "allow")
			})
		}})
	}
	return checks, nil
}

// ModeCheckedSyscalls lists, for documentation and tests, the calls whose
// mode argument may not carry the setuid or setgid bit, with the argument's
// index.
var ModeCheckedSyscalls = map[string]int{
	"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1,
	"mknod": 1, "mknodat": 2, "mkdir": 1, "mkdirat": 2,
}

// ModeChangeSyscalls lists, for documentation and tests, the calls that
// change a mode, with the mode argument's index: besides the setuid and
// setgid bits, they may not give others write access or the sticky bit,
// nor the group write access unless SeccompOptions.AllowGroupWrite.
var ModeChangeSyscalls = map[string]int{"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2}

// asm assembles one check with local labels: "allow" and "eperm" are
// placed at its end; "" as a target is the next instruction.
type asm struct {
	ins   []bpf.Instruction
	jumps map[int][2]string
}

// load puts the low 32 bits of argument i in the accumulator (the kernel
// reads the modes, flags and families checked here as 32-bit values).
func (a *asm) load(i int) {
	a.ins = append(a.ins, bpf.LoadAbsolute{Off: uint32(seccompDataArg0 + 8*i), Size: 4})
}

func (a *asm) jump(cond bpf.JumpTest, val uint32, onTrue, onFalse string) {
	a.jumps[len(a.ins)] = [2]string{onTrue, onFalse}
	a.ins = append(a.ins, bpf.JumpIf{Cond: cond, Val: val})
}

func assemble(build func(*asm)) ([]bpf.Instruction, error) {
	a := &asm{jumps: map[int][2]string{}}
	build(a)
	labels := map[string]int{"eperm": len(a.ins), "allow": len(a.ins) + 1}
	a.ins = append(a.ins, bpf.RetConstant{Val: seccompRetErrno | errnoEPERM}, bpf.RetConstant{Val: seccompRetAllow})
	for i, targets := range a.jumps {
		j := a.ins[i].(bpf.JumpIf)
		skip := func(label string) (uint8, error) {
			if label == "" {
				return 0, nil
			}
			to, ok := labels[label]
			if !ok || to-i-1 < 0 || to-i-1 > 255 {
				return 0, fmt.Errorf("bad jump to %q from %d", label, i)
			}
			return uint8(to - i - 1), nil
		}
		var err error
		if j.SkipTrue, err = skip(targets[0]); err != nil {
			return nil, err
		}
		if j.SkipFalse, err = skip(targets[1]); err != nil {
			return nil, err
		}
		a.ins[i] = j
	}
	return a.ins, nil
}
