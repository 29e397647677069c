package deploy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// debianRoot returns a fresh copy of a Debian root file system for this
// test: debootstrap's minbase of the host's release, plus systemd and
// procps (what a Debian server has) and bubblewrap (the package's
// Recommends, as `apt install ./coily.deb` would bring it). The tree is
// made once and kept in the user's cache directory; debootstrap needs
// Debian's archive (COILY_TEST_DEBIAN_MIRROR, default deb.debian.org).
func debianRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: dpkg installs into a Debian root, and the service runs there as coily")
	}
	for _, tool := range []string{"debootstrap", "unshare", "chroot", "systemd-analyze", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s (scripts/test.sh installs it)", tool)
		}
	}
	cacheHome, err := os.UserCacheDir()
	if err != nil {
		cacheHome = os.TempDir() // no HOME: kept as long as the machine's /tmp
	}
	suite := hostSuite()
	cache := filepath.Join(cacheHome, "coily-test", "debian-"+suite+"-"+runtime.GOARCH)
	if _, err := os.Stat(filepath.Join(cache, "complete")); err != nil {
		makeDebianRoot(t, cache, suite, "systemd,procps,bubblewrap")
	}
	root := filepath.Join(t.TempDir(), "root")
	if out, err := exec.Command("cp", "-a", filepath.Join(cache, "root"), root).CombinedOutput(); err != nil {
		t.Fatalf("copy the Debian root: %v\n%s", err, out)
	}
	return root
}

// makeDebianRoot runs debootstrap's minbase of suite, with the packages
// include (comma-separated), into cache/root, marked complete.
func makeDebianRoot(t *testing.T, cache, suite, include string) {
	t.Helper()
	mirror := os.Getenv("COILY_TEST_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(cache, "root.tmp-"+strconv.Itoa(os.Getpid()))
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+include,
		suite, tmp, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("debootstrap %s from %s: %v\n%s", suite, mirror, err, tail(out, 2000))
	}
	t.Logf("debootstrap %s: %v", suite, time.Since(start).Round(time.Second))
	os.RemoveAll(filepath.Join(cache, "root"))
	if err := os.Rename(tmp, filepath.Join(cache, "root")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "complete"), []byte(suite+" "+mirror+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostSuite is the host's Debian release, the one the package is for.
func hostSuite() string {
	b, err := os.ReadFile("/etc/os-release")
	if err == nil {
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "VERSION_CODENAME="); ok && v != "" {
				return strings.Trim(v, `"`)
			}
		}
	}
	return "bookworm"
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// inRoot runs a command chrooted into root (enough for dpkg and coily's
// read-only commands; the server runs in a container, see serveInRoot).
func inRoot(t *testing.T, root string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("chroot", append([]string{root}, args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustInRoot(t *testing.T, root string, args ...string) string {
	t.Helper()
	out, err := inRoot(t, root, args...)
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// ids reads a passwd or group file of the root: name to its fields.
func ids(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		m[fields[0]] = fields
	}
	return m
}

type owner struct {
	uid, gid int
}

// checkFile checks a path's type and mode bits and its owner and group.
func checkFile(t *testing.T, path string, dir bool, mode os.FileMode, want owner) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Error(err)
		return
	}
	if fi.IsDir() != dir || fi.Mode().Perm() != mode {
		t.Errorf("%s: %v, want mode %v (dir %v)", path, fi.Mode(), mode, dir)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if int(st.Uid) != want.uid || int(st.Gid) != want.gid {
		t.Errorf("%s: owned by %d:%d, want %d:%d", path, st.Uid, st.Gid, want.uid, want.gid)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDebInstall installs the package with dpkg on a clean Debian root and
// checks what it made; verifies the installed unit with systemd-analyze;
// runs the unit's ExecStart as the user coily with the installed files (in
// a container on that root: no systemd runs here) and drives it through
// the socket, a sandboxed command included; reinstalls over an edited
// policy; then removes and purges the package and checks that the state
// and the user stay.
func TestDebInstall(t *testing.T) {
	dist := release(t)
	root := debianRoot(t)
	deb := "coily_" + testDebVersion + "_amd64.deb"
	if runtime.GOARCH != "amd64" {
		t.Skipf("the test releases the amd64 package; this host is %s", runtime.GOARCH)
	}
	b, err := os.ReadFile(filepath.Join(dist, deb))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "tmp", deb), b, 0o644); err != nil {
		t.Fatal(err)
	}

	out := mustInRoot(t, root, "dpkg", "-i", "/tmp/"+deb)
	if !strings.Contains(out, "installed, not started") {
		t.Errorf("dpkg -i says:\n%s\nwant the postinst's next steps", out)
	}
	if got := mustInRoot(t, root, "dpkg-query", "-W", "-f", "${Status} ${Version}", "coily"); got != "install ok installed "+testDebVersion {
		t.Errorf("dpkg-query: %q", got)
	}

	// The user and group coily, as the preinst makes them.
	users, groups := ids(t, filepath.Join(root, "etc", "passwd")), ids(t, filepath.Join(root, "etc", "group"))
	u, g := users["coily"], groups["coily"]
	if u == nil || g == nil {
		t.Fatalf("no user or group coily: %q %q", u, g)
	}
	uid, gid := atoi(t, u[2]), atoi(t, g[2])
	if uid >= 1000 || uid == 0 || u[3] != g[2] || u[5] != "/var/lib/coily" || u[6] != "/usr/sbin/nologin" {
		t.Errorf("user coily: %q, want a system user, group coily, home /var/lib/coily, no login shell", u)
	}
	// The operators' group is another: group coily reads /etc/coily's
	// secrets, and operators must not. The service's user is a member of
	// coily-ops (it gives the socket to it); nobody else is, yet.
	ops := groups["coily-ops"]
	if ops == nil || ops[2] == g[2] || ops[3] != "coily" {
		t.Errorf("group coily-ops: %q, want its own gid and the member coily", ops)
	}
	if g[3] != "" {
		t.Errorf("group coily has members %q: operators belong in coily-ops", g[3])
	}
	if _, err := os.Stat(filepath.Join(root, "var", "lib", "coily", ".profile")); err == nil {
		t.Error("the user's home was populated")
	}
	rootOwned, coily := owner{0, 0}, owner{uid, gid}
	checkFile(t, filepath.Join(root, "usr/bin/coily"), false, 0o755, rootOwned)
	checkFile(t, filepath.Join(root, "usr/bin/coily-client"), false, 0o755, rootOwned)
	checkFile(t, filepath.Join(root, "usr/bin/coily-exec"), false, 0o755, rootOwned)
	checkFile(t, filepath.Join(root, "usr/bin/git-remote-coily"), false, 0o755, rootOwned)
	checkFile(t, filepath.Join(root, "usr/lib/systemd/system/coily.service"), false, 0o644, rootOwned)
	checkFile(t, filepath.Join(root, "etc/coily"), true, 0o750, owner{0, gid})
	checkFile(t, filepath.Join(root, "etc/coily/policy.yaml"), false, 0o640, owner{0, gid})
	// No tests in /etc: the owner's first rule would fail the shipped
	// policy's "nothing runs" cases, and the reload be refused; the
	// example's tests are there to copy.
	if _, err := os.Lstat(filepath.Join(root, "etc/coily/policy.tests.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/etc/coily/policy.tests.yaml: %v, want none installed", err)
	}
	checkFile(t, filepath.Join(root, "etc/coily/coily.env"), false, 0o640, owner{0, gid})
	checkFile(t, filepath.Join(root, "usr/share/doc/coily/examples/policy.tests.yaml"), false, 0o644, rootOwned)
	checkFile(t, filepath.Join(root, "var/lib/coily"), true, 0o710, coily)
	checkFile(t, filepath.Join(root, "usr/share/doc/coily/operations.md"), false, 0o644, rootOwned)
	checkFile(t, filepath.Join(root, "etc/apparmor.d/coily"), false, 0o644, rootOwned)
	if got, want := readFile(t, filepath.Join(root, "etc/apparmor.d/coily")), readFile(t, "apparmor/coily"); got != want {
		t.Error("/etc/apparmor.d/coily differs from deploy/apparmor/coily")
	}
	checkAppArmorLoad(t, root)

	for _, bin := range []string{"coily", "coily-client"} {
		if got := mustInRoot(t, root, bin, "version"); got != "coily "+testVersion+" (commit "+buildInfoCommit(t, dist)+")\n" {
			t.Errorf("%s version: %q", bin, got)
		}
	}
	if got := mustInRoot(t, root, "coily", "policy", "check", "/etc/coily/policy.yaml"); !strings.Contains(got, "OK") {
		t.Errorf("coily policy check of the installed policy: %q", got)
	}

	// The installed unit: systemd-analyze resolves its paths in the root.
	unitText, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system/coily.service"))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemd-analyze", "verify", "--man=no", "--root="+root, "coily.service").CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify of the installed unit: %v\n%s", err, out)
	}
	sec, err := exec.Command("systemd-analyze", "security", "--offline=true", "--root="+root, "coily.service").CombinedOutput()
	if level, ok := exposure(sec); err != nil || !ok || level > 4.0 {
		t.Errorf("systemd-analyze security of the installed unit: %v\n%s\nwant an exposure of 4.0 or less", err, tail(sec, 300))
	}

	state := serveInRoot(t, root, string(unitText), gid)

	// Reinstalling (dpkg's upgrade path) keeps the admin's policy and the state.
	edited, err := os.ReadFile(filepath.Join(root, "etc/coily/policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// An operator made the old way, in group coily (which reads the
	// secrets): the upgrade keeps alice an operator through coily-ops and
	// says she must leave coily.
	mustInRoot(t, root, "useradd", "--no-create-home", "alice")
	mustInRoot(t, root, "gpasswd", "-a", "alice", "coily")
	out = mustInRoot(t, root, "dpkg", "-i", "/tmp/"+deb)
	if strings.Contains(out, "installed, not started") {
		t.Errorf("a reinstall printed the first install's message:\n%s", out)
	}
	if !strings.Contains(out, "alice is a member of group coily") || !strings.Contains(out, "gpasswd -d alice coily") {
		t.Errorf("the upgrade did not say that alice must leave group coily:\n%s", out)
	}
	if ops := ids(t, filepath.Join(root, "etc", "group"))["coily-ops"]; ops == nil || !slices.Contains(strings.Split(ops[3], ","), "alice") {
		t.Errorf("group coily-ops after the upgrade: %q, want alice in it", ops)
	}
	if now, _ := os.ReadFile(filepath.Join(root, "etc/coily/policy.yaml")); !bytes.Equal(now, edited) {
		t.Error("a reinstall replaced the edited /etc/coily/policy.yaml")
	}
	checkState(t, root, state)

	// Remove: the binaries and the unit go; the configuration, the state and the user stay.
	mustInRoot(t, root, "dpkg", "-r", "coily")
	for _, gone := range []string{"usr/bin/coily", "usr/bin/coily-client", "usr/bin/coily-exec", "usr/bin/git-remote-coily", "usr/lib/systemd/system/coily.service"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("/%s after dpkg -r: %v, want it gone", gone, err)
		}
	}
	if now, _ := os.ReadFile(filepath.Join(root, "etc/coily/policy.yaml")); !bytes.Equal(now, edited) {
		t.Error("dpkg -r removed or changed /etc/coily/policy.yaml (a conffile: kept until purge)")
	}
	if got := mustInRoot(t, root, "dpkg-query", "-W", "-f", "${Status}", "coily"); got != "deinstall ok config-files" {
		t.Errorf("dpkg-query after remove: %q", got)
	}
	checkState(t, root, state)
	if ids(t, filepath.Join(root, "etc", "passwd"))["coily"] == nil {
		t.Error("dpkg -r removed the user coily, who owns the state")
	}

	// Purge: the configuration goes; the state and the user still stay.
	out = mustInRoot(t, root, "dpkg", "--purge", "coily")
	if !strings.Contains(out, "kept /var/lib/coily") {
		t.Errorf("dpkg --purge says:\n%s\nwant it to say the state was kept", out)
	}
	for _, gone := range []string{"etc/coily/policy.yaml", "etc/coily/coily.env"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("/%s after purge: %v, want it gone", gone, err)
		}
	}
	checkState(t, root, state)
	if ids(t, filepath.Join(root, "etc", "passwd"))["coily"] == nil {
		t.Error("dpkg --purge removed the user coily, who owns the state")
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkAppArmorLoad runs the installed postinst again with stand-ins for
// AppArmor's tools (the root has none, and no AppArmor runs in a chroot):
// with AppArmor disabled it loads nothing; enabled, it runs
// `apparmor_parser -r /etc/apparmor.d/coily`, and a parser that fails is
// reported without failing the configuration.
func checkAppArmorLoad(t *testing.T, root string) {
	t.Helper()
	sbin := filepath.Join(root, "usr", "sbin")
	log := filepath.Join(root, "tmp", "apparmor_parser.args")
	stub := func(name, script string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(sbin, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	defer os.Remove(filepath.Join(sbin, "apparmor_parser"))
	defer os.Remove(filepath.Join(sbin, "aa-enabled"))
	stub("apparmor_parser", `echo "$@" >>/tmp/apparmor_parser.args; exit 1`)
	postinst := []string{"/var/lib/dpkg/info/coily.postinst", "configure", testDebVersion}

	stub("aa-enabled", "exit 1")
	mustInRoot(t, root, postinst...)
	if _, err := os.Stat(log); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the postinst ran apparmor_parser with AppArmor disabled: %v", err)
	}

	stub("aa-enabled", "exit 0")
	out := mustInRoot(t, root, postinst...)
	if got := readFile(t, log); got != "-r /etc/apparmor.d/coily\n" {
		t.Errorf("apparmor_parser ran with %q, want -r /etc/apparmor.d/coily", got)
	}
	if !strings.Contains(out, "could not load /etc/apparmor.d/coily") {
		t.Errorf("the postinst says:\n%s\nwant it to report the profile it could not load", out)
	}
}

// checkState compares the state directory's files with their contents
// when the server stopped.
func checkState(t *testing.T, root string, want map[string]string) {
	t.Helper()
	for rel, sum := range want {
		if got := fileSHA256(t, filepath.Join(root, rel)); got != sum {
			t.Errorf("/%s changed", rel)
		}
	}
}
