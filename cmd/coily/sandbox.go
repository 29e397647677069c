package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"coily.dev/coily/audit"
	"coily.dev/coily/cli"
	"coily.dev/coily/sandbox"
)

func sandboxCmd(a *cli.App) *cobra.Command {
	return group("sandbox", "check the sandbox on this host, or run a command in it by hand",
		`Check that the sandbox (bubblewrap on Linux, sandbox-exec on macOS) works on this host and why
not, or run one command locally under the profile the server builds: to try rules and egress
allowlists by hand.`,
		command(a, spec{use: "check", short: "tell what works on this host, and why not",
			flags: func(fs *pflag.FlagSet) runFunc { return sandboxCheck }}),
		command(a, spec{use: "exec [flags] -- ARGV...", short: "run one command locally under the server's sandbox profile",
			long: sandboxExecLong, args: cli.ArgsAfterDash("command"),
			example: `  coily sandbox exec --workspace . -- git status
  coily sandbox exec --network proxied --egress-preset npm -- npm install left-pad`,
			flags: sandboxExecFlags}),
	)
}

// sandboxCheck tells what works on this host, and why not.
func sandboxCheck(ctx context.Context, e *env) int {
	backend := defaultBackend()
	fmt.Fprintf(e.stdout, "platform:  %s/%s, default backend %s\n", runtime.GOOS, runtime.GOARCH, backend.Name())
	ok := true
	report := func(what string, err error) {
		if err != nil {
			ok = false
			fmt.Fprintf(e.stdout, "FAIL  %s: %v\n", what, err)
			return
		}
		fmt.Fprintf(e.stdout, "ok    %s\n", what)
	}
	if runtime.GOOS == "linux" {
		path, err := sandbox.BwrapPath()
		report("bubblewrap installed ("+path+")", err)
		if err == nil {
			v, err := sandbox.BwrapVersion(path)
			argv0 := "argv[0] passed as given (--argv0)"
			if err == nil && v[0] == 0 && v[1] < 9 {
				argv0 = "argv[0] passed as given for system paths only (bubblewrap before 0.9 has no --argv0)"
			}
			report(fmt.Sprintf("bubblewrap %d.%d.%d: %s", v[0], v[1], v[2], argv0), err)
		}
		_, err = sandbox.HostSeccompArch()
		report("seccomp filter for this architecture", err)
		report("user namespaces for this user", sandbox.CheckUserNamespaces())
		if r := sandbox.DetectRuntime(); r != "" && sandbox.OwnProc() {
			fmt.Fprintf(e.stdout, "info  in a %s container: bubblewrap starts with a /proc of its own (unshare); the container needs %s (docs/operations.md, In a container)\n",
				r, sandbox.ContainerFlag(r, "Can't mount proc"))
		}
		if os.Geteuid() == 0 {
			fmt.Fprintf(e.stdout, "info  running as root: sandboxes run as %s (--sandbox-user), never as root; coily serve refuses root without --allow-root\n", sandbox.DefaultUser())
		}
		if g, err := sandbox.InspectCgroups(); err != nil {
			fmt.Fprintf(e.stdout, "info  limits: rlimits only (%v); for cgroups (memory.max, pids.max, cgroup.kill), run the server under systemd with Delegate=yes (deploy/coily.service)\n", err)
		} else {
			fmt.Fprintf(e.stdout, "info  limits: commands get cgroups under %s (memory controller %v, pids controller %v), rlimits besides\n", g.Dir, g.Memory, g.Pids)
		}
		l := sandbox.DefaultLimits
		fmt.Fprintf(e.stdout, "info  default limits: memory %d MiB, %d processes, %d open files, files up to %d MiB, /tmp %d MiB, /dev/shm %d MiB\n",
			l.Memory>>20, l.Processes, l.OpenFiles, l.FileSize>>20, l.Tmp>>20, l.Shm>>20)
	}
	for _, mode := range []sandbox.Network{sandbox.NetworkDeny, sandbox.NetworkOpen} {
		code, err := runConfined(ctx, backend, profileFor(mode), []string{"/bin/true"}, nil, io.Discard, io.Discard, nil)
		if err == nil && code != 0 {
			err = fmt.Errorf("/bin/true exited %d", code)
		}
		report("run /bin/true confined, network "+string(mode), err)
	}
	if !ok {
		fmt.Fprintln(e.stdout, "the sandbox is not usable here: coily refuses sandboxed rules with sandbox-unavailable")
		return 1
	}
	fmt.Fprintln(e.stdout, "the sandbox works on this host")
	return 0
}

func profileFor(mode sandbox.Network) sandbox.ProfileInput {
	return sandbox.ProfileInput{Network: mode}
}

const sandboxExecLong = `Run one command locally under the profile the server builds, and exit with its code (125 when the
sandbox cannot be set up). With --network proxied and no --proxy-socket, coily runs its own egress
proxy with the --egress-* allowlist and prints the proxy's rows to stderr when the command ends.`

type sandboxExecOptions struct {
	workspace, network, proxy, knownHosts, sandboxUser *string
	eg                                                 *egressFlags
	fs                                                 *pflag.FlagSet
}

func sandboxExecFlags(fs *pflag.FlagSet) runFunc {
	o := sandboxExecOptions{fs: fs}
	o.workspace = stringFlag(fs, "workspace", "COILY_WORKSPACE", "", "writable workspace (default: a fresh temporary directory)")
	o.network = stringFlag(fs, "network", "COILY_NETWORK", "deny", "network: deny, loopback, proxied or open")
	o.proxy = stringFlag(fs, "proxy-socket", "COILY_PROXY_SOCKET", "", "with --network proxied: an egress proxy's unix socket (default: coily runs its own, with the --egress-* allowlist)")
	o.eg = addEgressFlags(fs)
	o.knownHosts = stringFlag(fs, "known-hosts", "COILY_KNOWN_HOSTS", "", "with --network proxied: a known_hosts file, the only ssh host keys git over ssh trusts")
	o.sandboxUser = sandboxUserFlag(fs)
	return func(ctx context.Context, e *env) int { return sandboxExec(ctx, e, o) }
}

// sandboxExec runs one command locally under the same profile builder the
// server uses, and exits with the command's code (125 when the sandbox
// cannot be set up). It prints nothing of its own, except with --network
// proxied and no --proxy-socket: then it runs its own egress proxy with
// the --egress-* allowlist and prints the proxy's rows to stderr after
// the command ends.
func sandboxExec(ctx context.Context, e *env, o sandboxExecOptions) int {
	fs, workspace, network, proxy, knownHosts, egFlags, sbUser := o.fs, o.workspace, o.network, o.proxy, o.knownHosts, o.eg, o.sandboxUser
	usage := func(why string, args ...any) int {
		printLine(e.stderr, "coily sandbox exec: "+why, args...)
		printLine(e.stderr, "Run 'coily sandbox exec --help' for usage.")
		return 2
	}
	mode, err := sandbox.ParseNetwork(*network)
	egGiven := givenOn(fs)
	switch {
	case err != nil:
		return usage("--network: %v", err)
	case *proxy != "" && mode != sandbox.NetworkProxied:
		return usage("--proxy-socket needs --network proxied")
	case egGiven != "" && mode != sandbox.NetworkProxied:
		return usage("%s needs --network proxied", egGiven)
	case egGiven != "" && *proxy != "":
		return usage("%s sets the allowlist of coily's own proxy; with --proxy-socket, that proxy's own applies", egGiven)
	}
	in := profileFor(mode)
	if in.User, err = sandboxUser(*sbUser); err != nil {
		return usage("%v", err)
	}
	if *proxy != "" {
		in.Binds = append(in.Binds, sandbox.Bind{At: sandbox.ProxySocketPath, Path: *proxy})
	}
	kh, err := knownHostsFlag(*knownHosts, mode)
	if err != nil {
		return usage("%v", err)
	}
	if kh != "" {
		in.Binds = append(in.Binds, sandbox.Bind{At: sandbox.KnownHostsPath, Path: kh})
	}
	if *workspace != "" {
		// Resolved here, by the operator's command line: the sandbox opens
		// the result without following any link in it.
		if in.Workspace, err = filepath.Abs(*workspace); err == nil {
			in.Workspace, err = filepath.EvalSymlinks(in.Workspace)
		}
		if err != nil {
			printLine(e.stderr, "coily sandbox exec: --workspace: %v", err)
			return 2
		}
		in.Dir = in.Workspace
	}
	var own *ownProxy
	if mode == sandbox.NetworkProxied && *proxy == "" {
		eg, err := egFlags.parse()
		if err != nil {
			return usage("%v", err)
		}
		if own, err = startOwnProxy(eg, in.User); err != nil {
			printLine(e.stderr, "coily: refused (sandbox-unavailable): %v", err)
			return 125
		}
		in.Binds = append(in.Binds, sandbox.Bind{At: sandbox.ProxySocketPath, Path: own.socket})
		if own.bundle != nil {
			in.Binds = append(in.Binds, sandbox.Bind{At: sandbox.CAPath, File: own.bundle})
		}
	}
	code, err := runConfined(ctx, defaultBackend(), in, e.args, e.stdin, e.stdout, e.stderr, own.childEnv())
	if own != nil {
		rows, reqs := own.stop()
		printRows(e.stderr, rows, err == nil)
		for _, q := range reqs {
			printLine(e.stderr, "coily: %s", egressRequestLine(q))
		}
	}
	if err != nil {
		printLine(e.stderr, "coily: refused (sandbox-unavailable): %v", err)
		return 125
	}
	return code
}

// printRows prints sandbox exec's egress rows, as `audit show` does, each
// line marked as coily's; ran says the command ran, so no row means it
// reached nothing.
func printRows(w io.Writer, rows []audit.EgressRow, ran bool) {
	for _, r := range rows {
		printLine(w, "coily: %s", egressLine(r))
	}
	if len(rows) == 0 && ran {
		printLine(w, "coily: egress: no connections")
	}
}

// knownHostsFlag resolves --known-hosts, which needs --network proxied.
func knownHostsFlag(path string, mode sandbox.Network) (string, error) {
	if path == "" {
		return "", nil
	}
	if mode != sandbox.NetworkProxied {
		return "", errors.New("--known-hosts needs --network proxied")
	}
	return filepath.Abs(path)
}

// runConfined runs argv under the default profile built from in, with a
// private home, and returns its exit code (128+N for signal N).
func runConfined(ctx context.Context, box sandbox.Sandbox, in sandbox.ProfileInput, argv []string, stdin io.Reader, stdout, stderr io.Writer, env map[string]string) (int, error) {
	home, err := os.MkdirTemp("", "coily-sandbox-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(home)
	if in.Workspace == "" {
		in.Workspace, in.Dir = home, home
	}
	in.Home, in.Env = home, sandbox.Environ(home, env)
	if h, err := os.UserHomeDir(); err == nil {
		in.UserHomes = []string{h, "/root"}
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return 127, nil
	}
	cmd := exec.CommandContext(ctx, path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout = stdin, stdout
	conf, err := box.Wrap(ctx, cmd, sandbox.DefaultProfile(in))
	if err != nil {
		return 0, err
	}
	defer conf.Close()
	dieWithParent(cmd)
	errHead := &headWriter{w: stderr}
	cmd.Stderr = errHead
	err = cmd.Start()
	conf.AfterStart()
	if err != nil {
		return 0, err
	}
	startErr := conf.Start(ctx, cmd.Process)
	if startErr != nil {
		conf.Signal(syscall.SIGKILL)
	}
	err = cmd.Wait()
	if serr := conf.Setup(errHead.head); serr != nil {
		return 0, serr
	}
	if startErr != nil {
		return 0, startErr
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

// defaultBackend is the platform's sandbox.
func defaultBackend() sandbox.Sandbox {
	if runtime.GOOS == "darwin" {
		return sandbox.SandboxExec{}
	}
	bridge, _ := os.Executable()
	return sandbox.Bwrap{Bridge: bridge}
}

// headWriter passes output on and keeps its first 4 KiB.
type headWriter struct {
	w    io.Writer
	head []byte
}

func (h *headWriter) Write(p []byte) (int, error) {
	if len(h.head) < 4<<10 {
		h.head = append(h.head, p[:min(len(p), 4<<10-len(h.head))]...)
	}
	return h.w.Write(p)
}
