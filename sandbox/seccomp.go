package sandbox

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"golang.org/x/net/bpf"
)

// SeccompOptions choose what the filter refuses.
type SeccompOptions struct {
	// AllowUnixSockets lets the command create AF_UNIX sockets, with
	// socket and socketpair alike (the rule names sockets it may use, or
	// the network is proxied).
	AllowUnixSockets bool
	// AllowGroupWrite lets chmod give the group write access (the
	// server's umask gives it); write access for others and the sticky
	// bit are always refused.
	AllowGroupWrite bool
}

// SeccompArch is a supported architecture.
type SeccompArch string

// Supported architectures.
const (
	SeccompAMD64 SeccompArch = "amd64"
	SeccompARM64 SeccompArch = "arm64"
)

// Constants of the kernel's seccomp ABI (linux/seccomp.h, linux/audit.h).
const (
	seccompRetKillProcess = 0x80000000
	seccompRetErrno       = 0x00050000
	seccompRetAllow       = 0x7fff0000

	auditArchX86_64  = 0xC000003E
	auditArchAARCH64 = 0xC00000B7

	// x32 syscalls on x86-64 carry this bit in their number.
	x32SyscallBit = 0x40000000

	errnoEPERM  = 1
	errnoENOSYS = 38

	cloneNewUser = 0x10000000
	afUnix       = 1

	// Offsets in struct seccomp_data. Arguments are u64; on little-endian
	// machines their low 32 bits come first.
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArg0 = 16

	// BPF_MAXINSNS.
	bpfMaxInstructions = 4096
)

// seccompDenied are the syscalls refused with EPERM whatever their
// arguments. Names an architecture lacks are skipped for it.
var seccompDenied = []string{
	// Inspecting or writing other processes.
	"ptrace", "process_vm_readv", "process_vm_writev",
	// Large kernel attack surface the commands have no business with.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
	"bpf", "perf_event_open", "userfaultfd",
	// Changing the mount tree or namespaces the sandbox set up.
	"mount", "umount2", "pivot_root", "move_mount", "open_tree",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"setns", "unshare",
	// Administration of the machine.
	"kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module",
	"swapon", "swapoff", "reboot", "acct", "quotactl", "lookup_dcookie",
	// Opening files by handle escapes bind mounts.
	"name_to_handle_at", "open_by_handle_at",
	// Port I/O (x86 only).
	"iopl", "ioperm",
}

// seccompX86Only are the names of seccompDenied that exist only on x86.
var seccompX86Only = map[string]bool{"iopl": true, "ioperm": true}

// seccompENOSYS are refused with ENOSYS so that libc falls back to an older
// call whose arguments the filter can inspect (clone3 passes its flags in
// memory; clone passes them in a register).
var seccompENOSYS = []string{"clone3", "openat2"}

// DeniedSyscalls lists, for documentation and tests, the syscall names the
// filter refuses (always, whatever the arguments and options), sorted. Some
// exist only on some architectures (iopl, ioperm). clone with
// CLONE_NEWUSER, personality other than PER_LINUX, and socket(AF_UNIX)
// without SeccompOptions.AllowUnixSockets are refused too.
func DeniedSyscalls() []string {
	names := slices.Concat(seccompDenied, seccompENOSYS)
	slices.Sort(names)
	return slices.Compact(names)
}

// HostSeccompArch returns the arch of runtime.GOARCH, or an error wrapping
// ErrUnavailable if unsupported.
func HostSeccompArch() (SeccompArch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return SeccompAMD64, nil
	case "arm64":
		return SeccompARM64, nil
	}
	return "", fmt.Errorf("%w: no seccomp filter for architecture %s (supported: amd64, arm64)", ErrUnavailable, runtime.GOARCH)
}

// SeccompFilter returns the filter program for arch as the bytes bwrap
// --seccomp reads: an array of struct sock_filter in the byte order of the
// (little-endian) target.
func SeccompFilter(arch SeccompArch, o SeccompOptions) ([]byte, error) {
	// The program depends only on its inputs: assembled once, then reused
	// (every sandboxed command needs one).
	key := seccompKey{arch, o}
	if b, ok := seccompCache.Load(key); ok {
		return b.([]byte), nil
	}
	b, err := assembleFilter(arch, o)
	if err != nil {
		return nil, err
	}
	seccompCache.Store(key, b)
	return b, nil
}

type seccompKey struct {
	arch SeccompArch
	o    SeccompOptions
}

// seccompCache holds assembled filters by seccompKey. Callers only read
// what it returns (it goes into a pipe).
var seccompCache sync.Map

// assembleFilter is SeccompFilter without the cache.
func assembleFilter(arch SeccompArch, o SeccompOptions) ([]byte, error) {
	prog, err := SeccompProgram(arch, o)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8*len(prog))
	for _, ins := range prog {
		b = binary.LittleEndian.AppendUint16(b, ins.Op)
		b = append(b, ins.Jt, ins.Jf)
		b = binary.LittleEndian.AppendUint32(b, ins.K)
	}
	return b, nil
}

// SeccompProgram returns the same program as instructions (for tests and
// inspection).
//
// The program checks the architecture (anything else is killed), refuses
// x32 syscalls on x86-64, then compares the syscall number against each
// refused syscall in turn. Every comparison is followed by its own return,
// so no jump is longer than a handful of instructions whatever the length
// of the list, and the syscall number stays in the accumulator except in
// the argument checks, which end in a return either way.
func SeccompProgram(arch SeccompArch, o SeccompOptions) ([]bpf.RawInstruction, error) {
	var (
		table     map[string]uint32
		auditArch uint32
	)
	switch arch {
	case SeccompAMD64:
		table, auditArch = seccompSyscallsAMD64, auditArchX86_64
	case SeccompARM64:
		table, auditArch = seccompSyscallsARM64, auditArchAARCH64
	default:
		return nil, fmt.Errorf("%w: no seccomp filter for architecture %q", ErrUnavailable, arch)
	}
	nr := func(name string) (uint32, error) {
		n, ok := table[name]
		if !ok {
			return 0, fmt.Errorf("seccomp: no number for %s on %s", name, arch)
		}
		return n, nil
	}

	var (
		allow  = bpf.RetConstant{Val: seccompRetAllow}
		eperm  = bpf.RetConstant{Val: seccompRetErrno | errnoEPERM}
		enosys = bpf.RetConstant{Val: seccompRetErrno | errnoENOSYS}
	)
	loadNr := bpf.LoadAbsolute{Off: seccompDataNr, Size: 4}
	// deny returns "if A == n: ret".
	deny := func(n uint32, ret bpf.Instruction) []bpf.Instruction {
		return []bpf.Instruction{
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipTrue: 0, SkipFalse: 1},
			ret,
		}
	}

	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: seccompDataArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1, SkipFalse: 0},
		bpf.RetConstant{Val: seccompRetKillProcess},
		loadNr,
	}
	if arch == SeccompAMD64 {
		prog = append(prog,
			bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32SyscallBit, SkipTrue: 0, SkipFalse: 1},
			eperm,
		)
	}
	for _, name := range seccompDenied {
		if arch != SeccompAMD64 && seccompX86Only[name] {
			continue
		}
		n, err := nr(name)
		if err != nil {
			return nil, err
		}
		prog = append(prog, deny(n, eperm)...)
	}
	for _, name := range seccompENOSYS {
		n, err := nr(name)
		if err != nil {
			return nil, err
		}
		prog = append(prog, deny(n, enosys)...)
	}

	blocks, err := argumentChecks(o)
	if err != nil {
		return nil, err
	}
	for _, b := range blocks {
		n, err := nr(b.name)
		if err != nil {
			if arch != SeccompAMD64 && b.x86Only {
				continue
			}
			return nil, err
		}
		body, err := b.body()
		if err != nil {
			return nil, fmt.Errorf("seccomp: %s: %w", b.name, err)
		}
		if len(body) > 255 {
			return nil, fmt.Errorf("seccomp: %s: %d instructions in one check", b.name, len(body))
		}
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: n, SkipTrue: 0, SkipFalse: uint8(len(body))})
		prog = append(prog, body...)
	}

	prog = append(prog, allow)
	if len(prog) > bpfMaxInstructions {
		return nil, fmt.Errorf("seccomp: program has %d instructions, more than %d", len(prog), bpfMaxInstructions)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: assemble: %w", err)
	}
	return raw, nil
}
