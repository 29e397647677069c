package sandbox

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

type fakeFS struct {
	files map[string]bool // path → is a directory
	links map[string]string
}

func (f fakeFS) exists(p string) (bool, bool) { dir, ok := f.files[p]; return ok, dir }
func (f fakeFS) link(p string) (string, bool, bool) {
	if t, ok := f.links[p]; ok {
		return t, true, false
	}
	dir, ok := f.files[p]
	return "", false, ok && dir
}

func TestBwrapArgs(t *testing.T) {
	fs := fakeFS{
		files: map[string]bool{"/usr": true, "/etc": true, "/etc/ssh": true, "/etc/shadow": false,
			"/w": true, "/w/.git/hooks": true, "/w/.ssh": true, "/home/u/.ssh": true, "/srv/state": true},
		links: map[string]string{"/bin": "usr/bin"},
	}
	p := Profile{
		Env: []string{"SECRET_TOKEN=hunter2", "PATH=/usr/bin"}, Dir: "/w", Home: "/h",
		WritePaths: []string{"/w"}, ProtectPaths: []string{"/w/.git/hooks", "/w/missing"},
		DenyPaths: []string{"/etc/ssh", "/etc/shadow", "/w/.ssh", "/home/u/.ssh", "/srv/state"},
		Network:   NetworkDeny,
	}
	args, err := bwrapArgs(p, []string{"/usr/bin/env"}, fs, "/opt/coily")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session", "--cap-drop ALL",
		"--symlink usr/bin /bin", "--ro-bind /usr /usr", "--bind /w /w", "--ro-bind /w/.git/hooks /w/.git/hooks",
		"--tmpfs /w/.ssh", "--tmpfs /etc/ssh", "--ro-bind /dev/null /etc/shadow", "--chdir /w",
		"--seccomp 3", "--json-status-fd 4", "-- /usr/bin/env",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q in %s", want, joined)
		}
	}
	for _, never := range []string{"hunter2", "SECRET_TOKEN", "/home/u/.ssh", "/srv/state", "/w/missing"} {
		if strings.Contains(joined, never) {
			t.Errorf("%q must not appear in bwrap's argv: %s", never, joined)
		}
	}
	// Shallowest first: /w before /w/.git/hooks and /w/.ssh; /etc before /etc/ssh.
	idx := func(s string) int { return strings.Index(joined, s) }
	if !(idx("--bind /w /w") < idx("/w/.git/hooks") && idx("--bind /w /w") < idx("--tmpfs /w/.ssh") &&
		idx("--ro-bind /etc /etc") < idx("--tmpfs /etc/ssh")) {
		t.Errorf("binds not ordered shallowest first: %s", joined)
	}
	p.Network = NetworkOpen
	if args, _ := bwrapArgs(p, []string{"/bin/true"}, fs, ""); slices.Contains(args, "--unshare-net") {
		t.Error("open network still unshares the network")
	}
	p.Network = NetworkProxied
	if _, err := bwrapArgs(p, []string{"/bin/true"}, fs, "/opt/coily"); err == nil {
		t.Error("proxied without a proxy socket accepted")
	}
	p.ProxySocket = "/srv/egress.sock"
	if _, err := bwrapArgs(p, []string{"/bin/true"}, fs, ""); !errors.Is(err, ErrUnavailable) {
		t.Errorf("proxied without a bridge: %v", err)
	}
	args, err = bwrapArgs(p, []string{"/bin/true"}, fs, "/opt/coily")
	joined = strings.Join(args, " ")
	if err != nil || !strings.Contains(joined, "--unshare-net") || !strings.Contains(joined, "--bind /srv/egress.sock "+ProxySocketPath) ||
		!strings.HasSuffix(joined, "-- /run/coily/bridge __netbridge --proxy-socket "+ProxySocketPath+" -- /bin/true") {
		t.Errorf("proxied: %v %s", err, joined)
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
		_ = cmd.Wait()
		return conf.Setup([]byte(stderr.String()))
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
