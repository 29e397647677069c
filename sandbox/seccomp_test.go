package sandbox

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/bpf"
)

var seccompArches = []SeccompArch{SeccompAMD64, SeccompARM64}

var seccompOptionSets = []SeccompOptions{{}, {AllowUnixSockets: true}, {AllowGroupWrite: true}}

// unixSysnums parses the SYS_* constants of golang.org/x/sys/unix for arch
// from its source (the constants of another architecture cannot be
// imported), keyed by lower-case syscall name.
func unixSysnums(t *testing.T, arch SeccompArch) map[string]uint32 {
	t.Helper()
	xsysOnce.Do(func() {
		out, err := exec.Command(goTool(), "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
		if err != nil {
			xsysErr = fmt.Errorf("go list golang.org/x/sys: %v", err)
			return
		}
		xsysDir = strings.TrimSpace(string(out))
	})
	if xsysErr != nil {
		t.Fatal(xsysErr)
	}
	return parseSysnums(t, filepath.Join(xsysDir, "unix", "zsysnum_linux_"+string(arch)+".go"))
}

var (
	xsysOnce sync.Once
	xsysDir  string
	xsysErr  error
)

var sysnumRE = regexp.MustCompile(`(?m)^\s*SYS_([A-Z0-9_]+)\s*=\s*(\d+)\b`)

func parseSysnums(t *testing.T, path string) map[string]uint32 {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]uint32{}
	for _, sm := range sysnumRE.FindAllSubmatch(src, -1) {
		n, err := strconv.ParseUint(string(sm[2]), 10, 32)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, sm[0], err)
		}
		m[strings.ToLower(string(sm[1]))] = uint32(n)
	}
	if len(m) < 200 {
		t.Fatalf("%s: only %d syscall numbers parsed", path, len(m))
	}
	return m
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "go"
}

// goRoot asks the go command for its GOROOT.
func goRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(goTool(), "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func seccompTable(arch SeccompArch) map[string]uint32 {
	if arch == SeccompAMD64 {
		return seccompSyscallsAMD64
	}
	return seccompSyscallsARM64
}

func TestSeccompTables(t *testing.T) {
	checks, err := argumentChecks(SeccompOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := slices.Concat(seccompDenied, seccompENOSYS)
	x86Only := maps.Clone(seccompX86Only)
	for _, c := range checks {
		used = append(used, c.name)
		if c.x86Only {
			x86Only[c.name] = true
		}
	}
	for _, arch := range seccompArches {
		want := unixSysnums(t, arch)
		table := seccompTable(arch)
		for name, n := range table {
			if w, ok := want[name]; !ok {
				t.Errorf("%s: %s is not a syscall in x/sys/unix", arch, name)
			} else if n != w {
				t.Errorf("%s: %s = %d, x/sys/unix says %d", arch, name, n, w)
			}
		}
		for _, name := range used {
			_, inTable := table[name]
			_, exists := want[name]
			if inTable != exists {
				t.Errorf("%s: %s in table = %v, exists in x/sys/unix = %v", arch, name, inTable, exists)
			}
			if !inTable && !(arch != SeccompAMD64 && x86Only[name]) {
				t.Errorf("%s: %s has no number", arch, name)
			}
		}
		// Second opinion where the standard library knows the syscall.
		std := parseSysnums(t, filepath.Join(goRoot(t), "src", "syscall", "zsysnum_linux_"+string(arch)+".go"))
		for name, n := range table {
			if w, ok := std[name]; ok && w != n {
				t.Errorf("%s: %s = %d, package syscall says %d", arch, name, n, w)
			}
		}
	}
}

func TestSeccompDeniedSyscalls(t *testing.T) {
	got := DeniedSyscalls()
	if !slices.IsSorted(got) {
		t.Errorf("DeniedSyscalls not sorted: %v", got)
	}
	for _, name := range []string{"ptrace", "unshare", "setns", "mount", "keyctl", "bpf", "io_uring_setup", "clone3", "iopl"} {
		if !slices.Contains(got, name) {
			t.Errorf("DeniedSyscalls lacks %s", name)
		}
	}
	for _, name := range []string{"clone", "socket", "socketpair", "personality", "read"} {
		if slices.Contains(got, name) {
			t.Errorf("DeniedSyscalls has %s, which is allowed (at least with some arguments)", name)
		}
	}
}

func TestHostSeccompArch(t *testing.T) {
	arch, err := HostSeccompArch()
	switch runtime.GOARCH {
	case "amd64", "arm64":
		if err != nil || string(arch) != runtime.GOARCH {
			t.Errorf("HostSeccompArch() = %q, %v", arch, err)
		}
	default:
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("HostSeccompArch() = %q, %v; want ErrUnavailable", arch, err)
		}
	}
	if _, err := SeccompProgram("mips", SeccompOptions{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("SeccompProgram(mips) error = %v, want ErrUnavailable", err)
	}
	if _, err := SeccompFilter("", SeccompOptions{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("SeccompFilter(\"\") error = %v, want ErrUnavailable", err)
	}
}

func TestSeccompFilterBytes(t *testing.T) {
	for _, arch := range seccompArches {
		for _, o := range seccompOptionSets {
			prog, err := SeccompProgram(arch, o)
			if err != nil {
				t.Fatal(err)
			}
			b, err := SeccompFilter(arch, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s %+v: %d instructions", arch, o, len(prog))
			if len(prog) == 0 || len(prog) > 4096 {
				t.Errorf("%s: %d instructions", arch, len(prog))
			}
			if len(b) != 8*len(prog) {
				t.Fatalf("%s: %d bytes for %d instructions", arch, len(b), len(prog))
			}
			var back []bpf.RawInstruction
			for i := 0; i < len(b); i += 8 {
				back = append(back, bpf.RawInstruction{
					Op: binary.LittleEndian.Uint16(b[i:]),
					Jt: b[i+2],
					Jf: b[i+3],
					K:  binary.LittleEndian.Uint32(b[i+4:]),
				})
			}
			if !slices.Equal(back, prog) {
				t.Errorf("%s: bytes do not round-trip to the program", arch)
			}
			// Every instruction decodes, and the last one returns.
			insns, ok := bpf.Disassemble(prog)
			if !ok {
				t.Errorf("%s: program does not disassemble fully", arch)
			}
			if _, ok := insns[len(insns)-1].(bpf.RetConstant); !ok {
				t.Errorf("%s: last instruction is %v", arch, insns[len(insns)-1])
			}
			again, _ := SeccompFilter(arch, o)
			if !bytes.Equal(b, again) {
				t.Errorf("%s: filter is not deterministic", arch)
			}
		}
	}
}

// seccompCall is one synthetic system call.
type seccompCall struct {
	arch uint32
	nr   uint32
	args [6]uint64
}

// runSeccompVM runs prog in x/net/bpf's VM. The VM loads words big-endian
// (network order) while the kernel loads seccomp_data in native
// (little-endian) order, so the data is laid out word by word in big-endian
// to give the VM the same values the kernel sees.
func runSeccompVM(t *testing.T, vm *bpf.VM, c seccompCall) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], c.nr)
	binary.BigEndian.PutUint32(data[4:], c.arch)
	for i, a := range c.args {
		binary.BigEndian.PutUint32(data[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[20+8*i:], uint32(a>>32))
	}
	v, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(v)
}

// runSeccompRaw interprets the raw program the way the kernel does, on
// little-endian seccomp_data, for the instructions the filter uses.
func runSeccompRaw(t *testing.T, prog []bpf.RawInstruction, c seccompCall) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[0:], c.nr)
	binary.LittleEndian.PutUint32(data[4:], c.arch)
	for i, a := range c.args {
		binary.LittleEndian.PutUint64(data[16+8*i:], a)
	}
	var a uint32
	for pc := 0; pc < len(prog); pc++ {
		ins := prog[pc]
		switch ins.Op {
		case 0x20: // BPF_LD|BPF_W|BPF_ABS
			if ins.K%4 != 0 || ins.K+4 > 64 {
				t.Fatalf("pc %d: bad load offset %d", pc, ins.K)
			}
			a = binary.LittleEndian.Uint32(data[ins.K:])
		case 0x06: // BPF_RET|BPF_K
			return ins.K
		case 0x15, 0x35, 0x45: // BPF_JMP|BPF_JEQ, JGE, JSET with BPF_K
			var ok bool
			switch ins.Op {
			case 0x15:
				ok = a == ins.K
			case 0x35:
				ok = a >= ins.K
			case 0x45:
				ok = a&ins.K != 0
			}
			if ok {
				pc += int(ins.Jt)
			} else {
				pc += int(ins.Jf)
			}
		default:
			t.Fatalf("pc %d: unexpected opcode %#x", pc, ins.Op)
		}
	}
	t.Fatal("program fell off its end")
	return 0
}

func TestSeccompProgramSemantics(t *testing.T) {
	const (
		allow  = seccompRetAllow
		kill   = seccompRetKillProcess
		eperm  = seccompRetErrno | 1
		enosys = seccompRetErrno | 38
	)
	audit := map[SeccompArch]uint32{SeccompAMD64: auditArchX86_64, SeccompARM64: auditArchAARCH64}
	for _, arch := range seccompArches {
		sys := unixSysnums(t, arch)
		num := func(name string) uint32 {
			n, ok := sys[name]
			if !ok {
				t.Fatalf("%s: no syscall %s", arch, name)
			}
			return n
		}
		for _, o := range seccompOptionSets {
			t.Run(fmt.Sprintf("%s/unix=%v", arch, o.AllowUnixSockets), func(t *testing.T) {
				prog, err := SeccompProgram(arch, o)
				if err != nil {
					t.Fatal(err)
				}
				insns, ok := bpf.Disassemble(prog)
				if !ok {
					t.Fatal("program does not disassemble")
				}
				vm, err := bpf.NewVM(insns)
				if err != nil {
					t.Fatal(err)
				}
				check := func(desc string, c seccompCall, want uint32) {
					t.Helper()
					if c.arch == 0 {
						c.arch = audit[arch]
					}
					if got := runSeccompVM(t, vm, c); got != want {
						t.Errorf("%s: VM returned %#x, want %#x", desc, got, want)
					}
					if got := runSeccompRaw(t, prog, c); got != want {
						t.Errorf("%s: raw interpreter returned %#x, want %#x", desc, got, want)
					}
				}
				call := func(name string, args ...uint64) seccompCall {
					c := seccompCall{nr: num(name)}
					copy(c.args[:], args)
					return c
				}

				for _, name := range DeniedSyscalls() {
					if _, ok := sys[name]; !ok {
						if arch == SeccompAMD64 || !seccompX86Only[name] {
							t.Errorf("denied syscall %s does not exist on %s", name, arch)
						}
						continue
					}
					want := uint32(eperm)
					if slices.Contains(seccompENOSYS, name) {
						want = enosys
					}
					check(name, call(name), want)
					check(name+" with arguments", call(name, 1, 0xffffffff, 3, 4, 5, 6), want)
				}
				for _, name := range []string{"read", "write", "openat", "execve", "close", "mmap", "exit_group", "wait4"} {
					check(name, call(name, 3, 0, 0), allow)
				}

				const cloneFork = 0x01200011        // CLONE_CHILD_SETTID|CLONE_CHILD_CLEARTID|SIGCHLD
				const cloneThread = 0x003d0f00      // what pthread_create passes
				const cloneNewNet = 0x40000000      // CLONE_NEWNET
				const cloneNewUserFlag = 0x10000000 // CLONE_NEWUSER
				check("clone fork", call("clone", cloneFork), allow)
				check("clone thread", call("clone", cloneThread), allow)
				check("clone newnet", call("clone", cloneNewNet|0x11), allow)
				check("clone newuser", call("clone", cloneNewUserFlag), eperm)
				check("clone newuser|fork", call("clone", cloneNewUserFlag|cloneFork), eperm)
				check("clone newuser in upper half (ignored by the kernel)", call("clone", cloneNewUserFlag<<32|0x11), allow)

				wantUnix := uint32(eperm)
				if o.AllowUnixSockets {
					wantUnix = allow
				}
				check("socket(AF_UNIX)", call("socket", 1, 1, 0), wantUnix)
				check("socket(AF_UNIX, SOCK_DGRAM|SOCK_CLOEXEC)", call("socket", 1, 0x80002, 0), wantUnix)
				check("socket(AF_UNIX) with upper bits", call("socket", 1<<32|1, 1, 0), wantUnix)
				check("socket(AF_INET)", call("socket", 2, 1, 0), allow)
				check("socket(AF_INET6)", call("socket", 10, 2, 0), allow)
				check("socket(AF_NETLINK, NETLINK_ROUTE)", call("socket", 16, 3, 0), allow)
				check("socket(AF_NETLINK, NETLINK_AUDIT)", call("socket", 16, 3, 9), eperm)
				check("socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT)", call("socket", 16, 2, 15), eperm)
				for fam, name := range map[uint64]string{40: "AF_VSOCK", 17: "AF_PACKET", 38: "AF_ALG", 15: "AF_KEY", 44: "AF_XDP", 31: "AF_BLUETOOTH", 30: "AF_TIPC", 0: "AF_UNSPEC", 0xffff: "unknown"} {
					check("socket("+name+")", call("socket", fam, 1, 0), eperm)
					check("socketpair("+name+")", call("socketpair", fam, 1, 0), eperm)
				}
				check("socketpair(AF_UNIX)", call("socketpair", 1, 1, 0), wantUnix)
				check("socketpair(AF_UNIX) with upper bits", call("socketpair", 1<<32|1, 1, 0), wantUnix)
				check("socketpair(AF_INET)", call("socketpair", 2, 1, 0), eperm)

				// No setuid or setgid bit, whatever creates or changes the mode.
				for name, arg := range ModeCheckedSyscalls {
					if _, ok := sys[name]; !ok {
						continue // the legacy calls exist only on x86-64
					}
					args := func(mode uint64) []uint64 {
						a := []uint64{3, 0x1000, 0x241, 0}
						a[arg] = mode
						return a
					}
					check(name+" 0644", call(name, args(0o644)...), allow)
					check(name+" 0755|S_IFREG", call(name, args(0o100755)...), allow)
					check(name+" setuid", call(name, args(0o4755)...), eperm)
					check(name+" setgid", call(name, args(0o2755)...), eperm)
					check(name+" setuid in the upper half (ignored by the kernel)", call(name, args(0o4755<<32|0o755)...), allow)
					widen, group := uint32(allow), uint32(allow)
					if _, ok := ModeChangeSyscalls[name]; ok {
						widen = eperm
						if !o.AllowGroupWrite {
							group = eperm
						}
					}
					check(name+" 0666", call(name, args(0o666)...), widen)
					check(name+" 1755", call(name, args(0o1755)...), widen)
					check(name+" 0775", call(name, args(0o775)...), group)
				}

				check("personality(PER_LINUX)", call("personality", 0), allow)
				check("personality query", call("personality", 0xffffffff), allow)
				check("personality query (sign-extended)", call("personality", 0xffffffffffffffff), allow)
				check("personality(ADDR_NO_RANDOMIZE)", call("personality", 0x0040000), eperm)
				check("personality(PER_LINUX32)", call("personality", 8), eperm)

				// Other architectures are killed, whatever the call.
				for _, a := range []uint32{0x40000003 /* i386 */, auditArchX86_64, auditArchAARCH64, 0x40000028 /* arm */, 0} {
					if a == audit[arch] {
						continue
					}
					c := call("read")
					c.arch = a
					if a == 0 {
						c.arch = 1 // check() fills in a zero arch
					}
					check(fmt.Sprintf("arch %#x", a), c, kill)
				}

				if arch == SeccompAMD64 {
					for _, nr := range []uint32{0x40000000, 0x40000000 | 1, 0x40000000 | 56, 0x40000000 | 512, 0xffffffff} {
						check(fmt.Sprintf("x32 nr %#x", nr), seccompCall{nr: nr}, eperm)
					}
				} else {
					check("nr 0x40000000 on arm64", seccompCall{nr: 0x40000000}, allow)
				}
			})
		}
	}
}

// buildSeccompProbe builds internal/seccompprobe, or returns the one named
// by COILY_TEST_SECCOMP_PROBE (prebuilt for runs as another user).
func buildSeccompProbe(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("COILY_TEST_SECCOMP_PROBE"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "probe")
	cmd := exec.Command(goTool(), "build", "-o", bin, "coily.dev/coily/internal/seccompprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	return bin
}

// runBwrapSeccomp runs argv under bwrap with filter (nil: none) on fd 3.
func runBwrapSeccomp(t *testing.T, bwrap string, filter []byte, argv ...string) (string, error) {
	t.Helper()
	args := []string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent"}
	cmd := exec.Command(bwrap)
	if filter != nil {
		path := filepath.Join(t.TempDir(), "filter")
		if err := os.WriteFile(path, filter, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = []*os.File{f} // fd 3 in bwrap
		args = append(args, "--seccomp", "3")
	}
	cmd.Args = append(append(cmd.Args, args...), argv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestSeccompBwrap(t *testing.T) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bwrap is missing")
		}
		t.Skip("bwrap is missing")
	}
	arch, err := HostSeccompArch()
	if err != nil {
		t.Skip(err)
	}
	if out, err := runBwrapSeccomp(t, bwrap, nil, "/bin/true"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bwrap does not work here: %v\n%s", err, out)
		}
		t.Skipf("bwrap does not work here: %v\n%s", err, out)
	}
	probe := buildSeccompProbe(t)
	checks := []string{
		"unix-socket", "inet-socket", "socketpair", "unshare-user", "clone-newuser", "fork-exec",
		"ptrace", "keyctl", "io-uring", "clone3", "mount", "personality-query", "personality-norandom",
		"vsock-socket", "netlink-route", "netlink-audit", "chmod-plain", "chmod-setuid", "fchmod-setgid",
		"create-setuid", "mkdir-setgid", "openat2",
	}
	if out, err := runBwrapSeccomp(t, bwrap, nil, append([]string{probe}, checks...)...); err == nil {
		t.Logf("without the filter:\n%s", out)
	}

	for _, o := range seccompOptionSets {
		t.Run(fmt.Sprintf("unix=%v", o.AllowUnixSockets), func(t *testing.T) {
			filter, err := SeccompFilter(arch, o)
			if err != nil {
				t.Fatal(err)
			}
			if out, err := runBwrapSeccomp(t, bwrap, filter, "/bin/true"); err != nil {
				t.Fatalf("/bin/true: %v\n%s", err, out)
			}
			if out, err := runBwrapSeccomp(t, bwrap, filter, "/bin/sh", "-c", "/bin/true | /bin/cat && echo piped"); err != nil || !strings.Contains(out, "piped") {
				t.Errorf("shell pipeline: %v\n%s", err, out)
			}
			if _, err := exec.LookPath("unshare"); err == nil {
				out, err := runBwrapSeccomp(t, bwrap, filter, "unshare", "-U", "true")
				if err == nil || !strings.Contains(out, "Operation not permitted") {
					t.Errorf("unshare -U true: %v\n%s", err, out)
				}
			}

			out, err := runBwrapSeccomp(t, bwrap, filter, append([]string{probe}, checks...)...)
			if err != nil {
				t.Fatalf("probe: %v\n%s", err, out)
			}
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				name, result, _ := strings.Cut(line, " ")
				got[name] = result
			}
			unix := "errno 1"
			if o.AllowUnixSockets {
				unix = "ok"
			}
			want := map[string]string{
				"unix-socket":          unix,
				"inet-socket":          "ok",
				"socketpair":           unix,
				"vsock-socket":         "errno 1",
				"netlink-route":        "ok",
				"netlink-audit":        "errno 1",
				"chmod-plain":          "ok",
				"chmod-setuid":         "errno 1",
				"fchmod-setgid":        "errno 1",
				"create-setuid":        "errno 1",
				"mkdir-setgid":         "errno 1",
				"openat2":              "errno 38",
				"unshare-user":         "errno 1",
				"clone-newuser":        "errno 1",
				"fork-exec":            "ok",
				"ptrace":               "errno 1",
				"keyctl":               "errno 1",
				"io-uring":             "errno 1",
				"clone3":               "errno 38",
				"mount":                "errno 1",
				"personality-query":    "ok",
				"personality-norandom": "errno 1",
			}
			for name, w := range want {
				if got[name] != w {
					t.Errorf("%s: got %q, want %q", name, got[name], w)
				}
			}
			if t.Failed() {
				t.Logf("probe output:\n%s", out)
			}
		})
	}
}
