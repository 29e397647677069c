package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestBwrapArgs(t *testing.T) {
	ws, hooks := os.NewFile(100, "/w"), os.NewFile(101, "/w/.git")
	p := Profile{
		Env: []string{"SECRET_TOKEN=hunter2", "PATH=/usr/bin"}, Dir: "/w", Home: "/h",
		WritePaths: []string{"/w"}, Network: NetworkDeny, Limits: DefaultLimits,
	}
	mounts := []mount{
		{op: "--tmpfs", dst: "/w/.ssh", size: 4096, rank: rankDeny},
		{op: "--ro-bind-fd", file: hooks, dst: "/w/.git", rank: rankProtect},
		{op: "--bind-fd", file: ws, dst: "/w", rank: rankWrite},
		{op: "--ro-bind", src: "/etc", dst: "/etc", rank: rankRead},
		{op: "--ro-bind", src: "/dev/null", dst: "/etc/shadow", rank: rankDeny},
		{op: "--symlink", src: "usr/bin", dst: "/bin"},
		{op: "--tmpfs", dst: "/h", size: 1 << 20, rank: rankWrite},
	}
	args, files := bwrapArgs(&p, mounts, "/usr/bin/env", []string{"env", "-i"}, true)
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session", "--cap-drop ALL",
		"--symlink usr/bin /bin", "--ro-bind /etc /etc", "--bind-fd 7 /w", "--ro-bind-fd 8 /w/.git",
		"--size 4096 --tmpfs /w/.ssh", "--ro-bind /dev/null /etc/shadow", "--size 1048576 --tmpfs /h",
		"--size 268435456 --tmpfs /tmp", "--size 67108864 --tmpfs /dev/shm", "--remount-ro /w/.ssh", "--remount-ro /dev",
		"--chdir /w", "--seccomp 3", "--json-status-fd 4", "--block-fd 5", "--sync-fd 6", "--argv0 env -- /usr/bin/env -i",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q in %s", want, joined)
		}
	}
	if len(files) != 2 || files[0] != ws || files[1] != hooks {
		t.Errorf("descriptors %v, want the workspace then .git", files)
	}
	for _, never := range []string{"hunter2", "SECRET_TOKEN"} {
		if strings.Contains(joined, never) {
			t.Errorf("%q must not appear in bwrap's argv: %s", never, joined)
		}
	}
	// Shallowest first: /w before /w/.git and /w/.ssh; /etc before /etc/shadow;
	// a denied directory made read-only only after every mount.
	idx := func(s string) int { return strings.Index(joined, s) }
	if !(idx("--bind-fd 7 /w") < idx("/w/.git") && idx("--bind-fd 7 /w") < idx("--tmpfs /w/.ssh") &&
		idx("--ro-bind /etc /etc") < idx("/etc/shadow") && idx("--remount-ro /w/.ssh") > idx("--ro-bind-fd 8 /w/.git")) {
		t.Errorf("mounts not ordered shallowest first: %s", joined)
	}
	p.Network = NetworkOpen
	// Never --uid/--gid: the sandbox runs as the user bwrap runs as (for a
	// root caller, an unprivileged user: outerNamespaces), never as root.
	if args, _ := bwrapArgs(&p, nil, "/bin/true", []string{"/bin/true"}, false); slices.Contains(args, "--unshare-net") ||
		slices.Contains(args, "--argv0") || slices.Contains(args, "--uid") || slices.Contains(args, "--gid") {
		t.Errorf("open network, no --argv0, no uid change: %v", args)
	}
}

// KnownHosts is a clean absolute path, and only in proxied mode.
func TestProfileValidateKnownHosts(t *testing.T) {
	base := func() Profile {
		return Profile{Dir: "/w", Home: "/h", Network: NetworkProxied, ProxySocket: "/s/proxy.sock", KnownHosts: "/s/known_hosts"}
	}
	if p := base(); p.Validate() != nil {
		t.Fatalf("base profile refused: %v", p.Validate())
	}
	for name, mutate := range map[string]func(*Profile){
		"loopback network": func(p *Profile) { p.Network, p.ProxySocket = NetworkLoopback, "" },
		"default network":  func(p *Profile) { p.Network, p.ProxySocket = "", "" },
		"open network":     func(p *Profile) { p.Network, p.ProxySocket = NetworkOpen, "" },
		"relative":         func(p *Profile) { p.KnownHosts = "known_hosts" },
		"unclean":          func(p *Profile) { p.KnownHosts = "/s/../known_hosts" },
		"trailing slash":   func(p *Profile) { p.KnownHosts = "/s/known_hosts/" },
	} {
		p := base()
		mutate(&p)
		if err := p.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// sandbox-exec writes every path into its profile: no newline there.
	p := base()
	p.KnownHosts, p.ProxyAddr = "/s/k\n(allow default)", "127.0.0.1:8080"
	if _, err := SandboxExecProfile(p); err == nil || !strings.Contains(err.Error(), "newline") {
		t.Errorf("a known hosts path with a newline: %v", err)
	}
}

// The ssh agent's socket is bound at SSHAgentPath in proxied mode only,
// as a clean absolute path; native and sandbox-exec refuse it.
func TestProfileSSHAgent(t *testing.T) {
	p := Profile{Dir: "/w", Home: "/h", Network: NetworkProxied, ProxySocket: "/s/proxy.sock", SSHAgent: "/s/agent.sock"}
	if err := p.Validate(); err != nil {
		t.Fatalf("base profile refused: %v", err)
	}
	for name, mutate := range map[string]func(*Profile){
		"loopback network": func(p *Profile) { p.Network, p.ProxySocket = NetworkLoopback, "" },
		"open network":     func(p *Profile) { p.Network, p.ProxySocket = NetworkOpen, "" },
		"relative":         func(p *Profile) { p.SSHAgent = "agent.sock" },
		"unclean":          func(p *Profile) { p.SSHAgent = "/s/../agent.sock" },
	} {
		q := p
		mutate(&q)
		if err := q.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := (Native{}).Wrap(context.Background(), exec.Command("/bin/true"), p); err == nil {
		t.Error("native accepted an ssh agent")
	}
	q := p
	q.ProxySocket, q.ProxyAddr = "", "127.0.0.1:8080"
	if _, err := SandboxExecProfile(q); err == nil || !strings.Contains(err.Error(), "ssh agent") {
		t.Errorf("sandbox-exec: %v", err)
	}
}

func TestParseBwrapVersion(t *testing.T) {
	for in, want := range map[string][3]int{"bubblewrap 0.8.0\n": {0, 8, 0}, "bubblewrap 0.11.1": {0, 11, 1}, "bubblewrap 1.2": {1, 2, 0}} {
		if v, err := parseBwrapVersion(in); err != nil || v != want {
			t.Errorf("parseBwrapVersion(%q) = %v, %v", in, v, err)
		}
	}
	for _, bad := range []string{"", "bwrap 0.8", "bubblewrap x.y", "bubblewrap"} {
		if _, err := parseBwrapVersion(bad); !errors.Is(err, ErrUnavailable) {
			t.Errorf("parseBwrapVersion(%q) accepted", bad)
		}
	}
	if !atLeast([3]int{0, 9, 0}, bwrapArgv0) || atLeast([3]int{0, 8, 9}, bwrapArgv0) || !atLeast([3]int{1, 0, 0}, bwrapArgv0) {
		t.Error("atLeast")
	}
}

// A bwrap set-up failure is refused as unavailable; a command's own stderr
// that looks like bwrap's is just output.
func TestBwrapSetupFailureClassified(t *testing.T) {
	if _, err := BwrapPath(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	run := func(p Profile, argv ...string) error {
		cmd := exec.Command(argv[0], argv[1:]...)
		conf, err := (Bwrap{}).Wrap(context.Background(), cmd, p)
		if err != nil {
			return err
		}
		defer conf.Close()
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err = cmd.Start()
		conf.AfterStart()
		if err != nil {
			return err
		}
		startErr := conf.Start(context.Background(), cmd.Process)
		if startErr != nil {
			conf.Signal(syscall.SIGKILL)
		}
		_ = cmd.Wait()
		if err := conf.Setup([]byte(stderr.String())); err != nil || startErr == nil {
			return err
		}
		return startErr
	}
	home := t.TempDir()
	ok := Profile{Env: []string{"PATH=/usr/bin:/bin"}, Dir: home, Home: home, WritePaths: []string{home}, Network: NetworkDeny}
	if err := run(ok, "/bin/sh", "-c", "echo 'bwrap: pretend failure' >&2; exit 1"); err != nil {
		t.Fatalf("a command printing bwrap: was classified as a sandbox failure: %v", err)
	}
	broken := ok
	broken.ReadPaths = []string{"/nonexistent/coily-missing"}
	err := run(broken, "/bin/true")
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "bwrap") {
		t.Fatalf("set-up failure: %v", err)
	}
}

func TestBwrapMissingIsUnavailable(t *testing.T) {
	cmd := exec.Command("/bin/true")
	_, err := (Bwrap{Path: "/nonexistent/bwrap"}).Wrap(context.Background(), cmd, Profile{Dir: "/", Home: "/tmp", Network: NetworkDeny})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "apt-get install bubblewrap") {
		t.Fatalf("missing bwrap: %v", err)
	}
	if cmd.Path != "/bin/true" {
		t.Fatal("the command was rewritten although the sandbox is unavailable")
	}
}
